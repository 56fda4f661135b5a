"""The policy-gradient loss shared by the trainers: loss = -sum_t log pi(token_t) * advantage.

`policy_gradient_term` hands the update engine (cooprl.update.engine.optimizer_step) the loss as a `Term`, as MADPO's,
SFT's, the critics' and the reward model's are: the trainer calls the engine with it (and a value loss of the same
step, for an actor with a value head) and reads the step's metrics with `policy_gradient_metrics`. Samples are
scored in batches of at most `batch_size` (one forward each, `completion_logprobs`) and the loss is averaged over
all samples of the step. Samples that share a prompt (a sibling group) go into the same batch, where
`completion_logprobs` packs the batch as a token trie and runs each shared prefix once: a sibling group's prompt,
and with a batch that holds a whole multi-turn tree, the turn-1 prompt that every turn-2 prompt starts with.
Samples with a zero advantage are skipped when there is no KL term: their gradient is exactly zero.
A non-finite loss skips the whole update (counted in the metrics), never a silent substitute value.

The reference-model KL is shared by every trainer (`reference_kl_coef` of any trainer section): the frozen start
model (`frozen_reference`) scores the same completions, and `k3_kl` gives the k3 estimate of KL(policy || reference)
per sequence. It acts in one of two forms (`reference_kl_form`):
- `reward` (the default; MADPO's only form is `loss`): `sampled_kls` scores each sampled completion once, without
  gradient, and the trainer subtracts coef x that KL from the sample's reward or return before its advantage is
  computed (`kl_penalized`); the policy loss then has no KL term;
- `loss`: `policy_gradient_term(kl=LossKL(...))` adds coef x the k3 KL to the loss, with gradient (MADPO adds it to
  its DPO loss the same way: a DPO step has no reward to penalize).
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from cooprl.metrics import MAX, STEPS, SUM, Metrics
from cooprl.models.logprobs import completion_logprobs, group_by_prompt
from cooprl.parallel.context import Parallel
from cooprl.samples import TrainSample
from cooprl.update import losses
from cooprl.update.engine import StepResult, Term

log = logging.getLogger(__name__)


def scored_in_eval(model: Any, samples: Sequence[Any], batch_size: int | None,
                    score: Callable[[list[Any]], list[Any]]) -> list[Any]:
    """Return `score(batch)`'s value for each of `samples` (TrainSamples or Completions), in their order: `score` runs
    on sibling batches of at most `batch_size` (null: all at once) with `model` in eval mode, as at sampling time (no
    dropout); the model's train/eval mode is restored afterwards."""
    if not samples:
        return []
    Parallel.check_gathered(model, "scoring without gradient")   # each process scores its own number of batches
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
    (no gradient): what the `reward` form subtracts, times coef, from the reward. The policy scores in eval mode, as at
    sampling time; its train/eval mode is restored afterwards."""
    def score(batch: list[TrainSample]) -> list[float]:
        prompts = [s.prompt_ids for s in batch]
        completions = [s.completion_ids for s in batch]
        token_logps, mask = completion_logprobs(model, prompts, completions, pad_id)
        return k3_kl(token_logps, mask, reference, prompts, completions, pad_id).float().cpu().tolist()

    return scored_in_eval(model, samples, batch_size, score)


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


@dataclass(frozen=True)
class LossKL:
    """The reference-KL term of a policy loss (`reference_kl_form: loss`): coef x the k3 KL to `reference`."""

    reference: Any
    coef: float


def policy_gradient_term(model: Any, samples: Sequence[TrainSample], pad_id: int, *, batch_size: int | None = None,
                         kl: LossKL | None = None) -> Term:
    """Return the policy loss of `samples` as a Term of the update engine (`weight` = len(samples)): a sample's loss is
    -sum_t w_t log pi(token_t) x its advantage, w_t its `importance_weights` (1 without them), plus `kl`'s coef x its
    k3 KL to the reference (metric `kl`). Forward batches of at most `batch_size` samples (None: all), siblings
    together; zero-advantage samples are not run without a KL term (their gradient is zero)."""
    kl_on = kl is not None and kl.coef > 0
    active = [s for s in samples if s.advantage != 0.0 or kl_on]
    total = len(samples)
    weighted = any(s.importance_weights is not None for s in samples)

    def loss(batch: list[TrainSample], denominator: float) -> tuple[torch.Tensor, dict[str, float]]:
        prompts = [s.prompt_ids for s in batch]
        completions = [s.completion_ids for s in batch]
        token_logps, mask = completion_logprobs(model, prompts, completions, pad_id)
        adv = torch.tensor([s.advantage for s in batch], dtype=token_logps.dtype, device=token_logps.device)
        token_weights = _token_weights(batch, token_logps) if weighted else None
        value = losses.policy_gradient_loss(token_logps, adv, token_weights) / max(denominator, 1)
        if not kl_on:
            return value, {}
        sequence_kl = k3_kl(token_logps, mask, kl.reference, prompts, completions, pad_id)
        return value + kl.coef * sequence_kl.sum() / max(denominator, 1), {"kl": sequence_kl.sum().item() / total}

    return Term(sibling_batches(active, batch_size or max(len(active), 1)), loss, padding=[_padding_sample(pad_id)])


def policy_gradient_metrics(samples: Sequence[TrainSample], term: Term, result: StepResult,
                            kl: LossKL | None = None) -> Metrics:
    """Return the metrics of an optimizer step (`result`) whose policy loss was `term` on `samples`: loss, grad_norm
    (of the step's first optimizer; 0 when nothing was trained), skipped_nonfinite, trained_samples; kl with a KL
    term; each other term's loss by its name; is_weight_mean and is_weight_max when the samples carry importance
    weights."""
    metrics = Metrics()
    metrics.add("loss", result.losses[term.name])
    norm = result.grad_norms[0] if result.grad_norms and not result.skipped else None
    metrics.add("grad_norm", norm if norm is not None else 0.0)
    metrics.add("skipped_nonfinite", float(result.skipped), STEPS)
    metrics.add("trained_samples", sum(len(batch) for batch in term.batches), SUM)
    if kl is not None and kl.coef > 0:   # only as a term of this loss (the reward form reports the sampled KL)
        metrics.add("kl", result.metrics.get("kl", 0.0))
    weights = [s.importance_weights for s in samples if s.importance_weights is not None]
    tokens = torch.cat(weights) if weights else torch.empty(0)
    if tokens.numel():
        metrics.add("is_weight_mean", tokens.mean().item())
        metrics.add("is_weight_max", tokens.max().item(), MAX)
    for name, value in result.losses.items():
        if name != term.name:
            metrics.add(name, value)
    return metrics


def _token_weights(batch: Sequence[TrainSample], like: torch.Tensor) -> torch.Tensor:
    """Return the batch's importance weights laid out as `like` ([batch, tokens]): row i holds sample i's weights
    (ones without them), zero past its completion (where `like`, the log-probs, is zero too)."""
    weights = torch.zeros_like(like)
    for row, s in enumerate(batch):
        n = len(s.completion_ids)
        weights[row, :n] = 1.0 if s.importance_weights is None else s.importance_weights.to(like)
    return weights
