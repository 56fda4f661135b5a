"""Regression tests of issue 13, items 1, 3, 7, 8: credit that was not earned, and text that breaks the trainer.

1. asserts that test nothing (`assert True, "..."`) are setup, not tests (the split itself: test_assert_units.py);
3. dead or trivial code does not fool the cooperation checks (the checks themselves: test_cooperation.py);
7. cleaning a completion is linear on adversarial text (test_cleaning.py);
8. lone surrogates never reach a tokenizer or the terminal.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from envs.code_generation.data import Problem, load_problems  # noqa: E402
from envs.code_generation.transitions import next_prompt, slice_tests, visible_asserts  # noqa: E402
from rewards.assert_units import check_units  # noqa: E402
from rewards.code_rewards import RewardBreakdown, code_reward  # noqa: E402
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


# ------------------------------------------------------------------ 8. lone surrogates

SURROGATE_PROBLEM = Problem("S/0", PROMPT, ADD_CHECK, "add_all")


@pytest.mark.slow
def test_surrogate_feedback_reaches_the_tokenizer_and_the_terminal(sb, capsys):
    from cooprl.rollout.generation import HFGenerator
    from cooprl.models.loading import TINY_RANDOM, load_tokenizer
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
    with pytest.raises(Exception):  # noqa: B017 (whatever the tokenizer raises: it must not be fed this)
        tokenizer(["\ud800"])                    # what crashed multi-turn training
    generator = HFGenerator(None, tokenizer, max_prompt_tokens=4096)
    ids = generator.encode_prompts([prompt, "def aux(\ud800"])
    assert len(ids) == 2 and all(len(x) > 0 for x in ids)
    safe_print("[agent 1]\n" + history[0][1] + "\x1b[2J\x00")
    out = capsys.readouterr().out
    assert "\ufffd" in out and "\x1b" not in out and "\x00" not in out
    assert safe_text("ok\n\ttab") == "ok\n\ttab"


def test_verbose_tree_printing_survives_surrogates(capsys):
    from cooprl.rollout.generation import Completion
    from cooprl.rollout.tree import Node
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
