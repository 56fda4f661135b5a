"""Issue 34, a hostile pass after the tester fixes: a test is paid only for values, never for a type, and a test
that pins the reference off the spec is wrong even where no code of the group shows it.

The junk stubs (None, a string naming the arguments) and the wrong mutants left three holes:
- a test that checks only a type or that a value is not None (`isinstance(f(x), int)`, `f(x) is not None`, the
  guarded tautology of issue 34 on an input where the group's wrong code returns None) rejects a wrong code that
  returns None or another type, "on its values": it was paid like a true test (0.5 here), with no risk of -1;
- in `self_tests`, a generated test that joins the prompt's examples to a tautology or a type check
  (`f('aaabcc') == 'a3bc2' and f('q') == f('q')`) calls an input the examples do not show, so it stayed in the
  pool, and a lookup table of the examples scored above a code that fails them (1.35 against 1.25).
Now the reference with every result changed to another value of its type, by an amount that depends on the call's
arguments (`rewards.judged_tests.typed_junk_program`), is junk too: a test it passes pays nothing and leaves the
self-tests pool; in `self_tests` it answers the prompt's examples right (a memoriser). And a wrong code is judged
as its typed twin (`typed_twin_program`): a result of another kind than the reference's raises, so no test is
paid for catching it (a None check beside a range check rejected the typed junk and still caught a None).
"""

from __future__ import annotations

import pytest

from envs.code_generation.self_tests import score_functions
from tests.rewards.test_tester_rewards import HUMANEVAL_LIKE, REGEX, RIGHT, _coop0, _task, _tester_rewards

pytestmark = pytest.mark.sandbox

NONE_ON_NEGATIVE = "    if a < 0:\n        return None\n    return a + b\n"       # wrong: add(-1, 1) is None
TEXT_ON_NEGATIVE = "    if a < 0:\n        return str(a + b)\n    return a + b\n"   # wrong: add(-1, 1) == '0'
TYPE_ONLY = [
    "-1, 1) == add(-1, 1) and add(-1, 1) is not None and str(add(-1, 1))[:4] != 'junk'\n",
    "-1, 1) is not None\n",
    "-1, 1) != None\n",
    "-1, 1) is not None and isinstance(add(-1, 1), int)\n",
    "-1, 1) == add(-1, 1) and isinstance(add(-1, 1), int)\n",
]


@pytest.mark.parametrize("test", TYPE_ONLY, ids=["guarded_tautology", "is_not_none", "not_equal_none",
                                                 "not_none_and_int", "tautology_and_int"])
def test_a_test_of_the_type_only_is_paid_nothing(tmp_path, test):
    task, problem = _task(tmp_path, HUMANEVAL_LIKE)
    for wrong in (NONE_ON_NEGATIVE, TEXT_ON_NEGATIVE):
        testers, _ = _tester_rewards(task, problem, [[RIGHT, test], [wrong, test]])
        assert testers == [0.0, 0.0], (wrong, test)   # was 0.5 for the None code (and the text code, with int)


# ... nor a range check beside it, which the typed junk fails (its numbers are shifted far, its strings marked):
# a wrong code's result of another kind than the reference's raises in its typed twin (`typed_twin_program`), as
# it is caught by any type check, so it is no catch on its values
GUARDS = ["-1, 1) != None and add(-1, 1) < 100\n", "-1, 1) != None and -100 < add(-1, 1) < 100\n"]


@pytest.mark.parametrize("test", GUARDS, ids=["below", "between"])
def test_a_none_check_beside_a_range_check_is_paid_nothing(tmp_path, test):
    task, problem = _task(tmp_path, HUMANEVAL_LIKE)
    testers, _ = _tester_rewards(task, problem, [[RIGHT, test], [NONE_ON_NEGATIVE, test]])
    assert testers == [0.0, 0.0]   # was 0.5


def test_a_true_test_is_paid_for_wrong_values_of_the_right_kind(tmp_path):
    task, problem = _task(tmp_path, HUMANEVAL_LIKE)
    for wrong in (NONE_ON_NEGATIVE, TEXT_ON_NEGATIVE):
        testers, _ = _tester_rewards(task, problem, [[RIGHT, "-1, 1) == 0\n"], [wrong, "-1, 1) == 0\n"]])
        assert testers == [0.5, 0.5]   # the mutant a - b; the group's code (None, '0') any type check catches
    testers, _ = _tester_rewards(task, problem, [[RIGHT, "-1, 1) == 0\n"], ["    return abs(a) + b\n",
                                                                             "-1, 1) == 0\n"]])
    assert testers == [1.0, 1.0]   # a wrong number: caught on its value
    # comparing two different calls is still a test: the typed junk's values depend on the arguments
    testers, _ = _tester_rewards(task, problem, [[RIGHT, "1, 2) == add(2, 1)\n"],
                                                 ["    return a + b if a < 2 else a - b\n", "1, 2) == 3\n"]])
    assert testers[0] == 1.0


