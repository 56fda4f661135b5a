"""Generated tests as a reward signal: the execution matrix, a code reward that needs no hidden tests, and the
tester's reward against a reference solution.

Generated tests are judged tests (`rewards.judged_tests`): the sandbox's judge evaluates each assert itself, on the
plain-data values of the candidate's calls, in a namespace that holds only the candidate (and pure builtins). An
assert it cannot decide that way (one that inspects the program, say) is no test: it never joins a pool, and the
tester who wrote it is paid nothing for it. Every code is run as the program the coder is scored on
(`rewards.code_rewards.scored_program`: the cleaned completion).

Execution matrix: M[i][j] = 1 when code i passes judged test j (a test both junk stubs pass is left out: it holds
whatever a code returns).

Self-tests reward (`self_tests_rewards`), for the G codes c_1..c_G of one node and a pool of T judged tests:
    reliability of test j:  w_j = (1/G) * sum_i M[i][j]        (the share of the group that agrees with it; a test
                                                                no code passes weighs 0: it is wrong or too hard)
    support of code i:      s_i = sum_j w_j M[i][j] / sum_j w_j (0 when every w_j is 0 or there is no test)
    reward of code i:       0.6 (function defined) + 0.5 (parses) + s_i,   at most 2.1
Levels 1-2 are the single-agent code reward's (`rewards.code_rewards`), so the scale is the hidden-test reward's with
s_i in place of the hidden pass fraction. A code that does not parse is never run and keeps its levels-1-2 reward.
It is CodeT's dual agreement without the code clusters: a test many codes pass is likely right, and a code that
passes the tests the group trusts is likely right.

Tester reward (`discrimination_reward`), for the tests T of one tester, the reference solution R (built as a coder's
code is), two stubs that return junk whatever they are given (`judged_tests.stub_programs`) and the group's wrong
codes W (codes that fail some hidden test and load: a program that does not load is not a caught bug):
    score(t) = 0                       if t is not a judged test (it inspects the program, runs other code, ...)
    score(t) = -1                      if R fails t (the test rejects a correct program)
    score(t) = 0                       if both stubs pass t (it holds whatever the code returns: a tautology), or
                                       the typed junk passes it (the reference's results changed to other values
                                       of their type, `judged_tests.typed_junk_program`: a type check, a guarded
                                       tautology)
    score(t) = kill(t)                 otherwise,  kill(t) = |{w in W : w fails t}| / |W|  (0 when W is empty)
    tester reward = mean of score(t) over T,  or 0 when T is empty.          range [-1, 1]
A test is paid for the wrong codes it tells apart from the reference, never for being true of it: passing the
reference is a gate, a test every code of the group passes pays 0.
"""

from __future__ import annotations

import ast
from typing import Any, Sequence

from rewards.cleaning import MAX_COMPLETION_CHARS, PARSE_ERRORS, parse_python
from rewards.judged_tests import judged_test
from rewards.problem import Problem
from rewards.sandbox import RunReport, TestSuite

W_DEFINED, W_SYNTAX = 0.6, 0.5   # the single-agent reward's levels 1 and 2 (rewards.code_rewards)


def untrusted_suite(problem: Problem, tests: Sequence[str]) -> TestSuite:
    """Return generated `tests` as a suite that runs as untrusted code in the sandboxed child (the test-time
    strategies' execution; the rewards judge generated tests with `judged_suite`)."""
    return TestSuite(problem.entry_point, tuple(("test", t, t) for t in tests), (), "candidate", trusted=False)


def pass_matrix(sandbox: Any, problem: Problem, codes: Sequence[str], tests: Sequence[str],
                timeout_s: float = 2.0, max_timeouts: int = 2) -> list[list[int]]:
    """Return M with M[i][j] = 1 when codes[i] passes tests[j] (each code runs all tests in one sandboxed program)."""
    if not codes or not tests:
        return [[0] * len(tests) for _ in codes]
    suite = untrusted_suite(problem, tests)
    outcomes = sandbox.run_many([(code, suite, timeout_s, max_timeouts) for code in codes])
    return [[int(o.passed) for o in row] for row in outcomes]


