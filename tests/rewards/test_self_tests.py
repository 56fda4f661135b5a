"""Unit tests of rewards/self_tests.py: the self-tests and discrimination formulas on known pass matrices, the held-out
asserts of a check."""

from rewards.problem import Problem
from rewards.self_tests import discrimination_reward, reliability, self_tests_rewards, support
from tests.rewards.test_tester_rewards import PROMPT


def test_held_out_tests_call_some_input_the_examples_do_not_show():
    from rewards.self_tests import held_out_asserts
    check = ("def check(candidate):\n    assert candidate(1, 2) == 3\n    assert abs(candidate(1, 2) - 3) < 1e-9\n"
             "    assert candidate(1, 2) == candidate(2, 1)\n    assert candidate(-1, 1) == 0\n")
    problem = Problem("T/0", PROMPT, check, "add")
    # the second only rewrites the example add(1, 2): a memoriser passes it; the third calls add(2, 1) too
    assert held_out_asserts(problem) == ["assert add(1, 2) == add(2, 1)", "assert add(-1, 1) == 0"]


def test_held_out_tests_leave_out_what_a_later_turns_feedback_shows():
    # issue 42: with the shipped 1-assert slice and two turns, turn 2's feedback showed a failed held-out assert with
    # its expected value on 118 of 164 HumanEval problems (memorising it: +0.143)
    from envs.code_generation.transitions import visible_asserts
    from rewards.self_tests import held_out_asserts
    check = ("def check(candidate):\n    assert candidate(-1, 1) == 0\n    assert candidate(2, 5) == 7\n"
             "    assert candidate(2, 5) + candidate(0, 4) == 11\n")
    problem = Problem("T/0", PROMPT, check, "add")
    assert held_out_asserts(problem) == ["assert add(-1, 1) == 0", "assert add(2, 5) == 7",
                                         "assert add(2, 5) + add(0, 4) == 11"]
    shown = visible_asserts(problem, 1)   # the first assert, as level feedback shows it
    assert held_out_asserts(problem, shown) == ["assert add(2, 5) == 7", "assert add(2, 5) + add(0, 4) == 11"]
    assert held_out_asserts(problem, visible_asserts(problem, 2)) == ["assert add(2, 5) + add(0, 4) == 11"]


def test_self_tests_formula_on_a_known_matrix():
    matrix = [[1, 0, 1], [1, 0, 0], [0, 0, 0]]
    assert reliability(matrix) == [2 / 3, 0.0, 1 / 3]
    assert support(matrix) == [1.0, 0.666667, 0.0]                  # (2/3 + 1/3) / 1, (2/3) / 1
    # a code that does not parse neither runs nor counts in the reliabilities: weights 1, 0, 1/2
    assert self_tests_rewards([1.1, 1.1, 0.6], matrix, [True, True, False]) == [2.1, 1.766667, 0.6]
    assert support([[0, 0], [0, 0]]) == [0.0, 0.0] and support([[], []]) == [0.0, 0.0]
    # tester (rows over a pool of 5 tests; columns: each of its tests' column, None: not judged): column 0 rejects
    # the one wrong code on its values (1.0), column 1 lets it pass (0.0), column 2 rejects the reference (-1),
    # column 3 both junk stubs pass (a tautology: 0), column 4 rejects a correct code other than the reference
    # (-1), an unjudged test 0
    correct, stubs, caught = [[1, 1, 0, 1, 1], [1, 1, 0, 1, 0]], [[0, 0, 0, 1, 0], [0, 0, 0, 1, 0]], [[1, 0, 0, 0, 1]]
    assert discrimination_reward([0, 1, None, 3], correct, stubs, caught) == 0.25
    assert discrimination_reward([0, 2], correct, stubs, caught) == 0.0
    assert discrimination_reward([2, None], correct, stubs, caught) == -0.5
    assert discrimination_reward([4], correct, stubs, caught) == -1.0 and discrimination_reward([4], correct[:1], stubs,
                                                                                                caught) == 1.0
    assert discrimination_reward([1], correct, stubs, []) == 0.0 and discrimination_reward([], correct, [], []) == 0.0
    # held-out columns (first n) weigh 1 whatever the group passes: the group's reliabilities weigh the rest
    assert support([[0, 1], [0, 0]], n_held_out=1) == [0.333333, 0.0]   # (0 * 1 + 1 * 0.5) / 1.5
