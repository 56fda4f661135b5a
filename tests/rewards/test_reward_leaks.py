"""Regression tests of issue 13, items 1, 3, 7, 8: credit that was not earned, and text that breaks the trainer.

1. asserts that test nothing (`assert True, "..."`) are setup, not tests;
3. dead or trivial code does not fool the cooperation checks;
7. cleaning a completion is linear on adversarial text;
8. lone surrogates never reach a tokenizer or the terminal.
"""

from __future__ import annotations

import ast
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from envs.code_generation.data import Problem, load_problems  # noqa: E402
from envs.code_generation.transitions import next_prompt, slice_tests, visible_asserts  # noqa: E402
from rewards.assert_units import check_units  # noqa: E402
from rewards.cleaning import clean_completion, defines_with_return, prompt_imports, strip_fences  # noqa: E402
from rewards.cooperation import cooperation  # noqa: E402
from rewards.code_rewards import RewardBreakdown, code_reward, code_rewards_batch  # noqa: E402
from rewards.sandbox import Sandbox, TestSuite  # noqa: E402

PROMPT = 'def add_all(xs):\n    """Sum of xs."""\n'
AUX = "def aux(xs):\n    return sum(xs)\n"


@pytest.fixture(scope="module")
def sb():
    with Sandbox(workers=2) as box:
        yield box


# ------------------------------------------------------------------ 1. asserts that test nothing

FAKE_CHECK = ("def check(candidate):\n    assert True, 'This prints if this assert fails 1 (good for debugging!)'\n"
              "    assert candidate([1, 2]) == 3\n    assert True\n    assert candidate([]) == 0\n")


@pytest.mark.parametrize("main, total, passed", [
    ("def add_all(xs):\n    t = aux(xs)\n    return t + 100\n", 1.5, 0),            # was 3.5
    ("def add_all(xs):\n    t = aux(xs)\n    return t if xs else 1\n", 3.5, 1),    # was 3.75
    ("def add_all(xs):\n    t = aux(xs)\n    return t if xs else 0\n", 4.0, 2),
])
def test_assert_true_is_not_a_test(sb, main, total, passed):
    r = code_reward({"prompt": PROMPT, "test": FAKE_CHECK, "entry_point": "add_all"}, AUX, main, sandbox=sb,
                    timeout_s=2.0)
    assert (r.total, r.tests_passed, r.tests_total) == (total, passed, 2), r


def test_a_check_without_real_tests_gives_no_test_credit_and_no_bonus(sb):
    check = "def check(candidate):\n    assert True\n    assert 1 == 1\n    x = candidate([1])\n"
    r = code_reward({"prompt": PROMPT, "test": check, "entry_point": "add_all"}, AUX,
                    "def add_all(xs):\n    t = aux(xs)\n    return t if xs else 0\n", sandbox=sb, timeout_s=2.0)
    assert (r.total, r.tests_total, r.uses_aux) == (1.5, 0, False)
    assert r.reason.startswith("no tests")


HOSTILE_CHECK = """def check(candidate):
    assert True
    assert 1 == 1
    assert "x"
    assert not False, "msg"
    if True:
        assert True
    assert candidate
    assert callable(candidate)
    assert (candidate([1]) == 1, "always true: a tuple")
    assert candidate([1]) == 1 or True
    assert candidate([1]) == 1 if False else True
    if False:
        assert candidate([1]) == 99
    while 0:
        assert candidate([1]) == 99
    try:
        assert candidate([1]) == 99
    except AssertionError:
        pass
    try:
        assert candidate([1]) == 99
    except Exception:
        pass
    def never_called():
        assert candidate([1]) == 99
    f = candidate
    assert f([1]) == 1
    r = candidate([2])
    assert r == 2
    for x in range(3):
        y = candidate([x])
        assert y == x
    out = []
    out.append(candidate([4]))
    assert out == [4]
    def helper(v):
        assert candidate([v]) == v
    helper(5)
    return
    assert candidate([1]) == 99
"""


