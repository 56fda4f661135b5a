"""Unit tests of rewards/coop_probes.py: the verdict of the probe runs, their control run and its drawn place among
them."""

from rewards.coop_probes import SECOND_TRIES, in_drawn_order, probe_programs, scored_aux, verify as verify_cooperation
from tests.rewards.test_coop_verified import HONEST_MAIN, SPLIT_AUX


def test_verdicts_that_change_from_run_to_run_pay_nothing():
    # a pair whose tests fail by chance would fail the probes by chance: the control run must agree
    passed = [True] * 4
    control = scored_aux(SPLIT_AUX)   # the control runs the program as scored; every probe fails test 1

    def flaky(src):
        return done([True, True, False, True] if src == control else [False, True, True, True])
    assert verify_cooperation(SPLIT_AUX, HONEST_MAIN, (), passed, flaky).startswith(
        "the pair's verdicts change from run to run")
    assert verify_cooperation(SPLIT_AUX, HONEST_MAIN, (), passed,
                              lambda src: done([True] * 4 if src == control else [False, True, True, True])) == ""


def done(passed):
    """Verdicts of tests that all ran to completion."""
    return [(p, True) for p in passed]


def test_a_probe_counts_only_tests_that_ran_to_completion():
    # issue 42: a main slow in some runs only (entropy, a per-worker address bit) had its probes' tests time out,
    # which counted as failed: an identity aux was paid. A test that did not complete now never earns the bonus
    passed = [True] * 4
    control = scored_aux(SPLIT_AUX)

    def probes_time_out(src):   # every probe: test 1 fails by timing out (or cut), the rest pass
        return done([True] * 4) if src == control else [(False, False)] + done([True] * 3)
    assert "did not run to completion" in verify_cooperation(SPLIT_AUX, HONEST_MAIN, (), passed, probes_time_out)

    def control_cut(src):   # the control's verdicts agree, but one of its tests did not complete
        return [(True, True)] * 3 + [(False, False)] if src == control else done([False] * 4)
    assert verify_cooperation(SPLIT_AUX, HONEST_MAIN, (), [True] * 3 + [False], control_cut).startswith(
        "the pair's verdicts change from run to run")

    def one_completed_failure(src):   # a timed-out test beside one that failed on its values: the probe counts
        return done([True] * 4) if src == control else [(False, False), (False, True)] + done([True] * 2)
    assert verify_cooperation(SPLIT_AUX, HONEST_MAIN, (), passed, one_completed_failure) == ""


def test_a_main_that_knows_how_many_runs_came_before_cannot_find_the_control():
    # consecutive programs share a short-lived timing channel (docs/sandbox.md), so a main may count the runs of
    # its pair before it. It passes the scored run; to be paid it must fail every probe and pass the control. With
    # the control always last, "pass the last run" was paid for every pair; in a drawn order about 1 pair in 5
    passed = [True] * 4
    paid = 0
    pairs = [(f"def aux(xs):\n    return sorted(xs)[:{k}] + sorted(xs)[{k}:]\n", HONEST_MAIN) for k in range(60)]
    for aux_src, main_src in pairs:
        count = iter(range(1, 100))
        total = len([name for name, _ in probe_programs(aux_src) if name not in SECOND_TRIES.values()])

        def knows_its_place(src, count=count, total=total):
            return done([True] * 4 if next(count) == total else [False] * 4)
        paid += verify_cooperation(aux_src, main_src, (), passed, knows_its_place) == ""
    assert paid <= 60 * 0.35, paid
    order = [name for name, _ in in_drawn_order(probe_programs(pairs[0][0]), pairs[0][0] + "\n" + pairs[0][1])]
    assert order == [name for name, _ in in_drawn_order(probe_programs(pairs[0][0]),
                                                        pairs[0][0] + "\n" + pairs[0][1])]   # reproducible


def test_a_problem_whose_answers_only_move_ints_is_told_from_one_that_computes():
    # issue 42, 1b: the derived probe renames the ints inside containers, unless the problem's answers only move
    # ints (every expected int is one its arguments hold, as often or less): there moving is the work (Coop/64
    # turns a matrix a quarter; a sort); a sum, a count, an index, a bool or a string is no move of ints
    from rewards.coop_probes import moves_only
    from rewards.sandbox import TestSuite

    def units(*asserts: str) -> tuple:
        return TestSuite.from_check("def check(candidate):\n" + "".join(f"    {a}\n" for a in asserts), "f").units
    assert moves_only(units("assert candidate([[1, 2, 3], [4, 5, 6]]) == [[4, 1], [5, 2], [6, 3]]",
                            "assert candidate([]) == []", "assert candidate([[7]]) == [[7]]"))
    assert moves_only(units("assert candidate([3, 1, 2]) == [1, 2, 3]", "assert candidate([2, 2], 1) == (2, 2)"))
    assert moves_only(units("assert candidate({'a': 1}) == {1: 'a'}"))   # dict keys count
    assert not moves_only(units("assert candidate([1, 2, 3]) == 6"))
    assert not moves_only(units("assert candidate([3, 1, 2]) == [1, 2, 3]", "assert candidate([1, 2]) == 3"))
    assert not moves_only(units("assert candidate([1, 2]) == [1, 1, 2]"))   # an item twice: more than given
    assert not moves_only(units("assert candidate([1, 2]) == [2, 1, 0]"))   # an int the arguments lack
    assert not moves_only(units("assert candidate([1, 2]) is True", "assert candidate('ab') == 'ba'"))
    assert not moves_only(units("assert candidate([True, 2]) == [True]"))   # a bool is no int here