def reference_code(problem: Problem) -> str | None:
    """Return a correct program for `problem` from its record (HumanEval's canonical solution, the cooperative
    set's reference aux + main), or None. Never shown to a policy: the test-time strategies judge generated tests
    with it (the rewards run the reference as a coder's code is built: `envs.code_generation.self_tests`)."""
    extra = problem.extra
    if extra.get("canonical_solution"):
        return problem.prompt + extra["canonical_solution"]
    if extra.get("reference_main"):
        return f"{extra.get('reference_aux', '')}\n\n{extra['reference_main']}"
    return None


def generated_asserts(entry_point: str, text: str, limit: int | None = None) -> list[str]:
    """Return the distinct one-line `assert ...` statements of `text` that call `entry_point(` and parse (at most
    `limit`), in order: the tests a model wrote. None from a text over `MAX_COMPLETION_CHARS`."""
    found: list[str] = []
    if len(text or "") > MAX_COMPLETION_CHARS:
        return found
    for line in (text or "").splitlines():
        line = line.strip()
        if not line.startswith("assert ") or f"{entry_point}(" not in line or line in found:
            continue
        try:
            parse_python(line)
        except PARSE_ERRORS:
            continue
        found.append(line)
        if limit is not None and len(found) >= limit:
            break
    return found


def example_asserts(problem: Problem) -> list[str]:
    """Return the examples of the problem statement (`>>> f(x)` then the value on the next line) as asserts: tests
    the problem shows, not hidden ones (every coop and HumanEval prompt has some)."""
    lines, out = problem.prompt.splitlines(), []
    for call, want in zip(lines, lines[1:]):
        call, want = call.strip(), want.strip()
        if not call.startswith(">>> ") or f"{problem.entry_point}(" not in call or not want or want.startswith(">>>"):
            continue
        try:
            ast.literal_eval(want)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue
        test = f"assert {call[4:].strip()} == {want}"
        try:
            parse_python(test)
        except PARSE_ERRORS:
            continue
        if test not in out:
            out.append(test)
    return out


def held_out_asserts(problem: Problem, feedback_shows: Sequence[str] = ()) -> list[str]:
    """Return the one-line asserts of the problem's hidden check (`assert candidate(...)`, called by the entry
    point's name) that call it on some input the prompt's examples do not show, nor the tests a later turn's
    feedback shows (`feedback_shows`: their source, `candidate(...)` or the entry point's name): tests no prompt
    shows."""
    entry = problem.entry_point
    shown = set().union(*(calls_of(entry, t) for t in example_asserts(problem)),
                        *(calls_of(entry, t.replace("candidate(", f"{entry}(")) for t in feedback_shows))
    out = []
    for line in (problem.test or "").splitlines():
        line = line.strip()
        if line.startswith("assert candidate("):
            test = line.replace("candidate(", f"{entry}(")
            if test not in out and not shown_calls_only(entry, test, shown):
                out.append(test)
    return out


def calls_of(entry_point: str, test: str) -> set[str]:
    """Return the calls of `entry_point` that `test` makes, as source (`f('ab')`); empty when it does not parse."""
    try:
        tree = parse_python(test)
    except PARSE_ERRORS:
        return set()
    return {ast.unparse(node) for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == entry_point}


def shown_calls_only(entry_point: str, test: str, shown: set[str]) -> bool:
    """Return whether every call of `test` is a call the prompt's examples show (`shown`: their `calls_of`): a
    code that memorises the examples passes it."""
    calls = calls_of(entry_point, test)
    return bool(calls) and calls <= shown


def reliability(matrix: Sequence[Sequence[int]]) -> list[float]:
    """Return each test's reliability w_j: the share of the codes (rows) that pass it."""
    if not matrix:
        return []
    return [sum(col) / len(matrix) for col in zip(*matrix)]


def support(matrix: Sequence[Sequence[int]], n_held_out: int = 0) -> list[float]:
    """Return each code's support s_i: its passes weighted by the tests' weights, over the total weight (0 when
    no test has weight). The first `n_held_out` columns are held-out tests (weight 1: known right); the others
    weigh their reliability."""
    weights = [1.0] * n_held_out + reliability([row[n_held_out:] for row in matrix])
    total = sum(weights)
    if not total:
        return [0.0] * len(matrix)
    return [round(sum(w * m for w, m in zip(weights, row)) / total, 6) for row in matrix]


