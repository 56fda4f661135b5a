"""The policy-gradient update shared by the trainers: loss = -sum_t log pi(token_t) * advantage.

Samples are scored in batches of at most `batch_size` (one forward each, `completion_logprobs`), the loss
is averaged over all samples of the buffer, and the update engine (cooprl.update.engine) accumulates the gradients across
batches and takes the one optimizer step; this module is the loss it is handed. Samples that share a prompt
(a sibling group) go into the same batch, where `completion_logprobs` packs the batch as a token trie and runs each shared prefix once: a sibling group's prompt, and with a batch
that holds a whole multi-turn tree, the turn-1 prompt that every turn-2 prompt starts with.
Samples with a zero advantage are skipped when there is no KL term: their gradient is exactly zero.
A non-finite loss skips the whole update (counted in the metrics), never a silent substitute value.

The reference-model KL is shared by every trainer (`reference_kl_coef` of any trainer section): the frozen start
model (`frozen_reference`) scores the same completions, and `k3_kl` gives the k3 estimate of KL(policy || reference)
per sequence. It acts in one of two forms (`reference_kl_form`):
- `reward` (upstream's): `sampled_kls` scores each sampled completion once, without gradient, and the trainer
  subtracts coef x that KL from the sample's reward or return before its advantage is computed (`kl_penalized`);
  the policy loss then has no KL term;
- `loss`: `policy_gradient_step(kl_coef=...)` adds coef x the k3 KL to the loss, with gradient (MADPO adds it to
  its DPO loss the same way: a DPO step has no reward to penalize).

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

import copy
import logging
from typing import Any, Callable, Sequence

import torch

from cooprl.parallel import fsdp
from cooprl.update import losses
from cooprl.update.engine import Sync, Term, train_step
from cooprl.rollout.generation import Completion, SamplingParams, sampling_logits
from cooprl.models.logprobs import completion_logprobs, group_by_prompt
from cooprl.samples import TrainSample

log = logging.getLogger(__name__)


@torch.no_grad()
def importance_weights(model: Any, completions: Sequence[Completion], pad_id: int, params: SamplingParams,
                       cap: float, batch_size: int | None = None) -> list[torch.Tensor]:
    """Return, per completion, each token's truncated importance weight min(q_model / q_sampler, cap) as a 1-D float
    tensor on the CPU: q_model is `model`'s probability of the token under the sampling settings `params` (temperature,
    top-k, top-p: `sampling_logits`), scored now in eval mode; q_sampler the sampler's, from
    `completion.sampler_logprobs`. A token the sampler gave no log-prob (NaN) weighs 1. Call it before `model`'s next
    optimizer step: q_model is the sampling policy's."""
    if any(c.sampler_logprobs is None for c in completions):
        raise ValueError("importance weights need each completion's sampler_logprobs (the vLLM backend with "
                         "agent_model.vllm_importance_cap fills them)")

    def score(batch: list[Completion]) -> list[torch.Tensor]:
        logps, _ = completion_logprobs(model, [c.prompt_ids for c in batch], [c.completion_ids for c in batch],
                                       pad_id, warp=lambda logits: sampling_logits(logits, params))
        weights = []
        for row, c in zip(logps.float().cpu(), batch):
            ratio = torch.exp(row[:len(c.completion_ids)] - c.sampler_logprobs).clamp(max=cap)
            weights.append(torch.where(torch.isnan(c.sampler_logprobs), 1.0, ratio))
        return weights

    return _scored_in_eval(model, completions, batch_size, score)


def _scored_in_eval(model: Any, samples: Sequence[Any], batch_size: int | None,
                    score: Callable[[list[Any]], list[Any]]) -> list[Any]:
    """Return `score(batch)`'s value for each of `samples` (TrainSamples or Completions), in their order: `score` runs
    on sibling batches of at most `batch_size` (null: all at once) with `model` in eval mode, as at sampling time (no
    dropout); the model's train/eval mode is restored afterwards."""
    if not samples:
        return []
    fsdp.check_gathered(model, "scoring without gradient")   # each process scores its own number of batches
    training = model.training
    model.eval()
    values: dict[int, Any] = {}
    try:
        for batch in sibling_batches(list(samples), batch_size or len(samples)):
            values.update(zip(map(id, batch), score(batch)))
    finally:
        model.train(training)
    return [values[id(s)] for s in samples]


