"""Data-parallel training (`parallel_training: ddp`) on torch.distributed, launched by torchrun or accelerate.

The launcher starts one process per device and sets torch.distributed's environment (RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR, MASTER_PORT); `setup` joins the process group (nccl on CUDA, gloo on CPU). Then:
- items: a training step takes `world_size` items of the shared data order, rank r the r-th (`shard_order`); an
  epoch's items that do not fill a last step are left out of that epoch, as DistributedSampler's drop_last;
- random numbers: under ddp each item's rollout draws from torch's generator seeded by (seed, the item's position in
  the data order) (`item_seed`), so which process rolls an item out changes nothing: 2 processes x 1 item per step
  equal 1 process x 2 items per step;
- gradients: the update engine's guarded step (cooprl.update.engine), told by the trainer's parallel context
  (cooprl.parallel.context) that a model is replicated over the processes, sums the ranks' gradients weighted by their
  sample counts before clipping (`average_gradients`).
  We do not wrap the models in DistributedDataParallel: its all-reduce runs inside `backward`, so every rank would
  have to call backward the same number of times, yet an update's forward batches follow each rank's own samples
  (the token trie groups them by shared prompt; a rank whose advantages are all zero runs none). One all-reduce of
  the trainable gradients (LoRA's adapters only) right before the step works whatever ran before it: trie or padded
  log-probs, gradient checkpointing, a value loss as a second term of the step;
- outputs: rank 0 alone writes the run folder (config, metrics.jsonl, W&B, checkpoints, summary, plot); every rank
  resumes from the same checkpoint, which holds each rank's own buffers (sent to rank 0 one rank at a time:
  `send_to_main`, `receive_in_rank_order`).
"""

from __future__ import annotations

import datetime
import logging
import os
import random
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Sequence, TypeVar

import torch

from cooprl.errors import UserError
from cooprl.parallel.order import Ranks, item_seed

log = logging.getLogger(__name__)
T, R = TypeVar("T"), TypeVar("R")

class DistributedError(UserError, RuntimeError):
    """Models placed where data-parallel processes cannot train them; the message names the fix."""


# how long a rank waits at a collective for the others: rank 0 evaluates and saves alone while the rest wait
COLLECTIVE_TIMEOUT = datetime.timedelta(hours=3)
BUCKET_ELEMENTS = 1 << 24           # gradients are all-reduced in flat buckets of this many elements


def launched_world_size() -> int:
    """Return the number of processes the launcher started (WORLD_SIZE; 1 without a launcher)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def current() -> Ranks:
    """Return this process's Ranks: from the process group when one is running, else a single process."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return Ranks(torch.distributed.get_rank(), torch.distributed.get_world_size(),
                     int(os.environ.get("LOCAL_RANK", "0")))
    return Ranks()


def setup(device: str) -> Ranks:
    """Join the process group of a launcher's processes (nccl when the models go to CUDA, else gloo); return this
    process's Ranks. A single process (no launcher, or one process) joins nothing."""
    if launched_world_size() == 1 or torch.distributed.is_initialized():
        return current()
    cuda = device != "cpu" and torch.cuda.is_available()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if cuda:
        torch.cuda.set_device(local_rank)
    # device_id binds this process's GPU to the group (nccl's barrier and communicators use it, not a guess)
    torch.distributed.init_process_group("nccl" if cuda else "gloo", timeout=COLLECTIVE_TIMEOUT,
                                         device_id=torch.device("cuda", local_rank) if cuda else None)
    global _HOST_GROUP
    # checkpoint transfers go through host memory: under nccl they would be staged on the GPU
    _HOST_GROUP = torch.distributed.new_group(backend="gloo", timeout=COLLECTIVE_TIMEOUT) if cuda else None
    ranks = current()
    log.info("data-parallel rank %d of %d (%s)", ranks.rank, ranks.world_size, "nccl" if cuda else "gloo")
    return ranks


def collective_device() -> torch.device:
    """Return where a small tensor for a collective must live: this process's GPU under nccl (which takes CUDA
    tensors only), else the CPU."""
    if torch.distributed.is_initialized() and torch.distributed.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def rank_device(device: str, ranks: Ranks) -> str:
    """Return the device of this rank's models: its local GPU (cuda:LOCAL_RANK) when `device` is CUDA or auto with
    CUDA present, else `device`. DistributedError for a CPU model in processes joined over nccl, which takes CUDA
    tensors only (its gradients could not be averaged)."""
    if ranks.world_size > 1 and (device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())):
        return f"cuda:{ranks.local_rank}"
    if ranks.world_size > 1 and device == "cpu" and _backend() == "nccl":
        raise DistributedError("a model on cpu under data-parallel training on GPUs: the processes' collectives run "
                               "over nccl, which takes CUDA tensors only; leave its device key null or give cuda")
    return device


