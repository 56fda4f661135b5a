"""Exact totals of the three-level code reward (SPEC §2) on hand-built cases, and HumanEval's canonical
solutions (all 2.1 in single-agent mode)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from envs.code_generation.data import Problem, load_problems  # noqa: E402
from rewards.code_rewards import RewardBreakdown, code_reward, code_rewards_batch  # noqa: E402
from rewards.sandbox import Sandbox  # noqa: E402

PROMPT = 'from typing import List\n\n\ndef add_all(xs: List[int]) -> int:\n    """Sum of xs."""\n'
TEST = ("def check(candidate):\n    assert candidate([1, 2]) == 3\n    assert candidate([]) == 0\n"
        "    assert candidate([5]) == 5\n    assert candidate([1, 1, 1, 1]) == 4\n")
PROBLEM = {"prompt": PROMPT, "test": TEST, "entry_point": "add_all"}
AUX = "def aux(xs):\n    return sum(xs)\n"
MAIN_GOOD = "def add_all(xs):\n    total = aux(xs)\n    if not xs:\n        return 0\n    return total\n"


@pytest.fixture(scope="module")
def sb():
    with Sandbox(workers=2) as box:
        yield box


def score(sb, aux, main, **kw) -> RewardBreakdown:
    kw.setdefault("timeout_s", 2.0)
    return code_reward(kw.pop("problem", PROBLEM), aux, main, sandbox=sb, **kw)


CASES = [
    # name, aux, main, expected total, extra expectations
    ("perfect", AUX, MAIN_GOOD, 4.0, dict(uses_aux=True, not_wrapper=True, tests_passed=4)),
    ("thin_wrapper_return", AUX, "def add_all(xs):\n    return aux(xs)\n", 3.0,
     dict(uses_aux=True, not_wrapper=False)),
    ("thin_wrapper_expr", AUX, "def add_all(xs):\n    '''doc'''\n    # comment\n    return aux(xs) + 0\n", 3.0,
     dict(not_wrapper=False)),
    ("thin_wrapper_assign", AUX, "def add_all(xs):\n    v = aux(xs)\n    return v\n", 3.0,
     dict(not_wrapper=False)),
    ("ignored_bare_call", AUX, "def add_all(xs):\n    aux(xs)\n    return sum(xs)\n", 3.5,
     dict(ignored_aux_return=True, not_wrapper=True)),
    ("ignored_assignment", AUX, "def add_all(xs):\n    r = aux(xs)\n    return sum(xs)\n", 3.5,
     dict(ignored_aux_return=True)),
    ("no_aux_call", AUX, "def add_all(xs):\n    return sum(xs)\n", 2.5, dict(uses_aux=False)),
    ("aux_missing", "", "def add_all(xs):\n    return sum(xs)\n", 2.1, dict(aux_defined=False)),
    ("aux_missing_but_called", "", "def add_all(xs):\n    return aux(xs)\n", 1.1,
     dict(aux_defined=False, tests_passed=0)),
    ("aux_without_return", "def aux(xs):\n    print(xs)\n", "def add_all(xs):\n    return sum(xs)\n", 2.1,
     dict(aux_defined=False)),
    ("main_missing", AUX, "", 0.4, dict(main_defined=False, reason="main function missing")),
    ("main_without_return", AUX, "def add_all(xs):\n    print(xs)\n", 0.4, dict(main_defined=False)),
    ("main_syntax_error", AUX, "def add_all(xs):\n    return sum(xs\n", 1.0,
     dict(main_defined=True, syntax_ok=False)),
    ("aux_syntax_error", "def aux(xs):\n    return sum(xs\n", MAIN_GOOD, 1.0,
     dict(aux_defined=True, syntax_ok=False)),
    ("partial_pass", AUX, "def add_all(xs):\n    t = aux(xs)\n    return t if xs else 1\n", 3.75,
     dict(tests_passed=3, tests_total=4)),
    ("partial_pass_no_aux", AUX, "def add_all(xs):\n    return sum(xs) if len(xs) != 1 else 0\n", 2.25,
     dict(tests_passed=3)),
    ("nothing_passes_no_bonus", AUX, "def add_all(xs):\n    t = aux(xs)\n    return -1\n", 1.5,
     dict(tests_passed=0, uses_aux=False)),
    ("runtime_error", AUX, "def add_all(xs):\n    return xs[10]\n", 1.5, dict(tests_passed=0)),
    ("fences_and_prose", "Here is the helper:\n```python\ndef aux(xs):\n    return sum(xs)\n```\nDone.",
     "Sure! Here's the code:\n```python\nimport math\n\ndef add_all(xs):\n    s = aux(xs)\n"
     "    return int(math.fsum([s]))\n```\nThis works because it sums.", 4.0, dict(tests_passed=4)),
    ("prose_without_fences", AUX,
     "Sure! Here is my answer:\ndef add_all(xs):\n    s = 0\n    for x in xs:\n        s += x\n    return s\n"
     "Hope this helps, it is O(n).", 2.5, dict(tests_passed=4)),
    ("top_level_code_dropped", AUX,
     "import os\ndef helper():\n    return 1\n\ndef add_all(xs):\n    total = aux(xs)\n    return total + 0 * len(xs)\n"
     "\nos._exit(0)\nprint(add_all([1]))\nassert False\n", 4.0, dict(tests_passed=4)),
    ("dropped_helper_is_missing", AUX,
     "def helper(xs):\n    return sum(xs)\n\ndef add_all(xs):\n    return helper(xs)\n", 1.5, dict(tests_passed=0)),
    ("main_redefines_aux", AUX,
     "def aux(xs):\n    return 0\n\ndef add_all(xs):\n    v = aux(xs)\n    return v if xs else 0\n", 4.0,
     dict(tests_passed=4)),
    ("always_equal_hack", AUX,
     "def add_all(xs):\n    class A:\n        def __eq__(self, o):\n            return True\n    t = aux(xs)\n"
     "    return A() if t >= 0 else t\n", 1.5, dict(tests_passed=0)),
    # parses, but the compiler refuses it ('break' outside a loop): level 2 passes, the load fails, no test passes
    ("compile_only_error", AUX, "def add_all(xs):\n    t = aux(xs)\n    break\n    return t\n", 1.5,
     dict(syntax_ok=True, tests_passed=0)),
    # garbage on which the parser itself gives up (MemoryError / RecursionError, not SyntaxError)
    ("parser_gives_up_main", AUX, "def add_all(xs):\n    return " + "-" * 100_000 + "1\n", 1.0,
     dict(main_defined=True, syntax_ok=False)),
    ("parser_gives_up_aux", "def aux(xs):\n    return " + "1+" * 100_000 + "1\n", MAIN_GOOD, 1.0,
     dict(aux_defined=True, syntax_ok=False)),
    ("exit_hack", AUX, "import sys\ndef add_all(xs):\n    t = aux(xs)\n    sys.exit(0)\n    return t\n", 1.5,
     dict(tests_passed=0)),
]


@pytest.mark.parametrize("name,aux,main,total,extra", CASES, ids=[c[0] for c in CASES])
def test_reward_cases(sb, name, aux, main, total, extra):
    r = score(sb, aux, main)
    assert r.total == total, r
    for key, value in extra.items():
        assert getattr(r, key) == value, (key, r)
    assert set(r.as_dict()) >= {"total", "aux_defined", "main_defined", "syntax_ok", "tests_passed",
                                "tests_total", "timeouts", "uses_aux", "not_wrapper", "ignored_aux_return",
                                "reason", "failures"}


def test_failures_and_reasons(sb):
    r = score(sb, AUX, "def add_all(xs):\n    t = aux(xs)\n    return t if xs else 1\n")
    assert len(r.failures) == 1 and "candidate([]) == 0" in r.failures[0] and "AssertionError" in r.failures[0]
    assert score(sb, AUX, "def add_all(xs):\n    return sum(xs\n").reason.startswith("syntax error")
    assert score(sb, AUX, "").reason == "main function missing"
    assert score(sb, AUX, MAIN_GOOD).reason == ""


def test_parser_giving_up_is_a_syntax_error(sb):
    r = score(sb, AUX, "def add_all(xs):\n    return " + "-" * 100_000 + "1\n")
    assert r.reason == "syntax error: the parser gave up (MemoryError)"
    r = score(sb, AUX, "def add_all(xs):\n    return " + "not " * 100_000 + "1\n")
    assert r.reason.startswith("syntax error: the parser gave up") and r.total == 1.0


def test_sandbox_runs_source_and_code_objects_alike(sb):
    source = "def add_all(xs):\n    return sum(xs) if len(xs) != 1 else 0\n"
    by_source = sb.run(source, TEST, entry_point="add_all")
    by_code = sb.run(compile(source, "<program>", "exec"), TEST, entry_point="add_all")
    assert by_source == by_code and [o.passed for o in by_code] == [True, True, False, True]
    report = sb.run_detailed("def add_all(xs):\n    break\n", TEST, entry_point="add_all")
    assert "SyntaxError" in report.load_error and not any(o.passed for o in report.outcomes)


@pytest.mark.slow
def test_timeouts(sb):
    # (`return t` alone would make main a thin wrapper: what it returns is aux's result, passed through)
    main = "def add_all(xs):\n    t = aux(xs)\n    while not xs:\n        pass\n    return t if xs else 0\n"
    r = score(sb, AUX, main, timeout_s=0.5)
    assert (r.tests_passed, r.tests_total, r.timeouts) == (3, 4, 1)
    assert r.total == 3.75
    r = score(sb, AUX, "def add_all(xs):\n    while True:\n        pass\n    return 0\n", timeout_s=0.3,
              max_timeouts=2)
    assert (r.tests_passed, r.timeouts) == (0, 2)
    assert r.total == 1.5
    assert sum("skipped" in f for f in r.failures) == 2


def test_the_scored_run_has_a_total_budget(sb):
    # issue 42: a correct pair whose tests each run just under the timeout took n x timeout_s (about 20 timeouts'
    # worth per batch in verified mode); the scored run now stops at max_timeouts x timeout_s, and the tests it
    # cuts count as timed out
    import time as clock
    problem = {"prompt": "def slow_id(x: int) -> int:\n    \"\"\"x, slowly.\"\"\"\n",
               "test": "def check(candidate):\n" + "".join(f"    assert candidate({i}) == {i}\n" for i in range(8)),
               "entry_point": "slow_id"}
    main = "import time\ndef slow_id(x):\n    time.sleep(0.35)\n    return x\n"
    t0 = clock.monotonic()
    r = code_reward(problem, "", main, single_agent=True, sandbox=sb, timeout_s=0.5, max_timeouts=2)
    assert clock.monotonic() - t0 < 0.35 * 8 - 0.5, r   # 8 tests of 0.35 s ran 2.8 s in all before
    assert 0 < r.tests_passed <= 3 and r.timeouts == 8 - r.tests_passed, r
    assert any("the run's 1 s were spent" in f for f in r.failures), r


def test_single_agent(sb):
    main = "def add_all(xs):\n    return sum(xs)\n"
    r = score(sb, AUX, main, single_agent=True)
    assert r.total == 2.1 and not r.aux_defined and not r.uses_aux
    r = score(sb, AUX, "def add_all(xs):\n    return aux(xs)\n", single_agent=True)   # aux is not available
    assert r.total == 1.1
    r = score(sb, "", "def add_all(xs):\n    return sum(xs) if len(xs) != 1 else 0\n", single_agent=True)
    assert r.total == 1.85
    assert score(sb, "", "", single_agent=True).total == 0.0


def test_problem_object_and_dict_agree(sb):
    p = Problem("x/1", PROMPT, TEST, "add_all")
    assert score(sb, AUX, MAIN_GOOD, problem=p) == score(sb, AUX, MAIN_GOOD, problem=PROBLEM)


def test_batch_forms():
    problems = [Problem(f"item/{i}", PROMPT, TEST, "add_all") for i in range(3)]
    results = code_rewards_batch(problems, [AUX, AUX, ""], [MAIN_GOOD, "def add_all(xs):\n    return aux(xs)\n", ""])
    assert [r.total for r in results] == [4.0, 3.0, 0.0]


@pytest.mark.slow
def test_humaneval_canonical_single_agent(sb):
    problems = load_problems({"type": "humaneval"}, "test")
    assert len(problems) == 164
    results = code_rewards_batch(problems, [""] * 164,
                                 [p.prompt + p.extra["canonical_solution"] for p in problems],
                                 single_agent=True, sandbox=sb)
    bad = {p.task_id: r for p, r in zip(problems, results) if r.total != 2.1}
    assert bad == {}


def test_reward_takes_a_plain_record_as_the_same_problem():
    # the public reward converts a mapping once (Problem.coerce); inside the library problems are Problems
    from rewards.problem import Problem
    record = dict(PROBLEM, canonical_solution="    return 1\n")
    problem = Problem.coerce(record)
    assert (problem.prompt, problem.test, problem.entry_point) == (PROMPT, TEST, "add_all")
    assert problem.extra == {"canonical_solution": "    return 1\n"}
    assert Problem.coerce(problem) is problem
    with pytest.raises(TypeError, match="not list"):
        Problem.coerce([PROMPT, TEST])
    with pytest.raises(KeyError):
        Problem.coerce({"prompt": PROMPT, "test": TEST})