def frozen_reference(model: Any) -> Any:
    """Return the frozen start model of `model` for reference log-probs: with LoRA the model with its adapters
    disabled (no copy, see _AdapterOffView); otherwise a frozen deep copy."""
    if hasattr(model, "disable_adapter"):
        return _AdapterOffView(model)
    reference = copy.deepcopy(model).eval()
    for p in reference.parameters():
        p.requires_grad_(False)
    return reference


class _AdapterOffView:
    """Calls a peft model with its adapters disabled: the frozen start model, without a second copy."""

    def __init__(self, model: Any):
        self.model = model

    def parameters(self):
        return self.model.parameters()

    def modules(self):
        return self.model.modules()

    def __call__(self, **kwargs: Any) -> Any:
        with self.model.disable_adapter():
            return self.model(**kwargs)


def k3_kl(token_logps: torch.Tensor, mask: torch.Tensor, reference: Any, prompts: Sequence[torch.Tensor],
          completions: Sequence[torch.Tensor], pad_id: int) -> torch.Tensor:
    """Return the k3 estimate of KL(policy || reference) per sequence, shape [batch], differentiable through the
    policy's `token_logps` ([batch, tokens], `mask` marking real tokens): the reference scores the same completions
    without gradient, then cooprl.update.losses.k3_kl."""
    with torch.no_grad():
        ref_logps, _ = completion_logprobs(reference, prompts, completions, pad_id)
    return losses.k3_kl(token_logps, ref_logps, mask)


@torch.no_grad()
def sampled_kls(model: Any, reference: Any, samples: Sequence[TrainSample], pad_id: int,
                batch_size: int | None = None) -> list[float]:
    """Return the k3 KL(policy || reference) of each sample's completion, summed over its tokens, as plain floats
    (no gradient): what upstream's reward form subtracts from the reward. The policy scores in eval mode, as at
    sampling time; its train/eval mode is restored afterwards."""
    def score(batch: list[TrainSample]) -> list[float]:
        prompts = [s.prompt_ids for s in batch]
        completions = [s.completion_ids for s in batch]
        token_logps, mask = completion_logprobs(model, prompts, completions, pad_id)
        return k3_kl(token_logps, mask, reference, prompts, completions, pad_id).float().cpu().tolist()

    return _scored_in_eval(model, samples, batch_size, score)


def sibling_batches(samples: Sequence[Any], size: int) -> list[list[Any]]:
    """Split `samples` (TrainSamples or Completions) into batches of at most `size`, keeping samples with the same
    prompt together.

    Groups come in order of first appearance and are cut only when larger than `size`; a batch takes whole
    groups while they fit. Zero-advantage samples dropped from a group would otherwise shift plain
    fixed-size chunks across group boundaries, and each prompt would be run once per chunk it straddles.
    """
    batches: list[list[TrainSample]] = []
    current: list[TrainSample] = []
    for group in group_by_prompt([s.prompt_ids for s in samples]):
        for start in range(0, len(group), size):
            chunk = [samples[i] for i in group[start:start + size]]
            if current and len(current) + len(chunk) > size:
                batches.append(current)
                current = []
            current = current + chunk
    if current:
        batches.append(current)
    return batches


def _padding_sample(pad_id: int) -> TrainSample:
    """Return the one-token sample of a sharded update's padding pass (its loss is multiplied by zero)."""
    token = torch.tensor([pad_id], dtype=torch.long)
    return TrainSample(token, token, 0.0)