def process_devices(devices: Iterable[str]) -> list[str]:
    """Return where this process puts the models configured for `devices` (critics, comparators, the reward model):
    under data-parallel training with several processes, a CUDA device (cuda, cuda:N, auto with CUDA) is this
    process's own GPU, so no two ranks share one (see rank_device)."""
    ranks = current()
    return [rank_device(device, ranks) for device in devices]


def _backend() -> str | None:
    return torch.distributed.get_backend() if torch.distributed.is_initialized() else None


def agree_to_step(params: Iterable[torch.Tensor], weight: float = 1.0, skip: bool = False) -> tuple[float, str]:
    """Return (the ranks' summed `weight`, "skip" when any rank asked to `skip`, "empty" when no rank has a gradient,
    else "step"): what every rank must decide alike before an optimizer step. Every rank must call it together."""
    params = list(params)
    device = params[0].device if params else collective_device()
    has_gradient = any(p.grad is not None for p in params)
    control = torch.tensor([float(weight), float(skip), float(has_gradient)], dtype=torch.float64, device=device)
    torch.distributed.all_reduce(control)
    total, skipped, with_gradient = control.tolist()
    if skipped:
        return total, "skip"
    return total, "empty" if not with_gradient or total <= 0 else "step"


def average_gradients(params: Iterable[torch.Tensor], weight: float = 1.0, skip: bool = False) -> str:
    """Set every parameter's gradient to the ranks' weighted mean, sum_r weight_r * grad_r / sum_r weight_r (a missing
    gradient counts as zeros); return "skip" when any rank asked to `skip` this step, "empty" when no rank has a
    gradient (nothing to train: no step, as a single process takes none), else "step". Every rank must call it for
    the same optimizer step, with the same parameters in the same order."""
    params = list(params)
    total, outcome = agree_to_step(params, weight, skip)
    if outcome != "step":
        for p in params:
            p.grad = None
        return outcome
    scale = weight / total
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        elif not p.grad.is_contiguous():
            p.grad = p.grad.contiguous()
    # summed in float32 in one buffer of at most BUCKET_ELEMENTS, each gradient written back in place: no float32
    # copy of a whole tensor (an embedding's would be GiBs on a GPU that is full at the update)
    for bucket in _buckets([p.grad.view(-1) for p in params]):
        if len(bucket) == 1 and bucket[0].dtype == torch.float32:
            torch.distributed.all_reduce(bucket[0].mul_(scale))
            continue
        flat = torch.empty(sum(piece.numel() for piece in bucket), dtype=torch.float32, device=bucket[0].device)
        parts = flat.split([piece.numel() for piece in bucket])
        for piece, part in zip(bucket, parts, strict=True):
            part.copy_(piece)
        torch.distributed.all_reduce(flat.mul_(scale))
        for piece, part in zip(bucket, parts, strict=True):
            piece.copy_(part)
    return "step"


def _buckets(views: list[torch.Tensor]) -> list[list[torch.Tensor]]:
    """Return the 1-D `views` cut into consecutive groups of BUCKET_ELEMENTS elements (the last one fewer), a view
    longer than the room left in a group split across groups (its pieces are views of it)."""
    buckets, current_bucket, size = [], [], 0
    for view in views:
        start = 0
        while start < view.numel():
            piece = view[start:start + BUCKET_ELEMENTS - size]
            current_bucket.append(piece)
            size, start = size + piece.numel(), start + piece.numel()
            if size == BUCKET_ELEMENTS:
                buckets.append(current_bucket)
                current_bucket, size = [], 0
    if current_bucket:
        buckets.append(current_bucket)
    return buckets


def gather(value: Any) -> list[Any]:
    """Return every rank's `value` (picklable), in rank order; [value] in a single process."""
    ranks = current()
    if ranks.world_size == 1:
        return [value]
    values: list[Any] = [None] * ranks.world_size
    torch.distributed.all_gather_object(values, value)
    return values


_HOST_GROUP = None   # a gloo group beside an nccl one (`setup`); None: the default group is gloo already


@dataclass(frozen=True)
class _TensorSlot:
    """Where `send_to_main` took a tensor out of a value (the tensors follow in the order of their slots)."""

    shape: tuple[int, ...]
    dtype: torch.dtype


