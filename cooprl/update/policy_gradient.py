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
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from cooprl.metrics import MAX, MIN, STEPS, SUM, Metrics
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


@torch.no_grad()
def sampling_logprobs(model: Any, samples: Sequence[TrainSample], pad_id: int) -> list[torch.Tensor]:
    """Return each sample's completion log-probs under `model` as it is now (the sampling policy of a rollout several
    passes train on), 1-D float32 on the CPU, scored in eval mode as at sampling time."""
    def score(batch: list[TrainSample]) -> list[torch.Tensor]:
        logps, _ = completion_logprobs(model, [s.prompt_ids for s in batch], [s.completion_ids for s in batch], pad_id)
        return [row[:len(s.completion_ids)].float().cpu() for row, s in zip(logps, batch)]

    return scored_in_eval(model, samples, None, score)


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
class PolicyObjective:
    """How a policy-gradient step weighs its tokens (TRL's names): `loss_type` (losses.LOSS_TYPES), `clipped` (a pass of
    several over one rollout: the PPO ratio against each sample's `sampling_logps`, clipped to [1 - epsilon,
    1 + epsilon_high]), `mask_truncated` (truncated completions left out of the loss). The default is the plain
    policy gradient, each sequence's token sum averaged over the step's samples."""

    loss_type: str = "sequence_sum"
    clipped: bool = False
    epsilon: float = 0.2
    epsilon_high: float = 0.2
    max_new_tokens: int = 1       # dr_grpo's constant
    mask_truncated: bool = False

    @property
    def plain(self) -> bool:
        """Whether this is the plain policy gradient (the library's loss before these options)."""
        return self.loss_type == "sequence_sum" and not self.clipped and not self.mask_truncated

    def weight(self, samples: Sequence[TrainSample]) -> float:
        """Return the engine's `weight` of a step on `samples`: its samples, or its loss's tokens for dapo."""
        if self.loss_type != "dapo":
            return float(len(samples))
        return float(sum(len(s.completion_ids) for s in samples if not self.masks(s)))

    def masks(self, sample: TrainSample) -> bool:
        """Return whether `sample` is left out of the loss (a truncated completion under mask_truncated)."""
        return self.mask_truncated and sample.truncated


@dataclass
class PolicyTerm(Term):
    """A policy loss Term and what its passes saw of the PPO ratio (clipped objectives): tokens, clipped tokens, the
    ratio's sum and extremes."""

    stats: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class LossKL:
    """The reference-KL term of a policy loss (`reference_kl_form: loss`): coef x the k3 KL to `reference`."""

    reference: Any
    coef: float


def policy_gradient_term(model: Any, samples: Sequence[TrainSample], pad_id: int, *, batch_size: int | None = None,
                         kl: LossKL | None = None, objective: PolicyObjective = PolicyObjective()) -> PolicyTerm:
    """Return the policy loss of `samples` as a Term of the update engine (`weight`: `objective.weight(samples)`):
    by default a sample's loss is -sum_t w_t log pi(token_t) x its advantage, w_t its `importance_weights` (1 without
    them); `objective` may clip a PPO ratio and aggregate tokens otherwise. Plus `kl`'s coef x its k3 KL to the
    reference (metric `kl`). Forward batches of at most `batch_size` samples (None: all), siblings together; samples
    whose gradient is zero are not run without a KL term (a zero advantage, a masked truncation)."""
    kl_on = kl is not None and kl.coef > 0
    active = [s for s in samples if (s.advantage != 0.0 and not objective.masks(s)) or kl_on]
    total = len(samples)
    weighted = any(s.importance_weights is not None for s in samples)
    padding, stats = [_padding_sample(pad_id)], {}

    def loss(batch: list[TrainSample], denominator: float) -> tuple[torch.Tensor, dict[str, float]]:
        prompts = [s.prompt_ids for s in batch]
        completions = [s.completion_ids for s in batch]
        token_logps, mask = completion_logprobs(model, prompts, completions, pad_id)
        adv = torch.tensor([s.advantage for s in batch], dtype=token_logps.dtype, device=token_logps.device)
        token_weights = _token_weights(batch, token_logps) if weighted else None
        if objective.plain:
            value = losses.policy_gradient_loss(token_logps, adv, token_weights) / max(denominator, 1)
        else:
            recorded = stats if batch is not padding else {}
            value = _objective_loss(recorded, token_logps, mask, batch, adv, token_weights, objective) / max(
                denominator, 1)
        if not kl_on:
            return value, {}
        sequence_kl = k3_kl(token_logps, mask, kl.reference, prompts, completions, pad_id)
        return value + kl.coef * sequence_kl.sum() / max(denominator, 1), {"kl": sequence_kl.sum().item() / total}

    batches = sibling_batches(active, batch_size or max(len(active), 1))
    return PolicyTerm(batches, loss, padding=padding, stats=stats)