def test_hostile_check_counts_only_real_tests(sb):
    param, units, _ = check_units(ast.parse(HOSTILE_CHECK), "add_all")
    tests = [ast.unparse(s) for kind, s in units if kind == "test"]
    assert tests == ["assert f([1]) == 1", "assert r == 2",
                     "for x in range(3):\n    y = candidate([x])\n    assert y == x", "assert out == [4]",
                     "helper(5)"]
    r = code_reward({"prompt": PROMPT, "test": HOSTILE_CHECK, "entry_point": "add_all"}, AUX,
                    "def add_all(xs):\n    return sum(xs)\n", sandbox=sb, timeout_s=2.0, single_agent=True)
    assert (r.tests_passed, r.tests_total, r.total) == (5, 5, 2.1), r
    wrong = code_reward({"prompt": PROMPT, "test": HOSTILE_CHECK, "entry_point": "add_all"}, AUX,
                        "def add_all(xs):\n    return 99\n", sandbox=sb, timeout_s=2.0, single_agent=True)
    assert (wrong.tests_passed, wrong.total) == (0, 1.1), wrong


def test_context_helpers_and_entry_point_name_exercise_the_candidate():
    test = ("def run(x):\n    return add_all(x)\n\n\ndef check(candidate):\n    assert run([1]) == 1\n"
            "    assert add_all([2]) == 2\n    assert len([1]) == 1\n")
    suite = TestSuite.from_check(test, "add_all")
    assert suite.tests == ["assert run([1]) == 1", "assert add_all([2]) == 2"]


@pytest.mark.slow
def test_humaneval_fake_asserts_are_setup_and_every_problem_keeps_a_test():
    problems = load_problems({"type": "humaneval"}, "test")
    fake = with_fake = 0
    for p in problems:
        suite = TestSuite.from_check(p.test, p.entry_point, context=[p.prompt])
        assert suite.total >= 1, p.task_id
        assert not any(t.startswith("assert True") for t in suite.tests), p.task_id
        n_fake = sum(1 for kind, src, _ in suite.units if kind == "setup" and src.startswith("assert True"))
        fake += n_fake
        with_fake += n_fake > 0
    assert (with_fake, fake) == (36, 48)


def test_level_feedback_slices_real_tests_only():
    p = Problem("T/1", PROMPT, FAKE_CHECK, "add_all")
    assert visible_asserts(p, 1) == ["assert candidate([1, 2]) == 3"]
    sliced = slice_tests(FAKE_CHECK, 1)
    assert "assert candidate([]) == 0" not in sliced and "assert candidate([1, 2]) == 3" in sliced
    assert TestSuite.from_check(sliced, "add_all").tests == ["assert candidate([1, 2]) == 3"]
    # HumanEval/66 and friends: the first test shown is a real one, not "assert True"
    for problem in load_problems({"type": "humaneval"}, "test")[60:90]:
        shown = visible_asserts(problem, 1)
        assert shown and not shown[0].startswith("assert True"), problem.task_id


# ------------------------------------------------------------------ 3. dead or trivial code

