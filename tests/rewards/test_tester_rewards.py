"""The team rewards that generated tests pay (issue 27, section 2): hostile testers and hostile coders.

coder+tester: a tester is paid for the wrong codes of its group that its tests catch, each code judged as the
cleaned program the coder is scored on; a test that rejects the reference costs -1; a tautology, an assert that
inspects the program instead of calling it, and a test every candidate passes pay nothing.
self_tests: the verdict of a generated test is decided in the judge on the call's plain-data value, so a coder
that returns an always-equal object, reads the expected value from its caller's frame or patches the sandbox's
`__main__` earns no support.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cooprl.config import Run, load_config
from envs.code_generation.self_tests import score_functions
from envs.coder_tester.config import CoderTesterConfig
from envs.coder_tester.task import build_coder_tester_task
from rewards.judged_tests import judged_test
from rewards.problem import Problem

ROOT = Path(__file__).resolve().parents[2]
PROMPT = 'def add(a, b):\n    """Return a + b.\n    >>> add(1, 2)\n    3\n    """\n'
CHECK = ("def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(0, 0) == 0\n"
         "    assert candidate(-1, 1) == 0\n    assert candidate(2, 5) == 7\n")
HUMANEVAL_LIKE = {"task_id": "T/0", "entry_point": "add", "prompt": PROMPT, "test": CHECK,
                  "canonical_solution": "    return a + b\n"}
COOP_LIKE = {"task_id": "C/0", "entry_point": "add", "prompt": PROMPT, "test": CHECK,
             "reference_aux": "def aux(a, b):\n    return a + b\n",
             "reference_main": "def add(a, b):\n    return aux(a, b)\n"}

RIGHT = "    return a + b\n"
ALMOST = "    return abs(a) + b\n"            # fails candidate(-1, 1) only: 3 of 4 hidden tests
CRASH = "    return a + c\n"                  # a NameError on every call: wrong, and it loads
BARE = "def add(a, b):\n    return abs(a) + b\n"   # ALMOST restarting the function: no docstring
# tests of add, as the tester writes them after its prompt's `assert add(`
USEFUL = "-1, 1) == 0\n"                      # rejects ALMOST and CRASH
WEAK = "0, 3) == 3\n"                         # true, but ALMOST passes it (not the prompt's example)
WRONG_EXPECTED = "2, 2) == 5\n"
ZERO = "0, 0) == 0\n"                        # true, and every wrong code here passes it (the mutant a - b too)
# add's reference `a + b` has one mutation site: its wrong mutant `a - b` (rewards/mutants.py) is a wrong code in
# every group, next to the group's own


def _task(tmp_path: Path, record: dict, *overrides: str):
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps(record) + "\n" + json.dumps({**record, "task_id": record["task_id"] + "b"}) + "\n")
    config = load_config(ROOT / "configs" / "coder_tester_cpu.yaml",
                         [f"dataset.path={path}", "dataset.train_split=train[:1]", "dataset.eval_split=train[1:]",
                          "code_prompt.open_body=false", *overrides], task_config=CoderTesterConfig)
    task = build_coder_tester_task(Run.of(config, "magrpo"))
    return task, task.train_items[0]


def _tester_rewards(task, problem, joints):
    scores = task.score([problem] * len(joints), joints)
    return [s.metrics["tester_reward"] for s in scores], [s.metrics["coder_reward"] for s in scores]


# ------------------------------------------------------------------------ coder+tester: what a tester is paid

def test_a_code_that_loads_once_cleaned_is_judged_as_the_coder_is_scored(tmp_path):
    task, problem = _task(tmp_path, HUMANEVAL_LIKE)
    prose = ALMOST + "This adds the two numbers.\n"   # one line of prose: the raw text does not parse
    testers, coders = _tester_rewards(task, problem, [[RIGHT, WEAK], [prose, WEAK]])
    assert coders == [2.1, 1.85]             # the coder is scored on the cleaned program: 3 of 4
    assert testers == [0.5, 0.5]             # which passes add(0, 3) == 3: only the mutant a - b caught (was 1.0)
    testers, _ = _tester_rewards(task, problem, [[RIGHT, USEFUL], [prose, USEFUL]])
    assert testers == [1.0, 1.0]             # a test that rejects it catches it


def test_the_prompts_examples_copied_as_asserts_earn_nothing(tmp_path):
    # issue 42: a tester that copied the prompt's doctest examples was paid 0.78-0.94 on HumanEval for them; the
    # typed junk answers the examples right (a memoriser), so a test of shown calls only is vacuous
    task, problem = _task(tmp_path, HUMANEVAL_LIKE)
    copied = "1, 2) == 3\n"                  # the prompt's `>>> add(1, 2)` / `3`
    testers, _ = _tester_rewards(task, problem, [[RIGHT, copied], [ALMOST, copied]])
    assert testers == [0.0, 0.0]             # was 0.5: the mutant a - b fails it
    shown_twice = "1, 2) == 3 and add(1, 2) + 0 == 3\n"
    testers, _ = _tester_rewards(task, problem, [[RIGHT, shown_twice], [ALMOST, shown_twice]])
    assert testers == [0.0, 0.0]
    mixed = "1, 2) == 3 and add(-1, 1) == 0\n"   # a shown call beside one the prompt does not show: a test
    testers, _ = _tester_rewards(task, problem, [[RIGHT, mixed], [ALMOST, mixed]])
    assert testers == [1.0, 1.0]


def test_a_test_on_numbers_outside_the_hidden_calls_range_earns_nothing(tmp_path):
    # issue 42: asserts on inputs the prompt excludes (`n <= 0` where it says n is at least 1) paid 0.5, or -0.47
    # with a correct code in the group; the hidden check passes add's first argument -1..2 and its second 0..5
    task, problem = _task(tmp_path, HUMANEVAL_LIKE)
    for off in ("10, 1) == 11\n", "-5, 1) == -4\n", "1, 9) == 10\n", "-5, 1) == 7\n"):
        testers, _ = _tester_rewards(task, problem, [[RIGHT, off], [ALMOST, off]])
        assert testers == [0.0, 0.0], off    # caught the mutant a - b (0.5), or rejected the reference (-1)
    inside = "2, 1) == 3\n"
    testers, _ = _tester_rewards(task, problem, [[RIGHT, inside], [ALMOST, inside]])
    assert testers == [0.5, 0.5]             # in range: the mutant a - b caught, ALMOST passes it


def test_a_number_outside_the_range_earns_nothing_when_passed_by_keyword(tmp_path):
    # issue 42 (part 2, left at the first pass): the range rule saw literal positional arguments only, so
    # `add(a=10, b=1)` earned what `add(10, 1)` does not; a keyword naming a parameter is its position now
    task, problem = _task(tmp_path, HUMANEVAL_LIKE)
    for off in ("a=10, b=1) == 11\n", "1, b=9) == 10\n", "b=1, a=-5) == -4\n", "a=-5, b=1) == 7\n"):
        testers, _ = _tester_rewards(task, problem, [[RIGHT, off], [ALMOST, off]])
        assert testers == [0.0, 0.0], off
    inside = "b=1, a=2) == 3\n"
    testers, _ = _tester_rewards(task, problem, [[RIGHT, inside], [ALMOST, inside]])
    assert testers == [0.5, 0.5]             # in range by keyword: paid as `add(2, 1) == 3` is


def test_the_spec_range_of_a_check():
    from rewards.judged_tests import off_spec_range, spec_ranges
    ranges = spec_ranges(CHECK, "add")
    assert ranges == {0: (-1, 2), 1: (0, 5)}
    assert not off_spec_range("assert add(2, 5) == 7", "add", ranges)
    assert off_spec_range("assert add(3, 5) == 8", "add", ranges)
    assert not off_spec_range("assert add(x, 5) == 8", "add", ranges)   # not a literal: not judged here
    # by keyword: the prompt's parameters name the positions, in the check's calls and in a test's
    named = spec_ranges(CHECK, "add", ("a", "b"))
    assert named == {0: (-1, 2), 1: (0, 5), "a": (-1, 2), "b": (0, 5)}
    assert off_spec_range("assert add(b=5, a=3) == 8", "add", named)
    assert not off_spec_range("assert add(b=5, a=2) == 7", "add", named)
    by_keyword = CHECK.replace("candidate(2, 5)", "candidate(2, b=50)")
    assert spec_ranges(by_keyword, "add", ("a", "b")) == {0: (-1, 2), 1: (0, 50), "a": (-1, 2), "b": (0, 50)}
    assert spec_ranges(by_keyword, "add")[1] == (0, 2)   # without the names, b=50 was another argument
    assert spec_ranges("def check(candidate):\n    assert candidate(1, 'a') == 1\n    n = 3\n"
                       "    assert candidate(n, 'b') == 2\n", "f") == {}    # a computed argument: no range


def test_a_program_that_does_not_load_is_not_a_caught_bug(tmp_path):
    task, problem = _task(tmp_path, HUMANEVAL_LIKE)
    broken = "import no_such_module_anywhere\ndef add(a, b):\n    return a + b\n"   # parses; its import fails
    testers, coders = _tester_rewards(task, problem, [[RIGHT, ZERO], [broken, ZERO]])
    assert coders == [2.1, 1.1]
    assert testers == [0.0, 0.0]             # was 1.0: every assert "caught" the import error


def test_a_tautology_pays_nothing_even_when_a_wrong_code_crashes(tmp_path):
    task, problem = _task(tmp_path, HUMANEVAL_LIKE)
    for tautology in ("1, 2) == add(1, 2)\n", "1, 2) == add(1, 2) or add(0, 0) != add(0, 0)\n",
                      "3, 4) is not None or add(3, 4) is None\n"):
        testers, _ = _tester_rewards(task, problem, [[RIGHT, tautology], [ALMOST, tautology],
                                                     [CRASH, tautology]])
        assert testers == [0.0, 0.0, 0.0], tautology   # was 0.5, and 1.0 for catching the crash


def test_a_property_test_that_catches_a_wrong_code_is_paid(tmp_path):
    # comparing two different calls is no tautology: junk that differs with the arguments fails it
    task, problem = _task(tmp_path, HUMANEVAL_LIKE)
    lopsided = "    return a + b if a < 2 else a - b\n"    # add(2, 5) == -3: wrong, and add(2, 1) != add(1, 2)
    testers, _ = _tester_rewards(task, problem, [[RIGHT, "1, 2) == add(2, 1)\n"], [lopsided, WEAK]])
    assert testers == [1.0, 0.5]             # WEAK: lopsided passes it, the mutant a - b does not


def test_a_test_every_candidate_passes_pays_nothing_and_the_reference_is_a_gate(tmp_path):
    task, problem = _task(tmp_path, HUMANEVAL_LIKE)
    testers, _ = _tester_rewards(task, problem, [[RIGHT, ZERO], [ALMOST, ZERO]])
    assert testers == [0.0, 0.0]             # was 0.5: true of the reference, but it separates no code
    testers, _ = _tester_rewards(task, problem, [[RIGHT, USEFUL], [RIGHT, USEFUL]])
    assert testers == [1.0, 1.0]             # no wrong code in the group, but the mutant a - b
    testers, _ = _tester_rewards(task, problem, [[RIGHT, USEFUL + "assert add(" + WRONG_EXPECTED],
                                                 [ALMOST, USEFUL + "assert add(" + WEAK],
                                                 [CRASH, WEAK]])
    # wrong codes: ALMOST, CRASH (raises: caught by nothing), a - b. USEFUL rejects ALMOST and a - b on their values
    # (2/3); the wrong expected value rejects the reference (-1); WEAK rejects a - b (1/3)
    assert testers == [round((2 / 3 - 1) / 2, 6), 0.5, round(1 / 3, 6)]


@pytest.mark.parametrize("inspecting", ["1, 2) == 3 and 'aux' in globals()", "1, 2) == 3 and 'aux' in dir()",
                                        "1, 2) == 3 and add.__doc__ is not None",
                                        "1, 2) == 3 and add.__code__.co_argcount == 2 and aux(1, 2) == 3"])
def test_an_assert_that_inspects_the_program_pays_nothing(tmp_path, inspecting):
    # the reference of the coop set is aux + main and HumanEval's keeps the prompt's docstring: today both
    # tell it apart from a coder's code that restarts the function, so these "caught" every wrong code
    task, problem = _task(tmp_path, COOP_LIKE)
    testers, _ = _tester_rewards(task, problem, [[RIGHT, inspecting], [BARE, inspecting]])
    assert testers == [0.0, 0.0]
    task, problem = _task(tmp_path, HUMANEVAL_LIKE)
    testers, _ = _tester_rewards(task, problem, [[RIGHT, inspecting], [BARE, inspecting]])
    assert testers == [0.0, 0.0]


def test_the_reference_is_built_as_a_coders_code_is(tmp_path):
    # with open_body prompts (the shipped config's), the prompt ends with the body's indentation: the canonical
    # body glued to it unchanged did not parse, so every valid test "rejected the reference" (-1)
    task, problem = _task(tmp_path, HUMANEVAL_LIKE, "code_prompt.open_body=true")
    testers, coders = _tester_rewards(task, problem, [["return a + b\n", USEFUL], ["return abs(a) + b\n", USEFUL]])
    assert coders == [2.1, 1.85] and testers == [1.0, 1.0]


def test_tester_metrics_say_what_each_test_was(tmp_path):
    task, problem = _task(tmp_path, HUMANEVAL_LIKE)
    tests = USEFUL + "assert add(1, 2) == add(1, 2)\nassert add(" + WRONG_EXPECTED + "assert add.__doc__ or add(1, 2)\n"
    score = task.score([problem, problem], [[RIGHT, tests], [ALMOST, WEAK]])[0]
    assert score.metrics["tests_written"] == 4.0
    assert score.metrics["tests_judged"] == 0.75      # the inspecting one cannot be judged on plain data
    assert score.metrics["tests_valid"] == pytest.approx(2 / 3)
    assert score.metrics["tests_vacuous"] == pytest.approx(1 / 3)
    assert score.metrics["tester_reward"] == round((1.0 + 0.0 - 1.0 + 0.0) / 4, 6)   # USEFUL: ALMOST, a - b
    prompts = task.first_prompts(problem)
    feedback = task.next_prompts(problem, [[(prompts[0], RIGHT)], [(prompts[1], tests)]], [RIGHT, tests], score)[1]
    assert "Feedback: 2 of your 4 tests accept every correct solution; they catch 2 of 2 wrong solutions. 1 could " \
           "not be checked" in feedback and feedback.endswith("assert add(")


# ------------------------------------------------------------------------ which asserts the judge decides

def test_judged_tests_run_in_the_judge_on_the_calls_values():
    from rewards.judged_tests import judged_suite
    from rewards.sandbox import default_sandbox
    from rewards.self_tests import pass_row, run_judged
    tests = ["assert math.isclose(add(0.1, 0.2), 0.3)", "assert sorted(add([3], [1, 2])) == [1, 2, 3]",
             "assert isinstance(add(1, 2), int) and add('a', 'b')[-1] == 'b'", "assert add(add(1, 1), -2) == 0",
             "assert len(add([1], [2])) == 2 and abs(add(-5, 2)) == 3 and not add(0, 0)", "assert add(b=1, a=2) == 3"]
    judged = [judged_test("add", t) for t in tests]
    suite = judged_suite("add", judged)
    programs = [PROMPT + RIGHT, PROMPT + "    return a\n", PROMPT + ALWAYS_EQUAL]
    assert [pass_row(r) for r in run_judged(default_sandbox(), [(p, suite) for p in programs])] == [
        [1] * 6, [0, 0, 0, 0, 0, 0], [0] * 6]


# ------------------------------------------------------------------------ self_tests: hostile coders

ALWAYS_EQUAL = ("    class Same:\n        def __eq__(self, other):\n            return True\n"
                "        def __ne__(self, other):\n            return False\n    return Same()\n")
FRAME_READER = ("    import sys\n    consts = sys._getframe(1).f_code.co_consts\n"
                "    return [c for c in consts if isinstance(c, int) and not isinstance(c, bool)][-1]\n")
INSPECT_READER = ("    import inspect\n    frame = inspect.currentframe().f_back\n"
                  "    return [c for c in frame.f_code.co_consts if type(c) is int][-1]\n")
PATCHED_MAIN = ("    import __main__\n    if not getattr(__main__, 'patched', False):\n"
                "        send = __main__.frame\n"
                "        __main__.frame = lambda body: send(body.replace(b'[\"err\"', b'[\"ok\"'))\n"
                "        __main__.patched = True\n    return -1\n")


EQUAL_INT = ("    class Same(int):\n        def __eq__(self, other):\n            return True\n"
             "        __hash__ = int.__hash__\n    return Same(0)\n")
GLOBALS_READER = ("    import sys\n    frame = sys._getframe(1)\n"
                  "    return [v for v in frame.f_code.co_consts if type(v) is int][-1] if frame.f_code.co_name == "
                  "'<module>' else 0\n")


@pytest.mark.parametrize("hostile", [ALWAYS_EQUAL, EQUAL_INT, FRAME_READER, INSPECT_READER, GLOBALS_READER,
                                     PATCHED_MAIN],
                         ids=["always-equal", "equal-int", "frame", "inspect", "module-frame", "patched-main"])
def test_self_tests_pay_a_hostile_coder_nothing(hostile):
    # a check whose held-out tests no constant passes (the frame readers return 0 or -1 here)
    check = "def check(candidate):\n" + "".join(f"    assert candidate({a}, {b}) == {a + b}\n"
                                                for a, b in ((1, 2), (2, 3), (-4, 1), (10, 20)))
    problem = Problem("T/0", PROMPT, check, "add", {"canonical_solution": "    return a + b\n"})
    codes = [PROMPT + RIGHT, PROMPT + hostile]
    tests = ["assert add(2, 3) == 5", "assert add(-4, 1) == -3", "assert add(10, 20) == 30"]
    scores = score_functions([problem, problem], codes, "self_tests", group_tests=[tests, tests])
    assert scores[1].metrics["hidden_reward"] < 2.1    # a wrong code: the hidden tests judge it so
    assert scores[1].total == 1.1            # was 2.1: levels 1-2 only, no support
    assert scores[0].total == 2.1


def test_self_tests_drop_the_tests_that_junk_passes():
    problem = Problem("T/0", PROMPT, CHECK, "add")
    codes = [PROMPT + RIGHT, PROMPT + "    return a\n"]
    tautologies = ["assert add(1, 2) == add(1, 2)", "assert add(3, 4) is None or add(3, 4) is not None"]
    scores = score_functions([problem, problem], codes, "self_tests", group_tests=[tautologies, tautologies])
    # pool: the held-out add(0, 0) == 0, add(-1, 1) == 0, add(2, 5) == 7 (the wrong code passes the first); the
    # tautologies lent it 2/2.5 before
    assert [s.total for s in scores] == [2.1, round(1.1 + 1 / 3, 6)]


def test_self_tests_score_the_cleaned_program():
    problem = Problem("T/0", PROMPT, CHECK, "add")
    codes = [PROMPT + RIGHT + "This returns the sum.\n", PROMPT + ALMOST]
    scores = score_functions([problem, problem], codes, "self_tests",
                             group_tests=[["assert add(-1, 1) == 0"], ["assert add(-1, 1) == 0"]])
    assert [s.metrics["hidden_reward"] for s in scores] == [2.1, 1.85]
    # pool: the held-out add(0, 0) == 0, add(-1, 1) == 0 (the generated one is the same), add(2, 5) == 7; ALMOST
    # fails the second
    assert [s.total for s in scores] == [2.1, round(1.1 + 2 / 3, 6)]   # was [1.1, 2.1]: the raw text did not load


# ------------------------------------------------------------------------ the data sets' own tests

def _problems(name: str, kind: str):
    from types import SimpleNamespace
    from envs.code_generation.data import load_problems
    return load_problems(SimpleNamespace(name=name, type=kind, path=None), "test")


@pytest.mark.parametrize("open_body", [False, True], ids=["plain", "open-body"])
def test_every_reference_built_as_a_coders_code_passes_its_hidden_tests(open_body):
    # with open-body prompts the reference of 160 of HumanEval's 164 problems did not load before
    from envs.code_generation.prompts import open_body as opened
    from envs.code_generation.self_tests import reference_program
    from rewards.code_rewards import hidden_tests_suite as _suite
    from rewards.sandbox import default_sandbox
    sandbox = default_sandbox()
    problems = _problems("humaneval", "humaneval") + _problems("coop", "coophumaneval")
    problems = [opened(p) for p in problems] if open_body else problems

    def failures(problem):
        report = sandbox.run_detailed(reference_program(problem), _suite(problem.test, problem.entry_point,
                                                                         problem.prompt), 5.0, 2)
        return [] if report.outcomes and all(o.passed for o in report.outcomes) else [problem.task_id]

    assert len(problems) == 164 + 85
    assert sum(sandbox.map_detailed(failures, problems), []) == []


def test_the_data_sets_examples_and_one_line_tests_are_judged():
    # the asserts a data set writes are what a tester is asked for: nearly all must be judged tests
    from rewards.self_tests import example_asserts
    unjudged, examples, judged = set(), 0, 0
    for problem in _problems("humaneval", "humaneval") + _problems("coop", "coophumaneval"):
        for test in example_asserts(problem):
            examples += 1
            assert judged_test(problem.entry_point, test) is not None, test
        for line in problem.test.splitlines():
            if line.strip().startswith("assert candidate("):
                test = line.strip().replace("candidate(", problem.entry_point + "(")
                if judged_test(problem.entry_point, test) is None:
                    unjudged.add(problem.task_id)
                else:
                    judged += 1
    assert examples > 300 and judged > 1600
    # the only hidden asserts left out compare with a variable of the check (x, y, lst, encoded_str) or are cut at
    # a line break inside a list
    assert unjudged == {"HumanEval/1", "HumanEval/38", "HumanEval/44", "HumanEval/50", "HumanEval/53",
                        "HumanEval/87", "HumanEval/113", "HumanEval/151"}


# ------------------------------------------------------------------------ the judge: bounded, and one hash seed

def _peak_rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))


@pytest.fixture(scope="module")
def lone_worker():
    from rewards.sandbox import Sandbox
    with Sandbox(workers=1) as sandbox:
        yield sandbox


NESTED_STR_LIST = "assert f(1) != len(" + "str(list(" * 11 + "'ab'" + "))" * 11 + ")"   # 145 chars, ~100M values


@pytest.mark.parametrize("hostile", [NESTED_STR_LIST, "assert sum(range(10 ** 10)) == f(1)",
                                     "assert len('x' * 10 ** 9) == f(1)", "assert [0] * 10 ** 9 != f(1)"],
                         ids=["nested-str-list", "sum-range", "big-str", "big-list"])
def test_a_judged_test_runs_under_a_programs_bounds(lone_worker, hostile):
    # the gate takes the first (the others are built past it, as a gate's bug would let them through): before,
    # each ran in the worker itself, whose deadline was checked only at the candidate's calls (the first: 4.0 s
    # under a 1 s limit, the worker's peak memory 19 -> 267 MiB; the sum ran until the trainer gave up on it)
    import time
    from rewards.judged_tests import judged_suite
    if hostile == NESTED_STR_LIST:
        assert judged_test("f", hostile) is not None
    pid = lone_worker._slots[0].proc.pid
    peak = _peak_rss_kib(pid)
    start = time.monotonic()
    report = lone_worker.run_detailed("def f(x):\n    return x\n", judged_suite("f", [hostile, "assert f(2) == 2"]),
                                      1.0, 3)
    took = time.monotonic() - start
    assert [o.passed for o in report.outcomes] == [False, True]   # the next test still runs, on the same worker
    assert took < 2.5, took
    assert _peak_rss_kib(pid) - peak < 32 << 10                   # the worker did not grow (KiB)
    assert lone_worker._slots[0].proc.pid == pid                  # nor die


def test_a_call_that_raises_ends_only_its_own_judged_test(lone_worker):
    # the call raises in the program; the judge's test is aborted, the judge serves the next tests and jobs
    from rewards.judged_tests import judged_suite
    suite = judged_suite("f", ["assert f(0) == 0", "assert f(5) == 2", "assert f(0) == 1 or f(2) == 5",
                               "assert f(10) == 2"])
    for _ in range(2):
        report = lone_worker.run_detailed("def f(x):\n    return 10 // x\n", suite, 1.0, 2)
        assert [(o.passed, o.on_values) for o in report.outcomes] == [(False, False), (True, True), (False, False),
                                                                       (False, True)]
        assert "ZeroDivisionError" in report.outcomes[0].error


def _under_seed(expression: str, seed: str) -> str:
    """Return repr(eval(expression)) as a fresh interpreter with PYTHONHASHSEED=seed computes it."""
    import os
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", f"print(repr({expression}))"], capture_output=True, text=True,
                         env={**os.environ, "PYTHONHASHSEED": seed}, check=True)
    return out.stdout.strip()


def test_a_judged_tests_verdict_does_not_depend_on_the_worker():
    # each `python -I` worker drew its own hash seed (and its programs, forks of it, with it): `str(a_set)` in the
    # judge and `hash(s)` in a program differed from one worker to the next, so did these verdicts (the set goes
    # child -> worker -> judge: built three times, as the expected value is)
    from rewards.judged_tests import judged_suite
    from rewards.sandbox import WORKER_HASH_SEED, Sandbox
    words = sorted({"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"})
    program = "def f(x):\n    return hash(x) if type(x) is str else set(x)\n"
    tests = [f"assert f('cooprl') == {_under_seed(repr('cooprl') + '.__hash__()', WORKER_HASH_SEED)}",
             f"assert str(f({words!r})) == "
             f"{_under_seed(f'str(set(list(set(list(set({words!r}))))))', WORKER_HASH_SEED)}"]
    for _ in range(2):   # two workers, two draws of the seed before
        with Sandbox(workers=1) as sandbox:
            report = sandbox.run_detailed(program, judged_suite("f", tests), 2.0, 2)
        assert [o.passed for o in report.outcomes] == [True, True], report.outcomes


# ------------------------------------------------------------------------ paid for separating right from wrong (34)

COOP0 = json.loads((ROOT / "envs" / "code_generation" / "data" / "coop.jsonl").read_text().splitlines()[0])
# correct
REGEX = ("    import re\n    return re.sub(r'(.)\\1+', lambda m: m.group(1) + str(len(m.group(0))), text)\n")
RAISES_ON_EMPTY = "    if not text:\n        raise ValueError('empty')\n" + REGEX                              # wrong
DROPS_COUNTS = "    return ''.join(c for i, c in enumerate(text) if i == 0 or text[i - 1] != c)\n"         # wrong
GUARDED = "'') == compress_runs('') and compress_runs('') != None and str(compress_runs(''))[:4] != 'junk'\n"
TRUE_TEST = "'aab') == 'a2b'\n"
OFF_SPEC_PIN = "['x', 'x']) == 'x2'\n"     # the reference's loop takes a list; the spec says a string


def test_a_guarded_tautology_catches_no_wrong_code(tmp_path):
    # it rejects both junk stubs and "caught" the code that raises on '' (any call of '' does): it paid like a
    # true test, with no risk of -1
    task, problem = _task(tmp_path, COOP0)
    testers, _ = _tester_rewards(task, problem, [[REGEX, GUARDED], [RAISES_ON_EMPTY, GUARDED]])
    assert testers == [0.0, 0.0]             # was [1.0, 1.0]
    testers, _ = _tester_rewards(task, problem, [[REGEX, TRUE_TEST], [RAISES_ON_EMPTY, TRUE_TEST]])
    assert testers[0] == testers[1] > 0      # the true test rejects the reference's wrong mutants on their values


def test_a_test_that_rejects_a_correct_code_is_wrong(tmp_path):
    # REGEX passes every hidden test: a test that rejects it is wrong, whatever the reference does on a list
    task, problem = _task(tmp_path, COOP0)
    testers, _ = _tester_rewards(task, problem, [[REGEX, OFF_SPEC_PIN], [DROPS_COUNTS, OFF_SPEC_PIN]])
    assert testers == [-1.0, -1.0]           # was [1.0, 1.0]: it "caught" DROPS_COUNTS
    testers, _ = _tester_rewards(task, problem, [[REGEX, TRUE_TEST], [DROPS_COUNTS, TRUE_TEST]])
    assert testers[0] == testers[1] > 0


def _coop0() -> Problem:
    return _problems("coop", "coophumaneval")[0]


def test_guarded_tautologies_lend_a_wrong_code_no_self_tests_support():
    problem = _coop0()
    codes = [problem.prompt + REGEX, problem.prompt + DROPS_COUNTS]
    tautologies = [f"assert compress_runs({GUARDED.strip()}".replace("''", f"'{c}'") for c in "abcde"]
    plain = score_functions([problem, problem], codes, "self_tests", group_tests=[[], []])
    lifted = score_functions([problem, problem], codes, "self_tests", group_tests=[tautologies, tautologies])
    assert [s.total for s in lifted] == [s.total for s in plain]   # the wrong code's rose with them before
    assert plain[0].total == 2.1 and plain[1].total < 2.1


def test_a_code_that_memorises_the_examples_earns_no_more_than_one_that_fails_them():
    problem = _coop0()
    lookup = "    return {'aaabcc': 'a3bc2', 'abc': 'abc'}.get(text, '')\n"
    codes = [problem.prompt + REGEX, problem.prompt + lookup, problem.prompt + "    return ''\n"]
    scores = score_functions([problem] * 3, codes, "self_tests")
    honest, memorised, failing = [s.total for s in scores]
    assert memorised <= failing < honest     # the memoriser scored 2.1, as the honest code, before
    assert honest == 2.1