def _objective_loss(stats: dict[str, float], token_logps: torch.Tensor, mask: torch.Tensor,
                    batch: Sequence[TrainSample], adv: torch.Tensor, token_weights: torch.Tensor | None,
                    objective: PolicyObjective) -> torch.Tensor:
    """Return the batch's summed loss under `objective` (see PolicyObjective); record its ratios in `stats`."""
    keep = torch.tensor([0.0 if objective.masks(s) else 1.0 for s in batch], dtype=token_logps.dtype,
                        device=token_logps.device)
    live = mask.to(token_logps.dtype) * keep[:, None]
    if objective.clipped:
        old = _sampling_logps(batch, token_logps)
        token_losses, ratio = losses.clipped_token_losses(token_logps, old, adv, objective.epsilon,
                                                          objective.epsilon_high)
        _record_ratios(stats, ratio.detach(), live.bool(), adv, objective)
    else:
        token_losses = -token_logps * adv[:, None]
    if token_weights is not None:
        token_losses = token_losses * token_weights
    return losses.aggregate_token_losses(token_losses * live, live, objective.loss_type, objective.max_new_tokens)


def _sampling_logps(batch: Sequence[TrainSample], like: torch.Tensor) -> torch.Tensor:
    """Return the batch's sampling-policy log-probs laid out as `like` (a sample without them: the current ones,
    detached: ratio 1)."""
    old = like.detach().clone()
    for row, s in enumerate(batch):
        if s.sampling_logps is not None:
            old[row, :len(s.completion_ids)] = s.sampling_logps.to(like)
    return old


def _record_ratios(stats: dict[str, float], ratio: torch.Tensor, live: torch.Tensor, adv: torch.Tensor,
                   objective: PolicyObjective) -> None:
    """Add a batch's live tokens to `stats`: count, clipped count (where the clip binds: TRL's clip ratio), ratio sum,
    min and max."""
    values = ratio[live]
    if not values.numel():
        return
    signs = adv[:, None].expand_as(ratio)[live]
    clipped = ((values < 1 - objective.epsilon) & (signs < 0)) | ((values > 1 + objective.epsilon_high) & (signs > 0))
    stats["tokens"] = stats.get("tokens", 0.0) + values.numel()
    stats["clipped"] = stats.get("clipped", 0.0) + clipped.sum().item()
    stats["ratio_sum"] = stats.get("ratio_sum", 0.0) + values.sum().item()
    stats["ratio_min"] = min(stats.get("ratio_min", float("inf")), values.min().item())
    stats["ratio_max"] = max(stats.get("ratio_max", float("-inf")), values.max().item())


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
    stats = term.stats if isinstance(term, PolicyTerm) else {}
    if stats.get("tokens"):
        metrics.add("clip_fraction", stats["clipped"] / stats["tokens"])
        metrics.add("ratio_mean", stats["ratio_sum"] / stats["tokens"])
        metrics.add("ratio_min", stats["ratio_min"], MIN)
        metrics.add("ratio_max", stats["ratio_max"], MAX)
    return metrics


def _token_weights(batch: Sequence[TrainSample], like: torch.Tensor) -> torch.Tensor:
    """Return the batch's importance weights laid out as `like` ([batch, tokens]): row i holds sample i's weights
    (ones without them), zero past its completion (where `like`, the log-probs, is zero too)."""
    weights = torch.zeros_like(like)
    for row, s in enumerate(batch):
        n = len(s.completion_ids)
        weights[row, :n] = 1.0 if s.importance_weights is None else s.importance_weights.to(like)
    return weights
