"""The policy-gradient update shared by the trainers: loss = -sum_t log pi(token_t) * advantage.

Samples are scored in batches of at most `batch_size` (one forward each, `completion_logprobs`), the loss
is averaged over all samples of the buffer, gradients are accumulated across batches, and one optimizer step
follows. Samples that share a prompt (a sibling group) go into the same batch, where `completion_logprobs`
packs the batch as a token trie and runs each shared prefix once: a sibling group's prompt, and with a batch
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
"""

from __future__ import annotations

import logging
import math
import copy
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from cooprl import distributed, fsdp
from cooprl.logprobs import completion_logprobs, group_by_prompt
from cooprl.optim import guarded_step

log = logging.getLogger(__name__)


@dataclass
class TrainSample:
    """One completion to train on: its prompt and completion ids, and its advantage."""

    prompt_ids: torch.Tensor
    completion_ids: torch.Tensor
    advantage: float


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
    policy's `token_logps` ([batch, tokens], `mask` marking real tokens): sum over tokens of exp(d) - d - 1 with
    d = log p_ref - log p_policy (>= 0 per token). The reference scores the same completions without gradient."""
    with torch.no_grad():
        ref_logps, _ = completion_logprobs(reference, prompts, completions, pad_id)
    delta = (ref_logps.to(token_logps.device) - token_logps) * mask
    return ((torch.exp(delta) - delta - 1) * mask).sum(-1)


@torch.no_grad()
def sampled_kls(model: Any, reference: Any, samples: Sequence[TrainSample], pad_id: int,
                batch_size: int | None = None) -> list[float]:
    """Return the k3 KL(policy || reference) of each sample's completion, summed over its tokens, as plain floats
    (no gradient): what upstream's reward form subtracts from the reward. The policy scores in eval mode, as at
    sampling time; its train/eval mode is restored afterwards."""
    if not samples:
        return []
    training = model.training
    model.eval()
    kls: dict[int, float] = {}
    index = {id(s): i for i, s in enumerate(samples)}
    fsdp.check_gathered(model, "scoring the sampled KL")   # each process scores its own number of batches
    try:
        for batch in sibling_batches(list(samples), batch_size or len(samples)):
            prompts = [s.prompt_ids for s in batch]
            completions = [s.completion_ids for s in batch]
            token_logps, mask = completion_logprobs(model, prompts, completions, pad_id)
            values = k3_kl(token_logps, mask, reference, prompts, completions, pad_id).float().cpu().tolist()
            kls.update({index[id(s)]: v for s, v in zip(batch, values)})
    finally:
        model.train(training)
    return [kls[i] for i in range(len(samples))]


def kl_penalized(rewards: Sequence[float], kls: Sequence[float], coef: float) -> list[float]:
    """Return each reward (or return) minus coef x the KL of its sample: upstream's reward-form reference KL."""
    return [r - coef * kl for r, kl in zip(rewards, kls)]


def sibling_batches(samples: Sequence[TrainSample], size: int) -> list[list[TrainSample]]:
    """Split `samples` into batches of at most `size`, keeping samples with the same prompt together.

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
                         kl_coef: float = 0.0, reference: Any = None,
                         extra_backward: Callable[[], float] | None = None,
                         extra_samples: int = 0) -> dict[str, float]:
    """Apply one optimizer step on `samples`; return metrics (loss, grad_norm, skipped, extra_loss; kl when the KL
    term is on: `kl_coef` > 0 with a `reference`, the loss form of `reference_kl_form`).

    `extra_backward`, when given, backpropagates a second loss into parameters of the same optimizer after
    the policy loss and before the clipped step (the actor-critic's value loss: a value head sharing the
    actor's trunk, or a separate critic trained with no policy samples); it returns that loss's value.
    `extra_samples`: how many samples that loss averages over, when there are no policy `samples` (a separate
    critic's step): under data-parallel training it weighs this rank's gradient (cooprl.optim.guarded_step).
    """
    kl_on = kl_coef > 0 and reference is not None
    active = [s for s in samples if s.advantage != 0.0 or kl_on] if samples else []
    metrics = {"loss": 0.0, "grad_norm": 0.0, "skipped_nonfinite": 0.0, "trained_samples": float(len(active))}
    if kl_on:   # reported only when it is a term of this loss (the reward form reports the sampled KL instead)
        metrics["kl"] = 0.0
    # under data-parallel training every rank reaches the guarded step, which averages the ranks' gradients
    data_parallel = distributed.is_data_parallel(optimizer)
    if not active and extra_backward is None and not data_parallel:
        return metrics
    total = len(samples)
    weight = total or extra_samples   # this rank's share of the ranks' averaged gradient
    size = batch_size or max(len(active), 1)
    batches = sibling_batches(active, size)
    real_batches, denominator = len(batches), total
    sharded = fsdp.is_sharded(model)
    if sharded:
        # every process runs as many forward/backward passes (each is a collective of the sharded model): the
        # shorter lists end with zero-weight one-token batches; gradients are summed over the processes, so each
        # loss is divided by every process's sample count (cooprl.fsdp)
        batches, real_batches = fsdp.pad_batches(batches, [_padding_sample(pad_id)])
        denominator = fsdp.global_count(total)
    nonfinite = False
    model.train()
    optimizer.zero_grad(set_to_none=True)
    for index, batch in enumerate(batches):
        prompts = [s.prompt_ids for s in batch]
        completions = [s.completion_ids for s in batch]
        token_logps, mask = completion_logprobs(model, prompts, completions, pad_id)
        adv = torch.tensor([s.advantage for s in batch], dtype=token_logps.dtype, device=token_logps.device)
        loss = -(token_logps.sum(-1) * adv).sum() / max(denominator, 1)
        if kl_on:
            kl = k3_kl(token_logps, mask, reference, prompts, completions, pad_id)
            loss = loss + kl_coef * kl.sum() / max(denominator, 1)
            if index < real_batches:
                metrics["kl"] += kl.sum().item() / total
        if index >= real_batches or nonfinite:
            loss = loss * 0.0   # a padding pass (or the rest of a skipped update): same collectives, no gradient
        elif not torch.isfinite(loss):
            log.warning("non-finite loss (%s): this update is skipped", loss.item())
            nonfinite = True
            if not sharded:
                optimizer.zero_grad(set_to_none=True)
                if data_parallel:   # the other ranks skip this step too
                    guarded_step(optimizer, max_grad_norm, weight=weight, skip=True)
                return {**metrics, "loss": float("nan"), "skipped_nonfinite": 1.0}
            loss = loss * 0.0   # the sharded passes go on (every process runs them all); the step is skipped
        else:   # reported as this process's mean, as without sharding
            metrics["loss"] += loss.item() * denominator / total if sharded else loss.item()
        loss.backward()
    if nonfinite:
        guarded_step(optimizer, max_grad_norm, weight=weight, skip=True)
        return {**metrics, "loss": float("nan"), "skipped_nonfinite": 1.0}
    if extra_backward is not None:
        metrics["extra_loss"] = extra_backward()
        if not math.isfinite(metrics["extra_loss"]):
            log.warning("non-finite extra loss (%s): this update is skipped", metrics["extra_loss"])
            optimizer.zero_grad(set_to_none=True)
            if data_parallel:
                guarded_step(optimizer, max_grad_norm, weight=weight, skip=True)
            return {**metrics, "skipped_nonfinite": 1.0}
    norm = guarded_step(optimizer, max_grad_norm, weight=weight)
    if norm is None:
        return {**metrics, "skipped_nonfinite": 1.0}
    metrics["grad_norm"] = norm
    return metrics