COOP = [
    # main source body (def add_all(xs):), uses_aux, thin_wrapper, ignores_return
    ("if False:\n        return aux(xs)\n    return sum(xs)", False, False, False),
    ("if 0:\n        return aux(xs)\n    return sum(xs)", False, False, False),
    ("if None:\n        t = aux(xs)\n    return sum(xs)", False, False, False),
    ("if '':\n        t = aux(xs)\n    return sum(xs)", False, False, False),
    ("while False:\n        t = aux(xs)\n    return sum(xs)", False, False, False),
    ("if True:\n        return sum(xs)\n    else:\n        return aux(xs)", False, False, False),
    ("return sum(xs)\n    return aux(xs)", False, False, False),
    ("for x in xs:\n        continue\n        aux(xs)\n    return sum(xs)", False, False, False),
    ("def g():\n        return aux(xs)\n    return sum(xs)", False, False, False),
    ("g = lambda: aux(xs)\n    return sum(xs)", False, False, False),
    ("lambda: aux(xs)\n    return sum(xs)", False, False, False),
    ("class C:\n        v = aux(xs)\n    return sum(xs)", False, False, False),
    ("return sum(xs) if True else aux(xs)", False, False, False),
    ("return xs and sum(xs) or 0 or False and aux(xs)", False, False, False),
    ("return sum(xs) or 1 or aux(xs)", False, False, False),
    ("aux = sum\n    return aux(xs) + 0 * len(xs)", False, False, False),   # not the helper
    ("r = aux(xs)\n    r = r\n    return r", True, True, False),
    ("r = aux(xs)\n    return (r)", True, True, False),
    ("x = aux(xs)\n    y = x\n    return y", True, True, False),
    ("'''doc'''\n    pass\n    r = aux(xs)\n    assert r is not None\n    return r", True, True, False),
    ("f = aux\n    return f(xs)", True, True, False),
    ("def g(v):\n        return aux(v)\n    return g(xs)", True, True, False),
    ("r = aux(xs)\n    return r + 0", True, True, False),
    ("r = aux(xs)\n    r *= 1\n    return r", True, True, False),
    ("r = aux(xs)\n    if xs:\n        return r\n    return r", True, True, False),
    ("r = aux(xs)\n    if False:\n        return len(xs)\n    return r", True, True, False),
    ("s = sorted(xs)\n    return aux(s)", True, True, False),
    ("return aux(xs) + 0", True, True, False),                                        # the one-liner rule
    ("r = aux(xs)\n    return r if xs else 0", True, False, False),
    ("total = aux(xs)\n    if not xs:\n        return 0\n    return total", True, False, False),
    ("r = aux(xs)\n    print(r)\n    return sum(xs)", True, False, True),
    ("r = aux(xs)\n    r = 0\n    return r + sum(xs)", True, False, True),
    ("tmp = [aux(xs)]\n    return sum(xs)", True, False, True),
    ("res = []\n    res.append(aux(xs))\n    return res[0] + 0 * len(xs)", True, False, False),
    ("if aux(xs) > 0:\n        return sum(xs)\n    return 0", True, False, False),
]


@pytest.mark.parametrize("body, uses, thin, ignores", COOP, ids=[c[0].split("\n")[0][:30] for c in COOP])
def test_cooperation_on_live_code(body, uses, thin, ignores):
    src = "def add_all(xs):\n    " + body + "\n"
    c = cooperation(src, "add_all")
    assert (c.uses_aux, c.thin_wrapper if uses else False, c.ignores_return) == (uses, thin, ignores), src


ADD_CHECK = "def check(candidate):\n    assert candidate([1, 2]) == 3\n    assert candidate([]) == 0\n"


@pytest.mark.parametrize("main, total, flags", [
    ("def add_all(xs):\n    if False:\n        return aux(xs)\n    return sum(xs)\n", 2.5, dict(uses_aux=False)),
    ("def add_all(xs):\n    r = aux(xs)\n    r = r\n    return r\n", 3.0, dict(uses_aux=True, not_wrapper=False)),
    ("def add_all(xs):\n    x = aux(xs)\n    y = x\n    return (y)\n", 3.0, dict(not_wrapper=False)),
    ("def add_all(xs):\n    def g():\n        return aux(xs)\n    return sum(xs)\n", 2.5, dict(uses_aux=False)),
    ("def add_all(xs):\n    tmp = [aux(xs)]\n    return sum(xs)\n", 3.5,
     dict(uses_aux=True, not_wrapper=True, ignored_aux_return=True)),
    ("def add_all(xs):\n    r = aux(xs)\n    return r if xs else 0\n", 4.0, dict(not_wrapper=True)),
])
def test_cooperation_totals(sb, main, total, flags):
    r = code_reward({"prompt": PROMPT, "test": ADD_CHECK, "entry_point": "add_all"}, AUX, main, sandbox=sb,
                    timeout_s=2.0)
    assert r.total == total, r
    for key, value in flags.items():
        assert getattr(r, key) == value, (key, r)


