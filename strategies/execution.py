"""Running candidates in our sandbox: generated tests and inputs as untrusted code, ground truth for the score.

- `pass_matrix`: M[i][j] = 1 when code i passes generated test j (CodeT's and CoSPlay's execution matrix).
- `signatures`: the outputs of each code on inputs without expected values (CoSPlay's cluster selection).
- `score`: the final, ground-truth verdict of one code through the reward's own path (`code_rewards`).

Generated tests are `TestSuite(trusted=False)`: they run inside the sandboxed child, which reports only whether
each one raised and its error text. To read an output we make the test raise with the output's `repr` as the
message (the child's stdout is not kept); a program could fake its own outputs this way, which only changes
how it is clustered, never a ground-truth verdict.
"""

from __future__ import annotations

import uuid
from typing import Any, Sequence

from rewards.problem import Problem
from rewards.code_rewards import code_reward
from rewards.sandbox import TestSuite
from rewards.self_tests import pass_matrix, reference_code, untrusted_suite  # noqa: F401 (re-exported)

ERROR = "!error"   # the signature entry of a call that raised or timed out


def _suite(problem: Problem, tests: Sequence[str]) -> TestSuite:
    return untrusted_suite(problem, tests)


def signatures(sandbox: Any, problem: Problem, codes: Sequence[str], calls: Sequence[str],
               timeout_s: float = 2.0, max_timeouts: int = 2) -> list[tuple[str, ...]]:
    """Return each code's outputs on `calls` (e.g. `f(1, 2)`) as a tuple of `repr`s (ERROR where it raised)."""
    if not codes or not calls:
        return [() for _ in codes]
    mark = f"@@{uuid.uuid4().hex[:8]}@@"   # so that an exception the program raises itself reads as an error
    tests = [f"raise AssertionError({mark!r} + repr({call})[:300])" for call in calls]
    outcomes = sandbox.run_many([(code, _suite(problem, tests), timeout_s, max_timeouts) for code in codes])
    out = []
    for row in outcomes:
        sig = []
        for o in row:
            at = o.error.find(mark)
            sig.append(o.error[at + len(mark):] if at >= 0 and o.error.startswith("AssertionError") else ERROR)
        out.append(tuple(sig))
    return out


def score(problem: Problem, code: str, sandbox: Any, timeout_s: float = 10.0) -> dict[str, Any]:
    """Return the ground-truth verdict of `code`: passed (every hidden test), tests_passed, tests_total.

    Scored as the reward scores a team (the function `aux`, when the code defines one, is kept; every other
    top-level helper is dropped, as the reward does), so a two-agent team's code is judged as in training."""
    r = code_reward(problem, code, code, single_agent=False, timeout_s=timeout_s, sandbox=sandbox)
    return {"passed": bool(r.tests_total and r.tests_passed == r.tests_total),
            "tests_passed": r.tests_passed, "tests_total": r.tests_total}


def run_tests(sandbox: Any, problem: Problem, code: str, tests: Sequence[str], timeout_s: float = 2.0,
              max_timeouts: int = 2) -> list[Any]:
    """Return the TestOutcome (passed, error) of each generated or visible test on one code."""
    if not tests:
        return []
    return sandbox.run(code, _suite(problem, tests), timeout_s, max_timeouts)
