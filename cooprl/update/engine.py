"""The update engine: every optimizer step of the library (policy gradient, DPO, critics, reward model) is taken by
`optimizer_step`, which owns the mechanics that do not depend on the loss.

An update hands it its forward batches and a loss function per batch (`Term`): `loss(batch, denominator)` returns
the batch's samples' summed loss divided by `denominator`, and metrics to add up. The engine then:
- runs the micro-batch loop, with the one `backward()` of the library (gradients accumulate over the batches);
- under sharded data parallelism (cooprl.parallel.fsdp, `Sync.SHARDED`) pads every process's list of passes to the
  longest with zero-weight passes of a term's `padding` batch (every forward and backward of a sharded model is a
  collective), and hands the loss the sample count of every process as `denominator`, since the sharded backward sums
  the gradients;
  otherwise `denominator` is this process's own count (`weight`);
- takes no step with nothing to train in one process (norms None); in a data-parallel step a process with nothing
  joins with weight 0 (sharded: padding passes), so a trainer never branches on the parallel state;
- stops at a non-finite loss: the step is skipped, on every process alike (the ones of a sharded model run their
  remaining passes with zero loss first);
- clips and steps each optimizer once (`guarded_step`): under replicated data parallelism (`Sync.REPLICATED`) the
  processes' gradients are first replaced by their mean weighted by each one's `weight`, and a step any process
  skips is skipped by all.

Why a loss takes the denominator instead of returning a sum: the division happens where it always did, on the
batch's loss, so a process's gradient is bit for bit the one of a single process's update on the same samples.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from cooprl.parallel import distributed, fsdp
from cooprl.parallel.context import SINGLE, Parallel, Sync

log = logging.getLogger(__name__)

# (batch, denominator) -> (the batch's summed loss / denominator, metrics to add up over this step's real batches)
LossFn = Callable[[Any, float], "tuple[torch.Tensor, dict[str, float]]"]


@dataclass
class Term:
    """One loss of an optimizer step: its forward batches, the function that scores one, the name of its value."""

    batches: Sequence[Any]
    loss: LossFn
    name: str = "loss"
    padding: Any = None   # the batch its loss scores in a sharded step's zero-weight passes (None: it has none)


@dataclass
class StepResult:
    """What one optimizer step did: each term's loss on this process's batches (NaN when skipped for a non-finite
    loss), the loss functions' metrics added up over the real batches, each optimizer's gradient norm (None: no step
    was taken, for a non-finite value or with nothing to train in one process), and whether a non-finite value skipped
    the step."""

    losses: dict[str, float]
    metrics: dict[str, float] = field(default_factory=dict)
    grad_norms: list[float | None] = field(default_factory=list)
    skipped: bool = False


def optimizer_step(optimizers: Sequence[torch.optim.Optimizer], terms: Sequence[Term], models: Sequence[Any] = (), *,
                   weight: float, max_grad_norm: float | None, parallel: Parallel = SINGLE) -> StepResult:
    """Take one optimizer step of every optimizer on the summed loss of `terms`; return its StepResult.

    `models` (what the optimizers train) are put in training mode; how their gradients meet the other processes'
    follows from them and `parallel` (`Parallel.sync_of`). `weight`: this process's sample count (or summed sample
    weights), the denominator of its mean loss and its share of the processes' averaged gradient. A sharded step's
    zero-weight passes run the first term's `padding` batch with its loss. With no batch in one process no step is
    taken (norms None)."""
    sync = parallel.sync_of(models[0]) if models else Sync.NONE
    for model in models:
        model.train()
    for optimizer in optimizers:
        optimizer.zero_grad(set_to_none=True)
    passes = [(term, batch) for term in terms for batch in term.batches]
    losses = {term.name: 0.0 for term in terms}
    result = StepResult(losses)
    if not passes and sync is Sync.NONE:
        result.grad_norms = [None] * len(optimizers)
        return result
    real, denominator = len(passes), weight
    if sync is Sync.SHARDED:
        padded = next((term for term in terms if term.padding is not None), None)
        if padded is None:
            raise ValueError("a sharded step needs a term with a padding batch (its processes run as many passes)")
        passes, real = fsdp.pad_batches(passes, (padded, padded.padding))
        denominator = fsdp.global_count(weight)
    nonfinite = False
    for index, (term, batch) in enumerate(passes):
        loss, metrics = term.loss(batch, denominator)
        if index < real:
            for key, value in metrics.items():
                result.metrics[key] = result.metrics.get(key, 0.0) + value
        if index >= real or nonfinite:
            loss = loss * 0.0   # a padding pass (or the rest of a skipped sharded step): same collectives, no gradient
        elif not torch.isfinite(loss):
            log.warning("non-finite loss (%s): this update is skipped", loss.item())
            nonfinite = True
            if sync is not Sync.SHARDED:   # nothing else to run: the other processes only need to skip too
                break
            loss = loss * 0.0   # the sharded passes go on (every process runs them all); the step is skipped
        else:   # reported as this process's mean, as without sharding
            losses[term.name] += loss.item() * denominator / weight if sync is Sync.SHARDED else loss.item()
        loss.backward()
    if nonfinite:
        result.losses = {name: float("nan") for name in losses}
        result.skipped = True
        if sync is Sync.NONE:
            for optimizer in optimizers:
                optimizer.zero_grad(set_to_none=True)
            result.grad_norms = [None] * len(optimizers)
            return result
    result.grad_norms = [guarded_step(optimizer, max_grad_norm, weight=weight, skip=nonfinite, sync=sync)
                         for optimizer in optimizers]
    result.skipped = result.skipped or any(norm is None for norm in result.grad_norms)
    return result


def guarded_step(optimizer: torch.optim.Optimizer, max_grad_norm: float | None, *, weight: float = 1.0,
                 skip: bool = False, sync: Sync = Sync.NONE) -> float | None:
    """Clip the gradients of `optimizer`'s parameters to `max_grad_norm` (None or 0: no clipping, the norm is still
    measured), step when that norm is finite, and clear the gradients; return the norm, or None when the step was
    skipped because the gradients are not finite (a NaN or inf would otherwise reach the weights) or `skip` was asked.

    Under data parallelism (`sync` not NONE) every process calls it once per optimizer step, together: replicated,
    the processes' gradients are first replaced by their mean weighted by each one's `weight`; sharded, they arrive
    summed already and the processes only agree. A step any process asks to `skip` is skipped by all, and when no
    process has a gradient no step is taken (norm 0.0), as a single process with nothing to train takes none."""
    if sync is not Sync.NONE and distributed.current().world_size > 1:
        every = [p for group in optimizer.param_groups for p in group["params"] if p.requires_grad]
        if sync is Sync.SHARDED:
            _, outcome = distributed.agree_to_step(every, weight, skip)
        else:
            outcome = distributed.average_gradients(every, weight, skip)
        if outcome == "empty":
            optimizer.zero_grad(set_to_none=True)
            return 0.0
        skip = outcome == "skip"
    if skip:
        optimizer.zero_grad(set_to_none=True)
        return None
    params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
    # the norm in float32 whatever the gradients' dtype (torch's clip_grad_norm_ gives a bf16 number for bf16 ones)
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad, dtype=torch.float32)
                                                 for p in params])) if params else torch.tensor(0.0)
    torch.nn.utils.clip_grads_with_norm_(params, max_grad_norm if max_grad_norm else math.inf, norm)
    if hasattr(norm, "full_tensor"):   # sharded gradients: the norm over every process's shard
        norm = norm.full_tensor()
    finite = bool(torch.isfinite(norm))
    if finite:
        optimizer.step()
    else:
        log.warning("non-finite gradient norm: this optimizer step is skipped")
    optimizer.zero_grad(set_to_none=True)
    return norm.item() if finite else None


def shared_policy_step(optimizer: torch.optim.Optimizer, model: Any, terms: Sequence[tuple[Term, float]], *,
                       max_grad_norm: float | None) -> list[StepResult]:
    """Take one optimizer step of a shared policy (agent_model.shared_policy: one model and optimizer play every
    agent) on each agent's `(term, weight)`; return each term's StepResult (its loss and metrics, the step's norm).

    Each term's loss is divided by its own `weight`, as that agent's own step would divide it: the step's gradient is
    the sum of the agents' own steps' gradients, so every role counts as much as in a team of separate models, a role
    with fewer samples in this step (a dropped tied group) as much as the others. Clipping applies to that sum."""
    def own(loss: LossFn, weight: float, tag: str) -> LossFn:
        def scored(batch: Any, _denominator: float) -> tuple[torch.Tensor, dict[str, float]]:
            value, metrics = loss(batch, weight)
            return value, {f"{tag}/{key}": v for key, v in metrics.items()}
        return scored

    tagged = [Term(term.batches, own(term.loss, weight, str(i)), str(i), term.padding)
              for i, (term, weight) in enumerate(terms)]
    result = optimizer_step([optimizer], tagged, [model], weight=sum(weight for _, weight in terms),
                            max_grad_norm=max_grad_norm)
    return [StepResult({term.name: result.losses[str(i)]},
                       {key.split("/", 1)[1]: v for key, v in result.metrics.items() if key.split("/", 1)[0] == str(i)},
                       result.grad_norms, result.skipped)
            for i, (term, _) in enumerate(terms)]
