"""Sharded data-parallel training (`parallel_training: fsdp`): ddp's processes, item sharding and outputs, with each
agent's parameters, gradients and optimizer states cut into one shard per process (torch FSDP2 `fully_shard`, the
ZeRO-3 layout), so a process holds 1/W of an agent at rest and during its update.

Why the update needs care, and what this module does about it. Every forward of a sharded model gathers each block's
parameters from all processes, and every backward scatters the gradients back: both are collectives, so every
process must run the same number of forwards and backwards in the same order. Ours do not on their own: sampling
stops when a process's own samples end, and the update's forward batches follow a process's own samples (grouped by
prompt; none when all its advantages are zero). So:
- sampling, and every forward without gradient (the reward-form KL, importance weights), runs inside
  `full_weights`, entered by every process together around a whole phase (a training step's rollout, a preference
  collection, an evaluation): each block is gathered once, kept whole while the process samples as long as it
  needs, and cut back to its shard afterwards (TRL and verl gather the same way before generating). Sampling a
  sharded model outside it raises (`check_gathered`) instead of hanging;
- the update pads every process's list of forward/backward batches to the longest one with zero-weight batches
  (`pad_batches`): a zero-weight batch runs the same code on a one-token sample and adds exact zeros to the
  gradients. The gradients are summed over the processes in float32 (no division), and each process's loss is
  divided by the sample count of all processes (`global_count`), so the summed gradient is the mean over every
  sample, as ddp's (cooprl.update.engine does this for every update: policy gradient, DPO);
- checkpoints and the final models are written from whole weights gathered on rank 0 one model at a time
  (`whole_state_dicts`); each process's optimizer-state shard (`local_optimizer_state`) is its own file in the
  checkpoint, which is why a resume needs the same number of processes (as under ddp).

One process (no launcher) trains unsharded, as under ddp.
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Any, Iterator, Sequence, TypeVar

import torch

from cooprl.parallel import distributed

T = TypeVar("T")

# The sharded models inside `full_weights` now. This module's own record, not an attribute planted on the model: a
# weak set, so a model dropped while gathered is not kept alive by it.
_GATHERED: "weakref.WeakSet[torch.nn.Module]" = weakref.WeakSet()


def shard_model(model: torch.nn.Module) -> torch.nn.Module:
    """Shard `model` over the processes in place and return it: each transformer block (the classes the model names
    in `_no_split_modules`, as accelerate's FSDP policy does) is one unit gathered on its own, the rest (embeddings,
    final norm, LM head) the root unit. Gradients are summed over the processes in float32, not averaged (see the
    module docstring)."""
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
    # gradients are summed in float32 whatever the weights' dtype: bf16 sums over many processes lose bits
    precision = MixedPrecisionPolicy(reduce_dtype=torch.float32)
    block_names = set(_no_split_modules(model))
    for module in model.modules():
        if type(module).__name__ in block_names:
            fully_shard(module, mp_policy=precision)
    fully_shard(model, mp_policy=precision)
    for unit in model.modules():
        if isinstance(unit, FSDPModule):
            unit.set_gradient_divide_factor(1.0)
            unit.set_force_sum_reduction_for_comms(True)   # a plain sum (gloo has no pre-multiplied sum)
    return model


def _no_split_modules(model: torch.nn.Module) -> list[str]:
    """Return the block class names a transformers model (or the model a peft model wraps) declares."""
    for module in model.modules():
        names = getattr(module, "_no_split_modules", None)
        if names:
            return list(names)
    return []


def is_sharded(model: Any) -> bool:
    """Return whether `model` is sharded by `shard_model` (an FSDP2 module)."""
    from torch.distributed.fsdp import FSDPModule
    return isinstance(model, FSDPModule)


def _units(model: Any) -> list[Any]:
    from torch.distributed.fsdp import FSDPModule
    return [unit for unit in model.modules() if isinstance(unit, FSDPModule)]


@contextlib.contextmanager
def full_weights(*models: Any) -> Iterator[None]:
    """Within this context each sharded model of `models` holds its whole parameters (gathered once, kept across
    forwards), so this process may run any number of forwards without the other processes; afterwards each is cut
    back to its shard. Every process must enter it together, once per phase (a training step's rollout, an
    evaluation): sampling calls differ in number between processes (early termination, uneven evaluation batches).
    Nested entries and unsharded models change nothing. Not for backward passes: their gradients would not be
    scattered."""
    entered = [model for model in models if is_sharded(model) and not is_gathered(model)]
    for model in entered:
        for unit in _units(model):
            unit.unshard()
            unit.set_reshard_after_forward(False)
        _GATHERED.add(model)
    try:
        yield
    finally:
        for model in entered:
            for unit in _units(model):
                unit.reshard()
                unit.set_reshard_after_forward(True)
            _GATHERED.discard(model)


def is_gathered(model: Any) -> bool:
    """Return whether a sharded `model` holds its whole parameters now (inside `full_weights`)."""
    return model in _GATHERED


def check_gathered(model: Any, what: str) -> None:
    """RuntimeError when `model` is sharded but not gathered: `what` (sampling, scoring without gradient) runs a
    number of forwards of its own, which in the shards' lock-step would hang every process."""
    if is_sharded(model) and not is_gathered(model):
        raise RuntimeError(f"{what} of a sharded model must run inside cooprl.parallel.fsdp.full_weights (entered by "
                           f"every "
                           "process together)")


