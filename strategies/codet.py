"""`codet`: CodeT (Chen et al., ICLR 2023), dual execution agreement.

Sample N programs and N test-writing answers (the first `tests_per_sample` asserts of each); run every program
on every generated test in the sandbox. Programs that pass exactly the same tests form a consensus set
(S_x codes, S_y tests) scored |S_x| * |S_y|; the answer is a program of the best set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from cooprl.config import option
from envs.code_generation.prompts import problem_code
from rewards.problem import Problem
from strategies.base import LLM, Budget, Session, Solution
from strategies.execution import pass_matrix
from strategies.text import CODE_STOP, code_prompt, entry, extract_code, parse_asserts


@dataclass
class CodeTConfig:
    num_codes: int = option(100, "programs sampled (CodeT's 100)", min=1)
    num_test_samples: int = option(100, "test-writing answers sampled (CodeT's 100)", min=0)
    tests_per_sample: int = option(5, "asserts kept from each test-writing answer (its first ones)", min=1)
    test_max_new_tokens: int = option(300, "longest test-writing answer in tokens", min=1)
    timeout_s: float = option(2.0, "seconds per generated test run", min=0.01)


def test_prompt(problem: Problem) -> str:
    """CodeT's test prompt: the function with a `pass` body, then `# check the correctness of f` and `assert f(`."""
    return (f"{problem_code(problem).rstrip()}\n    pass\n\n"
            f"# check the correctness of {entry(problem)}\nassert {entry(problem)}(")


def dual_agreement(matrix: Sequence[Sequence[int]]) -> list[tuple[int, list[int], list[int]]]:
    """Return CodeT's consensus sets, best first: (score, codes, tests) with score = len(codes) * len(tests).
    A set is the codes that pass exactly the same non-empty set of tests. Ties keep the first code's order."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, row in enumerate(matrix):
        passed = tuple(j for j, ok in enumerate(row) if ok)
        if passed:
            groups.setdefault(passed, []).append(i)
    sets = [(len(codes) * len(tests), codes, list(tests)) for tests, codes in groups.items()]
    return sorted(sets, key=lambda s: (-s[0], s[1][0]))


def solve(problem: Problem, llm: LLM, sandbox: Any, budget: Budget, config: CodeTConfig | None = None) -> Solution:
    """Return the program of CodeT's best consensus set (the first program when no program passes any test)."""
    config = config or CodeTConfig()
    session = Session(llm, budget)
    codes = [extract_code(problem, t) for t in session.generate(code_prompt(problem), config.num_codes, stop=CODE_STOP)]
    tests: list[str] = []
    for text in session.generate(test_prompt(problem), config.num_test_samples,
                                 max_new_tokens=config.test_max_new_tokens):
        for t in parse_asserts(problem, f"assert {entry(problem)}(" + text, config.tests_per_sample):
            if t not in tests:
                tests.append(t)
    matrix = pass_matrix(sandbox, problem, codes, tests, config.timeout_s)
    sets = dual_agreement(matrix)
    chosen = sets[0][1][0] if sets else 0
    metrics = {"num_codes": len(codes), "num_tests": len(tests), "consensus_sets": len(sets),
               "best_score": sets[0][0] if sets else 0}
    return Solution(code=codes[chosen] if codes else "", candidates=codes, tests=tests, cost=session.cost,
                    metrics=metrics, trace=[{"step": "dual_agreement", "matrix": matrix, "chosen": chosen}])
