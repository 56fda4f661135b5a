"""The one guarded optimizer step every update in the library takes (policy gradient, DPO, critics, reward model)."""

from __future__ import annotations

import logging
import math

import torch

from cooprl import distributed

log = logging.getLogger(__name__)


def guarded_step(optimizer: torch.optim.Optimizer, max_grad_norm: float | None, *, weight: float = 1.0,
                 skip: bool = False) -> float | None:
    """Clip the gradients of `optimizer`'s parameters to `max_grad_norm` (None or 0: no clipping, the norm is still
    measured), step when that norm is finite, and clear the gradients; return the norm, or None when the step was
    skipped because the gradients are not finite (a NaN or inf would otherwise reach the weights) or `skip` was asked.

    Under data-parallel training (cooprl.distributed) the ranks' gradients are first replaced by their mean weighted
    by each rank's `weight` (its sample count: the policy gradient's loss is a mean over a rank's samples), and a
    step any rank asks to `skip` is skipped by all: every rank reaches this call once per optimizer step. When no
    rank has a gradient no step is taken (norm 0.0), as a single process with nothing to train takes none."""
    if distributed.is_data_parallel(optimizer):
        every = [p for group in optimizer.param_groups for p in group["params"] if p.requires_grad]
        if distributed.is_sharded(optimizer):   # the sharded backward summed the ranks' gradients already
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
    norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm if max_grad_norm else math.inf)
    if hasattr(norm, "full_tensor"):   # sharded gradients: the norm over every rank's shard
        norm = norm.full_tensor()
    finite = bool(torch.isfinite(norm))
    if finite:
        optimizer.step()
    else:
        log.warning("non-finite gradient norm: this optimizer step is skipped")
    optimizer.zero_grad(set_to_none=True)
    return norm.item() if finite else None
