"""Unit tests of rewards/judged_tests.py: which asserts of a tester the judge decides, and what that costs."""

import time

import pytest

from rewards.judged_tests import judged_test


@pytest.mark.parametrize("test", ["assert add(1, 2) == 3", "assert add(1, 2) == 3, 'message'",
                                  "assert abs(add(0.1, 0.2) - 0.3) < 1e-9", "assert sorted(add([2], [1])) == [1, 2]",
                                  "assert math.isclose(add(0.1, 0.2), 0.3)", "assert add(1, 2) in (3, 4)",
                                  "assert not add(0, 0)", "assert add(2, -3) < 0",
                                  "assert add('a', 'b')[0] == 'a'", "assert len(add([1], [2])) == 2",
                                  "assert add(add(1, 1), 1) == 3", "assert add(3 * 19, 2 ** 3) == 65",
                                  "assert isinstance(add(1, 2), int)"])
def test_asserts_on_plain_values_are_judged(test):
    assert judged_test("add", test) is not None


@pytest.mark.parametrize("test", ["assert 'aux' in globals() and add(1, 2) == 3", "assert add.__doc__ is None",
                                  "assert add(1, 2) == 3 and aux(1, 2) == 3", "assert add(1, 2) == 3 or add",
                                  "assert (lambda: add(1, 2))() == 3", "assert [add(i, i) for i in (1, 2)] == [2, 4]",
                                  "assert add(1, 2) == __import__('os').getpid()", "assert add(*[1, 2]) == 3",
                                  "assert add([0] * 10 ** 9, []) == []", "assert add('a', 'b') * 10 ** 9 != ''",
                                  "assert f'{add(1, 2):>999999999}' != ''", "assert add(1, 2).real == 3",
                                  "assert 1 == 1", "assert 'add(' != ''", "assert set(add([1], [2])) == {1, 2}",
                                  "assert round(add(1.5, 2), -10 ** 9) == 0", "assert (x := add(1, 2)) == 3",
                                  "assert type(add(1, 2)) is int", "assert add(1, 2) == 3\nassert add(0, 0) == 0"])
def test_asserts_that_inspect_run_code_or_cost_the_judge_are_not(test):
    assert judged_test("add", test) is None


def test_the_judged_test_gate_is_linear_in_the_tests_size():
    products = " + ".join(["*".join(["1"] * 320)] * 6)                  # 3.8 kB: 1.6-2.1 CPU s before
    start = time.process_time()
    for test in (f"assert add(1, 2) == {products}", "assert add(1, 2) == " + "**".join(["1"] * 950)):
        judged_test("add", test)
    assert time.process_time() - start < 0.8      # ~0.05 s alone, 0.34 s seen under make test's load; 2 s before
