"""Importance weights of sampled tokens: the off-policy correction for vLLM's sampler.

Off-policy correction for vLLM's sampler (`agent_model.vllm_importance_cap`, TRL's truncated importance sampling):
vLLM computes with its own kernels, so the distribution it samples from, q_vllm, differs slightly from the one the
trained model's sampler would use, q_model (the same temperature, top-k and top-p on the HF model's logits).
`importance_weights` scores each sampled token under q_model right after the rollout (no gradient, eval mode; the
trainers call it through `TeamAlgorithm.train_samples`), and the sample keeps w_t = min(q_model(token_t) /
q_vllm(token_t), cap) per token (`TrainSample.importance_weights`); the policy loss becomes
-sum_t w_t log pi(token_t) * advantage. Why at sampling time and not from the update's own forward: the update's
log-probs are the raw model's (temperature 1, no top-p), not q_model, and several trainer schedules take more than
one optimizer step per batch of samples (MAGRPO `nodes`, the actor-critics' `turns` and `train_batch_size`) or
train a buffer's leftover nodes after later steps, so the update's model is not always the one that sampled. The
KL term of the loss form is not weighted.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from cooprl.models.logprobs import completion_logprobs
from cooprl.rollout.generation import Completion, SamplingParams, sampling_logits
from cooprl.update.policy_gradient import scored_in_eval


IMPORTANCE_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")


def bounded_ratios(log_ratios: torch.Tensor, cap: float, mode: str) -> torch.Tensor:
    """Return each token's weight from its log-ratio log(q_model / q_sampler) ([tokens], 0 where unknown) as TRL's
    `vllm_importance_sampling_mode` bounds it: per token or one ratio per sequence (exp of the summed log-ratios, for
    every token), truncated at `cap` or masked (0) above it."""
    if mode not in IMPORTANCE_MODES:
        raise ValueError(f"vllm_importance_mode {mode!r}: expected one of {', '.join(IMPORTANCE_MODES)}")
    ratio = torch.exp(log_ratios.sum().expand_as(log_ratios) if mode.startswith("sequence") else log_ratios)
    return ratio.clamp(max=cap) if mode.endswith("truncate") else ratio.masked_fill(ratio > cap, 0.0)


@torch.no_grad()
def importance_weights(model: Any, completions: Sequence[Completion], pad_id: int, params: SamplingParams,
                       cap: float, batch_size: int | None = None, mode: str = "token_truncate") -> list[torch.Tensor]:
    """Return, per completion, each token's importance weight as a 1-D float tensor on the CPU: the ratio
    q_model / q_sampler bounded by `cap` as `mode` says (`bounded_ratios`; token_truncate: min(ratio, cap)). q_model
    is `model`'s probability of the token under the sampling settings `params` (temperature, top-k, top-p:
    `sampling_logits`), scored now in eval mode; q_sampler the sampler's, from `completion.sampler_logprobs`. A token
    the sampler gave no log-prob (NaN) has ratio 1. Call it before `model`'s next optimizer step: q_model is the
    sampling policy's."""
    if any(c.sampler_logprobs is None for c in completions):
        raise ValueError("importance weights need each completion's sampler_logprobs (the vLLM backend with "
                         "agent_model.vllm_importance_cap fills them)")

    def score(batch: list[Completion]) -> list[torch.Tensor]:
        logps, _ = completion_logprobs(model, [c.prompt_ids for c in batch], [c.completion_ids for c in batch],
                                       pad_id, warp=lambda logits: sampling_logits(logits, params))
        weights = []
        for row, c in zip(logps.float().cpu(), batch):
            log_ratios = row[:len(c.completion_ids)] - c.sampler_logprobs
            weights.append(bounded_ratios(torch.nan_to_num(log_ratios, nan=0.0), cap, mode))
        return weights

    return scored_in_eval(model, completions, batch_size, score)