# ------------------------------------------------------------------ 7. linear cleaning

N = 100_000
ADVERSARIAL = {
    "fence_of_blank_lines": "```python\n" + "\n" * N + "```\n",
    "unterminated_fences": "```\n" * (N // 4),
    "fence_of_space_lines": "```\n" + " \n" * (N // 2) + "def add_one(x):\n  return (\n",
    "blank_lines_in_a_broken_def": "def add_one(x):\n" + "\n" * N + "    return (\n",
    "whitespace_lines_after_return": "def add_one(x):\n    return (\n" + " \t\n" * (N // 3),
    "import_then_spaces": "import" + " " * N + "!\n",
    "from_then_spaces": "from x" + " " * N + "!\n",
    "many_def_lines": "def add_one(\n" * (N // 12),
    "huge_indentation": " " * N + "def add_one(x): return 1\n",
    "tabs": "def add_one(x):\n" + "\t" * N + "return (\n",
    "decorators": "@d\n" * (N // 3) + "def add_one(x:\n",
    "fenced_def_with_blank_lines": "```\n" + "def add_one(x):\n" + "\n" * N + "  return (\n```\n",
}


@pytest.mark.parametrize("name", list(ADVERSARIAL))
def test_cleaning_is_fast_on_adversarial_text(name):
    text = ADVERSARIAL[name]
    start = time.perf_counter()
    cleaned = clean_completion(text, "add_one")
    defines_with_return(text, "add_one")
    defines_with_return(cleaned.function, "add_one")
    prompt_imports(text)
    strip_fences(text)
    cooperation(cleaned.function, "add_one")
    elapsed = time.perf_counter() - start
    # six passes over ~100 kB, three or four of them through the parser: ~0.1-0.35 s on a quiet machine, over 1 s
    # on a busy one; the quadratic code this guards against took 10 s and more on a fifth of this text
    # (fence_of_blank_lines, import_then_spaces), so 3 s separates the two without failing on a loaded CI machine
    assert elapsed < 3.0, f"{name}: {elapsed:.2f} s"


def test_cleaning_results_unchanged_on_ordinary_text():
    c = clean_completion("Here:\n```python\nimport math\nfrom a.b import c as d\n\ndef f(x):\n    return x\n```\n", "f")
    assert c.function == "def f(x):\n    return x" and c.returns_value
    assert prompt_imports("import os, sys\nfrom a.b import c as d\nimport  x  \n  import y\n") == [
        "import os, sys", "from a.b import c as d", "import  x"]
    assert strip_fences("```\nno def\n```\n```py\n  async  def g():\n    pass\n```") == "  async  def g():\n    pass"
    assert defines_with_return("def f(x):\n  return x +\n", "f")
    assert not defines_with_return("def f(x):\n  return ;\n  (\n", "f")


# ------------------------------------------------------------------ 8. lone surrogates

SURROGATE_PROBLEM = Problem("S/0", PROMPT, ADD_CHECK, "add_all")


@pytest.mark.slow
def test_surrogate_feedback_reaches_the_tokenizer_and_the_terminal(sb, capsys):
    from cooprl.generation import HFGenerator
    from cooprl.models import TINY_RANDOM, load_tokenizer
    from cooprl.text import safe_print, safe_text
    main = "def add_all(xs):\n    t = aux(xs)\n    raise ValueError('\\ud800 bad \\x1b[2J')\n"
    r = code_reward(SURROGATE_PROBLEM, AUX, main, sandbox=sb, timeout_s=2.0)
    # whatever the sandbox returns, the feedback is built from a breakdown that may hold a lone surrogate
    r = RewardBreakdown(**{**r.as_dict(), "failures": tuple(r.failures) + ("assert x -> ValueError: \ud800",)})
    history = [("prompt\n" + PROMPT, "    return aux(xs) \ud800\n")]
    prompt = next_prompt("level_feedback", SURROGATE_PROBLEM, "main", history, r)
    prompt.encode("utf-8")
    assert "\ufffd" in prompt
    tokenizer = load_tokenizer(TINY_RANDOM)
    with pytest.raises(Exception):
        tokenizer(["\ud800"])                    # what crashed multi-turn training
    generator = HFGenerator(None, tokenizer, max_prompt_tokens=4096)
    ids = generator.encode_prompts([prompt, "def aux(\ud800"])
    assert len(ids) == 2 and all(len(x) > 0 for x in ids)
    safe_print("[agent 1]\n" + history[0][1] + "\x1b[2J\x00")
    out = capsys.readouterr().out
    assert "\ufffd" in out and "\x1b" not in out and "\x00" not in out
    assert safe_text("ok\n\ttab") == "ok\n\ttab"


def test_verbose_tree_printing_survives_surrogates(capsys):
    from cooprl.generation import Completion
    from cooprl.rollout import Node
    from cooprl.task import Score
    from cooprl.trainers.base import print_tree
    import torch
    empty = torch.zeros(0, dtype=torch.long)
    node = Node(item="x", turn=0, prompts=["p"], histories=[[]],
                samples=[[Completion("bad \ud800 text\x1b[31m", empty, empty, False)]], joint=[(0,)],
                scores=[Score(0.0, {}, False)], rewards=[0.0], children=[None], returns=[0.0])

    class T:
        def item_id(self, item):
            return "id \udfff"
    print_tree(node, T())
    out = capsys.readouterr().out
    assert "bad \ufffd text" in out and "\x1b" not in out


# ------------------------------------------------------------------ the ungated calls_aux metric

@pytest.mark.parametrize("main, calls, uses", [
    ("def add_all(xs):\n    t = aux(xs)\n    return t + 100\n", True, False),      # calls aux, fails every test
    ("def add_all(xs):\n    t = aux(xs)\n    return t if xs else 0\n", True, True),  # calls aux and passes
    ("def add_all(xs):\n    if False:\n        return aux(xs)\n    return 0\n", False, False),   # dead call
    ("def add_all(xs):\n    return sum(xs)\n", False, False),
])
def test_calls_aux_is_logged_whatever_the_tests_say(sb, main, calls, uses):
    from envs.code_generation.scoring import breakdown_metrics
    r = code_reward({"prompt": PROMPT, "test": FAKE_CHECK, "entry_point": "add_all"}, AUX, main, sandbox=sb,
                    timeout_s=2.0)
    assert (r.calls_aux, r.uses_aux) == (calls, uses), r
    metrics = breakdown_metrics(r, single_agent=False)
    assert (metrics["calls_aux"], metrics["uses_aux"]) == (float(calls), float(uses))


def test_the_cooperation_bonus_metric_has_no_float_residue():
    # 1 of 7 tests passed, no bonus: the total (rounded to 6 digits) minus the float levels was -1.4e-07 (-0.000)
    from envs.code_generation.scoring import breakdown_metrics
    b = RewardBreakdown(total=round(1.5 + 1 / 7, 6), aux_defined=True, main_defined=True, syntax_ok=True,
                        tests_passed=1, tests_total=7)
    bonus = breakdown_metrics(b, single_agent=False)["cooperation_bonus"]
    assert bonus == 0.0 and str(bonus) == "0.0"
    b = RewardBreakdown(total=round(1.5 + 1 / 7 + 1.5, 6), aux_defined=True, main_defined=True, syntax_ok=True,
                        tests_passed=1, tests_total=7, uses_aux=True, calls_aux=True, not_wrapper=True)
    assert breakdown_metrics(b, single_agent=False)["cooperation_bonus"] == 1.5
