"""Generated tests as a reward signal: the execution matrix, a code reward that needs no hidden tests, and the
tester's reward against a reference solution.

Execution matrix: M[i][j] = 1 when code i passes generated test j. The tests are `TestSuite(trusted=False)`: they
run inside the sandboxed child as untrusted code (a test is an assert a model wrote), never in the judge.

Self-tests reward (`self_tests_rewards`), for the G codes c_1..c_G of one node and a pool of T generated tests:
    reliability of test j:  w_j = (1/G) * sum_i M[i][j]        (the share of the group that agrees with it; a test
                                                                no code passes weighs 0: it is wrong or too hard)
    support of code i:      s_i = sum_j w_j M[i][j] / sum_j w_j (0 when every w_j is 0 or there is no test)
    reward of code i:       0.6 (function defined) + 0.5 (parses) + s_i,   at most 2.1
Levels 1-2 are the single-agent code reward's (`rewards.code_rewards`), so the scale is the hidden-test reward's with
s_i in place of the hidden pass fraction. A code that does not parse is never run and keeps its levels-1-2 reward.
It is CodeT's dual agreement without the code clusters: a test many codes pass is likely right, and a code that
passes the tests the group trusts is likely right.

Tester reward (`discrimination_reward`), for tests T of one tester, the reference solution R and the group's wrong codes W
(codes that fail some hidden test):
    score(t) = 0.5 + 0.5 * kill(t)   if R passes t,   kill(t) = |{w in W : w fails t}| / |W|  (0 when W is empty)
    score(t) = -1                    if R fails t (the test rejects a correct program)
    tester reward = mean of score(t) over T,  or 0 when T is empty.          range [-1, 1]
"""

from __future__ import annotations

import ast
from typing import Any, Sequence

from rewards.code_cleaning import PARSE_ERRORS
from rewards.problem import Problem
from rewards.sandbox import TestSuite

W_DEFINED, W_SYNTAX = 0.6, 0.5   # the single-agent reward's levels 1 and 2 (rewards.code_rewards)


def untrusted_suite(problem: Problem, tests: Sequence[str]) -> TestSuite:
    """Return generated `tests` as a suite that runs as untrusted code in the sandboxed child."""
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
    set's reference aux + main), or None. Never shown to a policy: it judges generated tests."""
    extra = problem.extra
    if extra.get("canonical_solution"):
        return problem.prompt + extra["canonical_solution"]
    if extra.get("reference_main"):
        return f"{extra.get('reference_aux', '')}\n\n{extra['reference_main']}"
    return None


def generated_asserts(entry_point: str, text: str, limit: int | None = None) -> list[str]:
    """Return the distinct one-line `assert ...` statements of `text` that call `entry_point(` and parse (at most
    `limit`), in order: the tests a model wrote."""
    found: list[str] = []
    for line in (text or "").splitlines():
        line = line.strip()
        if not line.startswith("assert ") or f"{entry_point}(" not in line or line in found:
            continue
        try:
            ast.parse(line)
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
            ast.parse(test)
        except PARSE_ERRORS:
            continue
        if test not in out:
            out.append(test)
    return out


def reliability(matrix: Sequence[Sequence[int]]) -> list[float]:
    """Return each test's reliability w_j: the share of the codes (rows) that pass it."""
    if not matrix:
        return []
    return [sum(col) / len(matrix) for col in zip(*matrix)]


def support(matrix: Sequence[Sequence[int]]) -> list[float]:
    """Return each code's support s_i: its passes weighted by the tests' reliability, over the total weight
    (0 when no test has weight)."""
    weights = reliability(matrix)
    total = sum(weights)
    if not total:
        return [0.0] * len(matrix)
    return [round(sum(w * m for w, m in zip(weights, row)) / total, 6) for row in matrix]


def self_tests_rewards(levels: Sequence[float], matrix: Sequence[Sequence[int]], runnable: Sequence[bool]) -> list[float]:
    """Return each code's self-tests reward: its levels-1-2 reward plus its support among the runnable codes
    (`runnable[i]`: code i parses, so it ran; the others get no support and do not count in the reliabilities)."""
    rows = [i for i, ok in enumerate(runnable) if ok]
    sup = dict(zip(rows, support([matrix[i] for i in rows])))
    return [round(level + sup.get(i, 0.0), 6) for i, level in enumerate(levels)]


def levels_reward(main_defined: bool, syntax_ok: bool) -> float:
    """Return the single-agent reward's levels 1-2: 0.6 when the function is defined, + 0.5 when it parses."""
    return (W_DEFINED if main_defined else 0.0) + (W_SYNTAX if main_defined and syntax_ok else 0.0)


def generated_test_score(reference_passes: bool, wrong_failed: int, wrong_total: int) -> float:
    """Return one generated test's score for the tester (see the module docstring)."""
    if not reference_passes:
        return -1.0
    return 0.5 + 0.5 * (wrong_failed / wrong_total if wrong_total else 0.0)


def discrimination_reward(reference_row: Sequence[int], wrong_rows: Sequence[Sequence[int]]) -> float:
    """Return a tester's reward: the mean `generated_test_score` of its tests, given the reference's pass row over them and
    each wrong code's pass row (0 when it wrote no test)."""
    if not reference_row:
        return 0.0
    scores = [generated_test_score(bool(ref), sum(1 for row in wrong_rows if not row[j]), len(wrong_rows))
              for j, ref in enumerate(reference_row)]
    return round(sum(scores) / len(scores), 6)