def global_count(count: float) -> float:
    """Return the sum of every process's `count` (this process's when not distributed)."""
    if distributed.current().world_size == 1:
        return count
    total = torch.tensor([float(count)], dtype=torch.float64, device=distributed.collective_device())
    torch.distributed.all_reduce(total)
    return total.item()


def pad_batches(batches: Sequence[T], padding: T) -> tuple[list[T], int]:
    """Return (`batches` followed by as many `padding` batches as make every process's list as long as the longest,
    how many real batches come first)."""
    longest = torch.tensor([len(batches)], dtype=torch.int64, device=distributed.collective_device())
    if distributed.current().world_size > 1:
        torch.distributed.all_reduce(longest, op=torch.distributed.ReduceOp.MAX)
    return list(batches) + [padding] * (int(longest.item()) - len(batches)), len(batches)


def full_state_dict(model: Any) -> dict[str, torch.Tensor]:
    """Return `model`'s whole state dict in CPU memory on rank 0 (empty on the other ranks); every process must call
    it together."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def whole_state_dicts(models: Sequence[Any]) -> Iterator[dict[str, torch.Tensor] | None]:
    """Yield, model by model, the whole state dict of each sharded model of `models` on rank 0 (see
    `full_state_dict`), or None for a model that is not sharded (it saves itself). Each is gathered when asked for,
    so a writer that saves one before asking for the next holds one model's weights at a time; every process must
    run it through together (the other ranks: `list(...)`)."""
    for model in models:
        yield full_state_dict(model) if is_sharded(model) else None


def load_full_state_dict(model: Any, state: dict[str, torch.Tensor]) -> tuple[list[str], list[str]]:
    """Load a whole (unsharded) state dict into the sharded `model`, each process keeping its shard of every tensor;
    return (the model's keys `state` lacks, the keys of `state` the model lacks). Every process passes the same
    `state`, together."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
    result = set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True, strict=False))
    return list(result.missing_keys), list(result.unexpected_keys)


def local_optimizer_state(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Return `optimizer.state_dict()` with every sharded tensor replaced by this process's shard in CPU memory (a
    plain tensor: a GPU shard is copied, so a checkpoint takes no device memory; a CPU shard is the live tensor,
    written before the next step changes it)."""
    from torch.distributed.tensor import DTensor
    state = optimizer.state_dict()   # (its per-parameter dicts are the optimizer's own: copied, not changed)
    state["state"] = {index: {key: value.to_local().cpu() if isinstance(value, DTensor) else value
                              for key, value in slots.items()}
                      for index, slots in state["state"].items()}
    return state


def load_local_optimizer_state(optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Load what `local_optimizer_state` returned into `optimizer` (of the same sharded parameters, as many
    processes): each shard becomes a sharded tensor again, laid out as its parameter."""
    from torch.distributed.tensor import DTensor
    params = [p for group in optimizer.param_groups for p in group["params"]]
    for index, slots in state["state"].items():
        param = params[int(index)]
        if not isinstance(param, DTensor):
            continue
        for key, value in slots.items():
            if isinstance(value, torch.Tensor) and value.shape == param.to_local().shape and value.dim() > 0:
                slots[key] = DTensor.from_local(value.to(param.to_local().device), param.device_mesh,
                                                param.placements, shape=param.shape, stride=param.stride())
    optimizer.load_state_dict(state)
