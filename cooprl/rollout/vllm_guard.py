"""The stale-weights guard of the vLLM backend (`agent_model.vllm_weight_check`): after every weight push into an
engine or wake-up of one, the engine and the trained model score the same fixed probe texts, and a mean log-prob gap
beyond a bound that fits the weights' dtype stops the run with one error (`EngineWeightsError`).

The engine samples a short continuation of each fixed probe prompt (seeded, temperature 1, no top-k/top-p, so its
log-probs are the plain log-softmax in either of vLLM's log-prob modes); the trained model scores the same tokens. This
goes through vLLM's ordinary sampler with the adapter the engine samples now: vLLM's prompt log-probs would score
fixed texts in one prefill, but with a LoRA request they fail in vLLM 0.32's CPU build (its LoRA logits kernel gets
one adapter index per request for every prompt position) and are unproven on its GPU kernels.

A rollout engine that keeps sampling from old or broken weights raises nothing: the curves just go flat. Every path
that puts weights into an engine (a merged push, a new LoRA adapter version, a wake from sleep, the first sync after a
start or a resume, each rank's engine under ddp) is followed by this check before the engine samples again.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from cooprl.errors import UserError

log = logging.getLogger(__name__)

# Fixed prompts (code and prose, like the tasks' texts); the engine continues each by PROBE_TOKENS tokens
PROBES = (
    'def add(a, b):\n    """Return the sum of a and b."""\n',
    "Write a Python function that reverses a list.\n\ndef reverse(items):\n",
    "def is_even(n):\n    return n % 2 == 0\n\n\n",
    "The quick brown fox jumps over the lazy dog,",
)
PROBE_TOKENS = 16
PROBE_SEED = 20261206

# Mean |log-prob gap| allowed per dtype: float32 engines match the trained model to ~1e-6 (vLLM's CPU build,
# docs/vllm.md); bf16/fp16 kernels of the engine and of transformers round differently (per-token gaps up to ~0.2).
DEFAULT_BOUNDS = {torch.float32: 0.01, torch.bfloat16: 0.1, torch.float16: 0.1}


class EngineWeightsError(UserError):
    """A vLLM engine's log-probs differ from the trained model's beyond the bound: it samples other weights."""


@dataclass(frozen=True)
class ProbeSequence:
    """One probe's token ids: the prompt's, then the completion the engine sampled (whose log-probs are compared)."""

    prompt: list[int]
    completion: list[int]

    @property
    def ids(self) -> list[int]:
        return self.prompt + self.completion


@dataclass(frozen=True)
class LogprobGap:
    """|engine - trainer| over the probes' completion tokens: their mean (what the bound applies to) and largest."""

    mean: float
    largest: float
    tokens: int


def probe_prompts(tokenizer: Any) -> list[list[int]]:
    """Return the probe prompts as token ids of `tokenizer` (no special tokens)."""
    return [list(tokenizer(text, add_special_tokens=False)["input_ids"]) for text in PROBES]


def sample_probes(llm: Any, vllm: Any, prompts: list[list[int]], **lora: Any
                  ) -> list[tuple[ProbeSequence, torch.Tensor]]:
    """Return engine `llm`'s seeded continuation of each probe prompt with its tokens' log-probs (temperature 1, no
    top-k or top-p: the log-softmax); `lora`: the `lora_request` the engine samples now, for LoRA sync."""
    params = vllm.SamplingParams(n=1, max_tokens=PROBE_TOKENS, temperature=1.0, top_p=1.0, seed=PROBE_SEED,
                                 ignore_eos=True, logprobs=0)
    results = llm.generate([{"prompt_token_ids": ids} for ids in prompts], [params] * len(prompts), use_tqdm=False,
                           **lora)
    out = []
    for ids, result in zip(prompts, results, strict=True):
        tokens = list(result.outputs[0].token_ids)
        # one {token id: Logprob} per sampled token (a list, or vLLM's FlatLogprobs, indexed alike)
        logprobs = [position[t].logprob for t, position in zip(tokens, result.outputs[0].logprobs, strict=True)]
        out.append((ProbeSequence(ids, tokens), torch.tensor(logprobs)))
    return out


