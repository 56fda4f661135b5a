"""The one interface every test-time strategy has: `solve(problem, llm, sandbox, budget) -> Solution`.

A strategy sees the problem (prompt, entry point; never its tests), an `LLM` (strategies/llm.py) and our
sandbox (for the code and the tests it generates, always run as untrusted programs). It talks to the LLM
only through a `Session`, which meters every call against the `Budget` and keeps the `Cost`. The ground-truth
tests are used once, after `solve` returns, by `strategies.execution.score` (evaluate_strategy.py).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, Sequence

from cooprl.config import option
from cooprl.rollout.generation import SamplingParams


@dataclass(frozen=True)
class Generation:
    """One sampled answer of an LLM: its text and the tokens it cost (prompt tokens in, answer tokens out)."""

    text: str
    tokens_in: int
    tokens_out: int


class LLM(Protocol):
    """Anything that samples `n` answers to a prompt (backends: strategies/llm.py)."""

    name: str

    def generate(self, prompt: str, n: int, params: SamplingParams) -> list[Generation]:
        """Return `n` sampled answers to `prompt`."""
        ...


@dataclass
class Budget:
    """What one problem may cost, and how answers are sampled.

    A call is one sampled answer (n samples of one prompt are n calls, as API bills count them). When the
    calls or tokens run out, `Session.generate` returns fewer answers (or none) and the strategy finishes
    with what it has.
    """

    max_calls: int = option(200, "sampled answers per problem (n samples of one prompt are n calls)", min=0)
    max_tokens: int | None = option(None, "tokens in + out per problem (null = no limit)", min=1)
    max_new_tokens: int = option(256, "longest answer of one call (caps every strategy's own lengths)", min=1)
    temperature: float = option(0.8, "sampling temperature (CoSPlay's setting; CollabCoder does not say)", min=0.0)
    top_p: float = option(0.95, "nucleus sampling mass", min=0.0, max=1.0)
    top_k: int | None = option(40, "top-k sampling (null = off)", min=0)


@dataclass
class Cost:
    """What a problem cost so far: LLM calls (sampled answers) and tokens in and out."""

    calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0

    def add(self, generations: Sequence[Generation]) -> None:
        self.calls += len(generations)
        self.tokens_in += sum(g.tokens_in for g in generations)
        self.tokens_out += sum(g.tokens_out for g in generations)


@dataclass
class Solution:
    """What a strategy returns: the chosen code, every candidate and generated test it considered, the cost, its
    own metrics (e.g. CollabCoder's plan/code updates, CoSPlay's pool statistics) and a trace of its steps."""

    code: str
    candidates: list[str] = field(default_factory=list)
    tests: list[str] = field(default_factory=list)
    cost: Cost = field(default_factory=Cost)
    metrics: dict[str, Any] = field(default_factory=dict)
    trace: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class Session:
    """An LLM metered by a Budget: every answer passes through here, so the Cost is complete."""

    def __init__(self, llm: LLM, budget: Budget):
        self.llm, self.budget, self.cost = llm, budget, Cost()

    def calls_left(self) -> int:
        return max(0, self.budget.max_calls - self.cost.calls)

    def exhausted(self) -> bool:
        over_tokens = (self.budget.max_tokens is not None
                       and self.cost.tokens_in + self.cost.tokens_out >= self.budget.max_tokens)
        return over_tokens or self.calls_left() == 0

    def generate(self, prompt: str, n: int = 1, *, max_new_tokens: int | None = None,
                 stop: Sequence[str] = (), temperature: float | None = None) -> list[str]:
        """Return up to `n` answer texts to `prompt`: fewer when the budget runs out, none once it has."""
        n = 0 if self.exhausted() else min(n, self.calls_left())
        if n <= 0:
            return []
        b = self.budget
        params = SamplingParams(max_new_tokens=min(max_new_tokens or b.max_new_tokens, b.max_new_tokens),
                                temperature=b.temperature if temperature is None else temperature,
                                top_p=b.top_p, top_k=b.top_k, stop_strings=tuple(stop))
        generations = self.llm.generate(prompt, n, params)
        self.cost.add(generations)
        return [g.text for g in generations]


class Strategy(Protocol):
    """A test-time strategy: `solve(problem, llm, sandbox, budget) -> Solution`."""

    def solve(self, problem: Any, llm: LLM, sandbox: Any, budget: Budget) -> Solution:
        ...