def self_tests_rewards(levels: Sequence[float], matrix: Sequence[Sequence[int]], runnable: Sequence[bool],
                       n_held_out: int = 0) -> list[float]:
    """Return each code's self-tests reward: its levels-1-2 reward plus its support among the runnable codes
    (`runnable[i]`: code i parses, so it ran; the others get no support and do not count in the reliabilities;
    the first `n_held_out` columns are held-out tests: `support`)."""
    rows = [i for i, ok in enumerate(runnable) if ok]
    sup = dict(zip(rows, support([matrix[i] for i in rows], n_held_out)))
    return [round(level + sup.get(i, 0.0), 6) for i, level in enumerate(levels)]


def levels_reward(main_defined: bool, syntax_ok: bool) -> float:
    """Return the single-agent reward's levels 1-2: 0.6 when the function is defined, + 0.5 when it parses."""
    return (W_DEFINED if main_defined else 0.0) + (W_SYNTAX if main_defined and syntax_ok else 0.0)


def judged_pool(entry_point: str, tests: Sequence[str], pool: list[str]) -> list[int | None]:
    """Add the judged form of each of `tests` to `pool` (once) and return each test's column in it (None: not a
    judged test)."""
    columns: list[int | None] = []
    for test in tests:
        judged = judged_test(entry_point, test)
        if judged is not None and judged not in pool:
            pool.append(judged)
        columns.append(None if judged is None else pool.index(judged))
    return columns


def run_judged(sandbox: Any, jobs: Sequence[tuple[Any, TestSuite]], timeout_s: float = 2.0,
               max_timeouts: int = 2) -> list[RunReport]:
    """Return the report of each (program, judged suite) job, run in parallel on the sandbox's workers."""
    return sandbox.map_detailed(lambda job: sandbox.run_detailed(job[0], job[1], timeout_s, max_timeouts), list(jobs))


def pass_row(report: RunReport) -> list[int]:
    """Return a report's verdicts as 0/1."""
    return [int(o.passed) for o in report.outcomes]


def loaded(report: RunReport) -> bool:
    """Return whether the program of a report loaded and was judged (no load error, no sandbox error)."""
    return report.load_error is None and report.error is None


def caught_row(report: RunReport) -> list[int]:
    """Return 1 for each test that rejected the report's program on the values it returned (`on_values`: its
    assert failed), 0 where it passed or the program raised, ended, timed out or returned no plain data (what any
    test that calls it that way rejects, a tautology too)."""
    return [int(not o.passed and o.on_values) for o in report.outcomes]


def vacuous(column: int, stub_rows: Sequence[Sequence[int]], typed_rows: Sequence[Sequence[int]] = ()) -> bool:
    """Return whether a test holds of junk: both junk stubs pass it (`f(x) == f(x)`), or a code that returns the
    right type and wrong values passes it (`typed_rows`: `judged_tests.typed_junk_program`'s verdicts; a type check,
    `f(x) is not None`, a guarded tautology)."""
    return bool(stub_rows and all(row[column] for row in stub_rows)) or any(row[column] for row in typed_rows)


def generated_test_score(column: int | None, correct_rows: Sequence[Sequence[int]],
                         stub_rows: Sequence[Sequence[int]], caught_rows: Sequence[Sequence[int]],
                         typed_rows: Sequence[Sequence[int]] = ()) -> float:
    """Return one generated test's score for the tester (see the module docstring): `column` is its column in the
    pool's rows (None: not a judged test); `correct_rows` the verdicts of the correct codes (the reference first),
    `stub_rows` the junk stubs', `caught_rows` the wrong codes' (`caught_row`), `typed_rows` the typed junk's
    (`vacuous`)."""
    if column is None:
        return 0.0
    if any(not row[column] for row in correct_rows):
        return -1.0
    if vacuous(column, stub_rows, typed_rows):
        return 0.0
    return sum(row[column] for row in caught_rows) / len(caught_rows) if caught_rows else 0.0


def discrimination_reward(columns: Sequence[int | None], correct_rows: Sequence[Sequence[int]],
                          stub_rows: Sequence[Sequence[int]], caught_rows: Sequence[Sequence[int]],
                          typed_rows: Sequence[Sequence[int]] = ()) -> float:
    """Return a tester's reward: the mean `generated_test_score` of its tests (`columns`: each test's column in
    the rows), 0 when it wrote no test."""
    if not columns:
        return 0.0
    scores = [generated_test_score(j, correct_rows, stub_rows, caught_rows, typed_rows) for j in columns]
    return round(sum(scores) / len(scores), 6)