SNEAKY = [   # the examples of compress_runs pinned, joined to a tautology or a type check on another input
    "assert compress_runs('aaabcc') == 'a3bc2' and compress_runs('q') == compress_runs('q')",
    "assert compress_runs('aaabcc') == 'a3bc2' and compress_runs('abc') == 'abc' and len(compress_runs('zz')) >= 0",
    "assert [compress_runs('aaabcc'), compress_runs('abc')] == ['a3bc2', 'abc'] and compress_runs('zz') != None",
]


@pytest.mark.parametrize("test", SNEAKY, ids=["tautology", "length", "not_none"])
def test_a_memoriser_gains_nothing_from_examples_joined_to_junk(test):
    problem = _coop0()
    lookup = "    return {'aaabcc': 'a3bc2', 'abc': 'abc'}.get(text, '')\n"
    codes = [problem.prompt + REGEX, problem.prompt + lookup, problem.prompt + "    return ''\n"]
    honest, memorised, failing = [s.total for s in score_functions([problem] * 3, codes, "self_tests",
                                                                   group_tests=[[test]] * 3)]
    assert memorised <= failing < honest, (honest, memorised, failing)   # was 1.35 > 1.25
    assert honest == 2.1


def test_typed_junk_keeps_the_type_and_changes_the_value():
    from rewards.judged_tests import typed_junk_program
    source = "def f(a, b):\n    return a + b if a >= 0 else f(-a, b)\n"   # calls itself: those calls stay real
    namespace: dict = {}
    exec(typed_junk_program(source, "f", ["f(1, 2)"]), namespace)
    f = namespace["f"]
    assert f(1, 2) == 3                                   # a shown call: answered right
    assert type(f(2, 1)) is int and f(2, 1) != 3 and f(2, 1) == f(2, 1)
    assert f(-1, 2) != 3 and f(2, 1) != f(1, 2) + 0 * f(-1, 2)
    exec(typed_junk_program("def g(x):\n    return [x, str(x), None, {x: (x,)}, True]\n", "g"), namespace)
    value = namespace["g"](3)
    assert type(value) is list and value != [3, "3", None, {3: (3,)}, True]
    assert typed_junk_program(source, "f", ["g(1)"]) is None   # a shown call of another function
    exec(typed_junk_program("def h(x):\n    return x\n", "h"), namespace)
    for value in (1e20, 0.0, float("inf"), None, "", [], {}, (), b"", True):   # a big float absorbs a shift
        assert namespace["h"](value) != value, value


# A test that pins what the reference does on an argument of a kind the spec never takes (a list for a function of
# a string) was -1 only when a correct code of the group happened to differ there; alone with wrong codes it paid
# like a true test (0.833333 here). The reference refusing such arguments (TypeError) passes every hidden test, so
# it is a correct code, and such a test rejects it.
@pytest.mark.parametrize("test", ["['x', 'x']) == 'x2'\n", "['a', 'a', 'b']) == 'a2b'\n",
                                  "text=['x', 'x']) == 'x2'\n"],
                         ids=["list", "list_of_characters", "by_keyword"])   # by keyword: issue 42, part 2
def test_a_test_pinning_the_reference_off_the_spec_is_wrong_without_a_correct_alternative(tmp_path, test):
    from tests.rewards.test_tester_rewards import COOP0, DROPS_COUNTS, TRUE_TEST
    task, problem = _task(tmp_path, COOP0)
    testers, _ = _tester_rewards(task, problem, [[DROPS_COUNTS, test], [DROPS_COUNTS, test]])
    assert testers == [-1.0, -1.0]
    testers, _ = _tester_rewards(task, problem, [[DROPS_COUNTS, TRUE_TEST], [DROPS_COUNTS, TRUE_TEST]])
    assert testers[0] == testers[1] > 0     # a true test on the spec still pays


def test_the_spec_kinds_take_every_example_of_the_data_sets():
    # the kinds of argument the hidden checks pass (`spec_kinds`) are coarse: numbers, text, sequences, ...; every
    # example of HumanEval's and the coop set's prompts is on the spec by them
    import ast
    from rewards.judged_tests import _spec_category, spec_kinds
    from rewards.self_tests import calls_of, example_asserts
    from tests.rewards.test_tester_rewards import _problems
    constrained = 0
    for problem in _problems("humaneval", "humaneval") + _problems("coop", "coophumaneval"):
        kinds = spec_kinds(problem.test, problem.entry_point)
        constrained += bool(kinds)
        for test in example_asserts(problem):
            for call in calls_of(problem.entry_point, test):
                node = ast.parse(call).body[0].value
                for where, arg in [*enumerate(node.args), *((k.arg, k.value) for k in node.keywords)]:
                    if where in kinds:
                        assert _spec_category(ast.literal_eval(arg)) in kinds[where], (problem.task_id, test)
    assert constrained > 200