def send_to_main(value: Any) -> None:
    """Send `value` (picklable) to rank 0, which takes it in `receive_in_rank_order`; waits until it is received.
    The tensors of its dicts, lists and tuples travel as tensors after the rest (pickled), through host memory, so
    neither side holds a pickled copy of them (a checkpoint's optimizer shards)."""
    tensors: list[torch.Tensor] = []
    skeleton = _take_tensors(value, tensors)
    torch.distributed.send_object_list([skeleton], dst=0, group=_HOST_GROUP)
    for tensor in tensors:
        torch.distributed.send(tensor.detach().cpu().contiguous(), dst=0, group=_HOST_GROUP)


def receive_in_rank_order(own: Any) -> Iterator[Any]:
    """On rank 0: yield `own`, then every other rank's value sent by `send_to_main`, one at a time in rank order, so
    rank 0 holds at most one other rank's value at once (a checkpoint's optimizer shards, written as they come)."""
    yield own
    for rank in range(1, current().world_size):
        box: list[Any] = [None]
        torch.distributed.recv_object_list(box, src=rank, group=_HOST_GROUP)
        yield _put_tensors(box[0], rank)


def _take_tensors(value: Any, tensors: list[torch.Tensor]) -> Any:
    """Return `value` with each tensor in its dicts, lists and tuples replaced by a _TensorSlot (appended to
    `tensors`); other objects are kept whole."""
    if isinstance(value, torch.Tensor):
        tensors.append(value)
        return _TensorSlot(tuple(value.shape), value.dtype)
    if isinstance(value, dict):
        return {k: _take_tensors(v, tensors) for k, v in value.items()}
    if isinstance(value, (list, tuple)) and type(value) in (list, tuple):
        return type(value)(_take_tensors(v, tensors) for v in value)
    return value


def _put_tensors(value: Any, source: int) -> Any:
    """Return `value` with each _TensorSlot replaced by the tensor received from rank `source` (in slot order)."""
    if isinstance(value, _TensorSlot):
        tensor = torch.empty(value.shape, dtype=value.dtype)
        torch.distributed.recv(tensor, src=source, group=_HOST_GROUP)
        return tensor
    if isinstance(value, dict):
        return {k: _put_tensors(v, source) for k, v in value.items()}
    if isinstance(value, (list, tuple)) and type(value) in (list, tuple):
        return type(value)(_put_tensors(v, source) for v in value)
    return value


def broadcast(value: Any) -> Any:
    """Return rank 0's `value` on every rank (picklable); `value` itself in a single process."""
    if current().world_size == 1:
        return value
    box = [value]
    torch.distributed.broadcast_object_list(box, src=0)
    return box[0]


def barrier() -> None:
    """Wait until every rank arrives here (nothing in a single process)."""
    if current().world_size > 1:
        # nccl's barrier names this process's GPU: without it torch guesses one from the current device
        torch.distributed.barrier(device_ids=[torch.cuda.current_device()] if _backend() == "nccl" else None)


def own_shares(count: int) -> range:
    """Return the indices of `count` shared tasks this process runs: task i on rank i mod world size."""
    ranks = current()
    return range(ranks.rank, count, ranks.world_size)


def fork_generators() -> Any:
    """Return a context that saves torch's generators, the CPU's and every CUDA device's, and restores them on exit:
    `torch.manual_seed` inside it reseeds every CUDA generator too, which would otherwise stay reseeded (GPU sampling
    draws from the CUDA generator)."""
    return torch.random.fork_rng(devices=range(torch.cuda.device_count()) if torch.cuda.is_available() else [])


def run_sharded(tasks: Sequence[T], seed: int, work: Callable[[T, random.Random], R]) -> list[R]:
    """Return `work(task, rng)` for every task, in order; each task runs in one process (task i on rank i mod W)
    with torch's generator and `rng` seeded by `seed` (task 0) or `item_seed(seed, i)`, and every process receives
    every result. So the results do not depend on the number of processes, and one process's task 0 draws exactly
    as an unsharded run seeded by `seed` would. torch's generators (CPU and CUDA) are restored afterwards."""
    mine: dict[int, R] = {}
    with fork_generators():
        for i in own_shares(len(tasks)):
            task_seed = seed if i == 0 else item_seed(seed, i)
            torch.manual_seed(task_seed)
            mine[i] = work(tasks[i], random.Random(task_seed))
    if current().world_size > 1:
        mine = {i: result for part in gather(mine) for i, result in part.items()}
    return [mine[i] for i in range(len(tasks))]


def broadcast_parameters(model: torch.nn.Module) -> None:
    """Overwrite `model`'s trainable parameters with rank 0's (nothing in a single process): for a model every rank
    trains alike, so that the last bits of nondeterministic kernels cannot make the ranks' copies drift apart."""
    if current().world_size == 1:
        return
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                torch.distributed.broadcast(p.data, src=0)


def shutdown() -> None:
    """Leave the process group (at the end of a data-parallel run)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
