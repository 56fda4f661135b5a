"""The algorithms' math: losses and advantages as pure functions of tensors and numbers.

Nothing here runs a model, knows about ranks or takes an optimizer step: the update engine (cooprl.update.engine)
calls a loss function built from these, and the trainers compute advantages with them. Every loss that an optimizer
step averages over samples comes as a per-sample (or per-sequence) tensor or a weighted sum, so the engine can divide
by the count of every process (cooprl.update.engine). """

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F


# ---------------------------------------------------------------------------------------------- advantages
def group_advantages(returns: Sequence[float], mode: str = "mean", normalize: bool = False,
                     eps: float = 1e-6) -> list[float]:
    """Return each sibling's advantage: its return minus a group baseline (`mean`, `max`, `rloo`: leave-one-out
    mean) or the return itself (`raw`).

    With `normalize`, the advantages are then standardized within the group: centered on their own mean and divided
    by their std (population std, at least `eps`). Centering matters for `raw` and `max`, whose advantages would
    otherwise keep one sign (all <= 0 for `max`); for `mean` and `rloo` they are centered already.
    """
    values = torch.tensor(list(returns), dtype=torch.float64)
    n = len(values)
    if mode == "mean":
        adv = values - values.mean()
    elif mode == "raw":
        adv = values.clone()
    elif mode == "max":
        adv = values - values.max()
    elif mode == "rloo":
        adv = values - (values.sum() - values) / (n - 1) if n > 1 else torch.zeros_like(values)
    else:
        raise ValueError(f"advantage_mode {mode!r}: expected mean, raw, max or rloo")
    if normalize and n > 1:
        adv = (adv - adv.mean()) / adv.std(unbiased=False).clamp(min=eps)
    return adv.tolist()


def td_target(reward: float, next_value: float | None, discount: float) -> float:
    """Return the TD target r + discount * next value, or r when there is no next turn (None)."""
    return reward if next_value is None else reward + discount * next_value


def actor_advantages(targets: Sequence[float], values: Sequence[float], critic_type: str, normalize: bool,
                     eps: float = 1e-8) -> list[float]:
    """Return a group's advantages: target - V (critic type `v`) or target - mean Q (`q`), then standardized when
    `normalize` (one sample has no spread: left as is)."""
    y = torch.tensor(list(targets), dtype=torch.float64)
    v = torch.tensor(list(values), dtype=torch.float64)
    adv = y - v if critic_type == "v" else y - v.mean()
    if normalize and len(adv) > 1:
        adv = (adv - adv.mean()) / (adv.std(unbiased=False) + eps)
    return adv.tolist()


# ---------------------------------------------------------------------------------------------- policy losses
def policy_gradient_loss(token_logps: torch.Tensor, advantages: torch.Tensor,
                         token_weights: torch.Tensor | None = None) -> torch.Tensor:
    """Return the batch's summed policy-gradient loss, -sum_i adv_i sum_t w_it log pi(token_it), a scalar:
    `token_logps` [batch, tokens] (zero past each completion), `advantages` [batch], `token_weights` [batch, tokens]
    the truncated importance weights (None: every token weighs 1)."""
    weighted = token_logps * token_weights if token_weights is not None else token_logps
    return -(weighted.sum(-1) * advantages).sum()


# how a step's token terms become its loss (`loss_type`); each value is divided by the engine's denominator: samples,
# or tokens for dapo
LOSS_TYPES = ("sequence_sum", "grpo", "dapo", "dr_grpo")


