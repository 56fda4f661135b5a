"""Reference demonstrations of the coder+tester team: the reference solution, and asserts from the problem's tests.

The coder's demonstration is the one-function reference (`envs.code_generation.demonstrations.single_completion`).
The tester's prompt ends with `assert <entry>(`; its demonstration is the first `max_tests` one-line asserts of the
problem's own `check(candidate)` (a call of `candidate(` made a call of the entry point), the first one continuing
the prompt's `assert <entry>(`. These are training problems' tests: the trainer never builds them for an eval problem.
"""

from __future__ import annotations

import re

from envs.code_generation.demonstrations import single_completion
from rewards.problem import Problem
from rewards.self_tests import generated_asserts


def problem_asserts(problem: Problem, limit: int) -> list[str]:
    """Return at most `limit` one-line asserts of `problem`'s tests that call its entry point (`candidate(` renamed)."""
    renamed = re.sub(r"\bcandidate\(", f"{problem.entry_point}(", problem.test)
    return generated_asserts(problem.entry_point, renamed, limit)


def tester_completion(problem: Problem, max_tests: int) -> str | None:
    """Return the tester's demonstration (asserts continuing `assert <entry>(`), None when the tests have no one-line
    assert that starts with a call of the entry point."""
    start = f"assert {problem.entry_point}("
    asserts = [a for a in problem_asserts(problem, max_tests * 4) if a.startswith(start)][:max_tests]
    if not asserts:
        return None
    return asserts[0][len(start):] + "".join(f"\n{a}" for a in asserts[1:]) + "\n"


def coder_tester_demonstrations(problem: Problem, max_tests: int) -> list[str] | None:
    """Return [coder, tester] completions for `problem`, None without a reference or usable asserts."""
    completions = [single_completion(problem), tester_completion(problem, max_tests)]
    return None if any(c is None for c in completions) else completions