def policy_gradient_step(model: Any, optimizer: torch.optim.Optimizer, samples: Sequence[TrainSample], pad_id: int,
                         *, batch_size: int | None = None, max_grad_norm: float | None = 1.0,
                         kl_coef: float = 0.0, reference: Any = None, extra_terms: Sequence[Term] = (),
                         extra_samples: int = 0, sync: Sync = Sync.NONE) -> dict[str, float]:
    """Apply one optimizer step on `samples` through the update engine (cooprl.update.engine); return metrics (loss,
    grad_norm, skipped_nonfinite, trained_samples; extra_loss with `extra_terms`; kl when the KL term is on:
    `kl_coef` > 0 with a `reference`, the loss form of `reference_kl_form`; is_weight_mean and is_weight_max over the
    tokens of `samples` when they carry importance weights).

    A sample's loss is -sum_t w_t log pi(token_t) x its advantage, w_t its `importance_weights` (1 without them),
    averaged over all of `samples` (zero-advantage ones are not run without a KL term: their gradient is zero).
    `extra_terms`: more losses of the same optimizer step, averaged over the same count (the actor-critic's value
    loss on a head sharing the actor's trunk); with no policy `samples` (a separate critic's step) `extra_samples`
    is that count. `sync`: how the step meets the other processes (cooprl.parallel.context.Parallel.sync_of)."""
    kl_on = kl_coef > 0 and reference is not None
    active = [s for s in samples if s.advantage != 0.0 or kl_on] if samples else []
    metrics = {"loss": 0.0, "grad_norm": 0.0, "skipped_nonfinite": 0.0, "trained_samples": float(len(active))}
    if kl_on:   # reported only when it is a term of this loss (the reward form reports the sampled KL instead)
        metrics["kl"] = 0.0
    weighted = any(s.importance_weights is not None for s in samples or ())
    if weighted:
        metrics.update(_weight_metrics(samples))
    total = len(samples)

    def loss(batch: list[TrainSample], denominator: float) -> tuple[torch.Tensor, dict[str, float]]:
        prompts = [s.prompt_ids for s in batch]
        completions = [s.completion_ids for s in batch]
        token_logps, mask = completion_logprobs(model, prompts, completions, pad_id)
        adv = torch.tensor([s.advantage for s in batch], dtype=token_logps.dtype, device=token_logps.device)
        token_weights = _token_weights(batch, token_logps) if weighted else None
        value = losses.policy_gradient_loss(token_logps, adv, token_weights) / max(denominator, 1)
        if not kl_on:
            return value, {}
        kl = k3_kl(token_logps, mask, reference, prompts, completions, pad_id)
        return value + kl_coef * kl.sum() / max(denominator, 1), {"kl": kl.sum().item() / total}

    terms = [Term(sibling_batches(active, batch_size or max(len(active), 1)), loss), *extra_terms]
    result = train_step([optimizer], terms, weight=total or extra_samples, max_grad_norm=max_grad_norm, sync=sync,
                        padding=Term([[_padding_sample(pad_id)]], loss), models=[model])
    metrics.update(result.metrics)
    metrics["loss"] = result.losses["loss"]
    if extra_terms:
        metrics["extra_loss"] = sum(value for name, value in result.losses.items() if name != "loss")
    if result.skipped:
        metrics["skipped_nonfinite"] = 1.0
    elif result.grad_norms:
        metrics["grad_norm"] = result.grad_norms[0]
    return metrics


def _token_weights(batch: Sequence[TrainSample], like: torch.Tensor) -> torch.Tensor:
    """Return the batch's importance weights laid out as `like` ([batch, tokens]): row i holds sample i's weights
    (ones without them), zero past its completion (where `like`, the log-probs, is zero too)."""
    weights = torch.zeros_like(like)
    for row, s in enumerate(batch):
        n = len(s.completion_ids)
        weights[row, :n] = 1.0 if s.importance_weights is None else s.importance_weights.to(like)
    return weights


def _weight_metrics(samples: Sequence[TrainSample]) -> dict[str, float]:
    """Return is_weight_mean and is_weight_max over the tokens of the samples that carry importance weights."""
    tokens = torch.cat([s.importance_weights for s in samples if s.importance_weights is not None])
    if not tokens.numel():
        return {}
    return {"is_weight_mean": tokens.mean().item(), "is_weight_max": tokens.max().item()}