def clipped_token_losses(token_logps: torch.Tensor, sampling_logps: torch.Tensor, advantages: torch.Tensor,
                         epsilon: float, epsilon_high: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (each token's PPO loss -min(r A, clip(r, 1 - epsilon, 1 + epsilon_high) A), the ratios r), both
    [batch, tokens]: r = pi / pi_sampling per token (`sampling_logps` the sampling policy's log-probs)."""
    ratio = torch.exp(token_logps - sampling_logps.to(token_logps))
    adv = advantages[:, None]
    clipped = ratio.clamp(1 - epsilon, 1 + epsilon_high)
    return -torch.minimum(ratio * adv, clipped * adv), ratio


def aggregate_token_losses(token_losses: torch.Tensor, mask: torch.Tensor, loss_type: str,
                           max_new_tokens: int) -> torch.Tensor:
    """Return a batch's summed loss from its token losses ([batch, tokens], zero where `mask` is 0), to be divided by
    the step's sample count (tokens for `dapo`): `sequence_sum` sums each sequence's tokens; `grpo` takes each
    sequence's mean token; `dapo` sums every token (a token mean over the step); `dr_grpo` sums every token over
    `max_new_tokens` (a constant per sequence)."""
    per_sequence = token_losses.sum(-1)
    if loss_type == "grpo":
        per_sequence = per_sequence / mask.sum(-1).clamp(min=1)
    elif loss_type == "dr_grpo":
        per_sequence = per_sequence / max_new_tokens
    elif loss_type not in ("sequence_sum", "dapo"):
        raise ValueError(f"loss_type {loss_type!r}: expected one of {', '.join(LOSS_TYPES)}")
    return per_sequence.sum()


def k3_kl(token_logps: torch.Tensor, reference_logps: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Return the k3 estimate of KL(policy || reference) per sequence, shape [batch]: the sum over real tokens
    (`mask`) of exp(d) - d - 1 with d = log p_ref - log p_policy (>= 0 per token); differentiable through the
    policy's `token_logps`."""
    delta = (reference_logps.to(token_logps.device) - token_logps) * mask
    return ((torch.exp(delta) - delta - 1) * mask).sum(-1)


def kl_penalized(rewards: Sequence[float], kls: Sequence[float], coef: float) -> list[float]:
    """Return each reward (or return) minus coef x the KL of its sample: the reward form of the reference KL."""
    return [r - coef * kl for r, kl in zip(rewards, kls)]


def madpo_losses(deltas: torch.Tensor, beta: float, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Return each agent's multi-agent DPO loss, shape [agents], from the log-ratio margins `deltas` [agents, pairs].

    loss_i = weighted mean over pairs of -log σ(β (Δ_i + Σ_{k≠i} sg(Δ_k))): the pair is judged on the joint
    margin, but agent i's gradient flows only through its own Δ_i (the others' terms are detached).
    """
    total = deltas.detach().sum(0, keepdim=True)
    joint = deltas + (total - deltas.detach())          # value: joint margin; gradient: own term only
    if weights is None:
        weights = torch.ones(deltas.shape[1], dtype=deltas.dtype, device=deltas.device)
    return -(F.logsigmoid(beta * joint) * weights).sum(-1) / weights.sum()


def sft_loss(token_logps: torch.Tensor, mask: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Return the summed negative log-likelihood of supervised completions, -sum_i w_i sum_t log p(token_it) over the
    real tokens (`mask`), a scalar: divide by the number of sequences (or of tokens) for a mean."""
    nll = -(token_logps * mask).sum(-1)
    return (nll * weights).sum() if weights is not None else nll.sum()


def nll_loss(token_logps: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Return the mean negative log-likelihood per completion token: -sum(log p * mask) / sum(mask) (0 without a
    token). `token_logps` and `mask` are [batch, tokens]; prompt and padding positions have mask 0."""
    mask = mask.to(token_logps.dtype)
    return sft_loss(token_logps, mask) / mask.sum().clamp(min=1.0)


# ---------------------------------------------------------------------------------------------- critics
def value_errors(values: torch.Tensor, targets: torch.Tensor, old_values: torch.Tensor,
                 clip_range: float | None) -> torch.Tensor:
    """Return each squared TD error; with `clip_range`, the PPO-style max over the unclipped and clipped values."""
    errors = (values - targets) ** 2
    if clip_range is None:
        return errors
    clipped = old_values + (values - old_values).clamp(-clip_range, clip_range)
    return torch.maximum(errors, (clipped - targets) ** 2)


def bradley_terry_losses(chosen: torch.Tensor, rejected: torch.Tensor) -> torch.Tensor:
    """Return each pair's -log sigmoid(r_chosen - r_rejected), stable for large gaps (softplus of the gap)."""
    return F.softplus(rejected - chosen)


def bradley_terry_loss(chosen: torch.Tensor, rejected: torch.Tensor,
                       weights: torch.Tensor | None = None) -> torch.Tensor:
    """Return the mean (optionally weighted) of -log sigmoid(r_chosen - r_rejected) over the pairs."""
    losses = bradley_terry_losses(chosen, rejected)
    if weights is None:
        return losses.mean()
    return (losses * weights).sum() / weights.sum().clamp(min=1e-12)
