"""`direct`: one sampled program (the baseline every other strategy is compared with)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cooprl.config import option
from strategies.base import LLM, Budget, Session, Solution
from strategies.text import CODE_STOP, code_prompt, extract_code


@dataclass
class DirectConfig:
    temperature: float | None = option(None, "sampling temperature (null = budget.temperature; 0 = greedy)", min=0.0)


def solve(problem: Any, llm: LLM, sandbox: Any, budget: Budget, config: DirectConfig | None = None) -> Solution:
    """Return the one program the LLM writes for `problem` (empty when the budget allows no call)."""
    config = config or DirectConfig()
    session = Session(llm, budget)
    texts = session.generate(code_prompt(problem), 1, stop=CODE_STOP, temperature=config.temperature)
    code = extract_code(problem, texts[0]) if texts else ""
    return Solution(code=code, candidates=[code] if texts else [], cost=session.cost)