def trainer_logprobs(model: Any, probes: Sequence[ProbeSequence]) -> list[torch.Tensor]:
    """Return the trained model's log-softmax of each probe's completion tokens (float32, no gradient, no dropout:
    the weights as they are, not the update's numerics)."""
    device = next(model.parameters()).device
    training = model.training
    model.eval()
    try:
        out = []
        with torch.no_grad():
            for probe in probes:
                ids = torch.tensor([probe.ids], device=device)
                logits = model(input_ids=ids).logits[0, len(probe.prompt) - 1:-1].float()
                completion = torch.tensor(probe.completion, device=device).unsqueeze(-1)
                out.append(torch.log_softmax(logits, -1).gather(-1, completion).squeeze(-1).cpu())
        return out
    finally:
        model.train(training)


def logprob_gap(engine: Sequence[torch.Tensor], trainer: Sequence[torch.Tensor]) -> LogprobGap:
    """Return the gap between two scorings of the same probes."""
    gaps = torch.cat([(e.float() - t.float()).abs() for e, t in zip(engine, trainer, strict=True)])
    gaps = torch.nan_to_num(gaps, nan=float("inf"))   # an engine that returns NaN is as wrong as can be
    return LogprobGap(gaps.mean().item(), gaps.max().item(), gaps.numel())


@dataclass
class WeightGuard:
    """Compares an engine with its trained model after each sync; `agent` names it in the error."""

    bound: float
    agent: str
    checks: int = 0
    seconds: float = 0.0

    def event(self, sync: str, slept_at: int | None, rank: int | None) -> str:
        """Return how the error names what just happened: `sync`, the sleep it woke from (its level), the first check
        (a run's start or resume), the rank under ddp."""
        woke = f", on waking from a level-{slept_at} sleep" if slept_at is not None else ""
        first = " (the first sync: the run's start or its resume)" if self.checks == 0 and not woke else ""
        return sync + woke + first + (f", rank {rank}" if rank is not None else "")

    def check(self, engine_sample: Callable[[list[list[int]]], list[tuple[ProbeSequence, torch.Tensor]]],
              model: Any, tokenizer: Any, event: str) -> LogprobGap:
        """Have the engine continue the probe prompts (`engine_sample`: each probe with the log-probs of its sampled
        tokens), score the same tokens with `model`; return the gap, or raise EngineWeightsError naming the agent,
        `event` (the sync that just happened) and the gap."""
        start = time.perf_counter()
        probes, engine = zip(*engine_sample(probe_prompts(tokenizer)), strict=True)
        gap = logprob_gap(engine, trainer_logprobs(model, probes))
        seconds = time.perf_counter() - start
        self.checks += 1
        self.seconds += seconds
        # the first check at info (the run's console says the guard is on), every one in the run's log
        log.log(logging.INFO if self.checks == 1 else logging.DEBUG,
                "%s: vLLM engine weights checked after %s: mean log-prob gap %.2e (bound %.2g), %.2f s",
                self.agent, event, gap.mean, self.bound, seconds)
        if not gap.mean <= self.bound:
            raise EngineWeightsError(
                f"{self.agent}'s vLLM engine samples other weights than the trained model after {event}: the mean "
                f"log-prob gap on {gap.tokens} probe tokens is {gap.mean:.3g} (largest {gap.largest:.3g}), above the "
                f"bound {self.bound:.3g}; the run would train on samples of stale weights. Raise "
                "agent_model.vllm_weight_check if this dtype's kernels differ that much, or set it to 0 to turn the "
                "check off")
        return gap


def weight_guard(bound: float | None, dtype: torch.dtype, agent: str) -> WeightGuard | None:
    """Return the guard for `agent_model.vllm_weight_check` (`bound`; None: the dtype's default, 0: no guard)."""
    if bound == 0:
        return None
    return WeightGuard(DEFAULT_BOUNDS.get(dtype, 0.1) if bound is None else bound, agent)
