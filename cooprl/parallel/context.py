"""The parallel context: everything a trainer asks of the other processes, through one object (TRL's `accelerator`,
verl's worker group). Trainers hold a `Parallel` and import neither cooprl.parallel.distributed nor cooprl.parallel.fsdp
(tests/project/test_layers.py); the update engine (cooprl.update.engine) is told by `sync_of` how a model's gradients
meet.

A `Parallel` is built from the trainer's section (`Parallel.of`): `parallel_training` ddp or fsdp under a launcher
with several processes; otherwise it is the single process (`SINGLE`), where every method is the plain local thing
(gather returns [value], from_main runs the function, sampling gathers nothing). Nothing is stored on torch objects:
whether an optimizer's step is a collective follows from this object and the model (`sync_of`).
"""

from __future__ import annotations

import contextlib
import enum
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence, TypeVar

import torch

from cooprl.config import DATA_PARALLEL_MODES, TrainerSection
from cooprl.parallel import distributed, fsdp
from cooprl.parallel.order import Ranks

T, R = TypeVar("T"), TypeVar("R")


class Sync(enum.Enum):
    """How an optimizer step's gradients meet the other processes' (`Parallel.sync_of` says which)."""

    NONE = "none"                # one process, or a model every process trains on the same data alike
    REPLICATED = "replicated"    # ddp: each process holds the whole model; gradients are averaged before the step
    SHARDED = "sharded"          # fsdp: the sharded backward sums the gradients; passes must match in number


@dataclass(frozen=True)
class Parallel:
    """This process's place in a data-parallel run: `mode` (none, ddp, fsdp) and its `ranks`."""

    mode: str = "none"
    ranks: Ranks = field(default_factory=Ranks)

    @classmethod
    def of(cls, section: TrainerSection) -> "Parallel":
        """Return the context of a run of trainer `section`: its parallel_training when that is ddp or fsdp and
        the launcher started several processes, else the single process."""
        ranks = distributed.current()
        mode = section.parallel_training
        if mode not in DATA_PARALLEL_MODES or ranks.world_size == 1:
            return SINGLE
        return cls(mode, ranks)

    @classmethod
    def join(cls, section: TrainerSection, device: str) -> "Parallel":
        """Return the context of a run of trainer `section`, after joining the launcher's process group when the
        section asks for data parallelism (ddp, fsdp: cooprl.parallel.distributed.setup; `device` picks nccl or
        gloo). The one context of a run: the script builds it and hands it to the trainer and the loop."""
        if section.parallel_training in DATA_PARALLEL_MODES:
            distributed.setup(device)
        return cls.of(section)

    @staticmethod
    def launched_world_size() -> int:
        """Return the number of processes the launcher (torchrun, accelerate) started: 1 without one."""
        return distributed.launched_world_size()

    def leave(self) -> None:
        """Leave the process group `join` joined (the end of a data-parallel run); nothing in a single process."""
        if self.data_parallel:
            distributed.shutdown()

    # -------------------------------------------------------------------------------------- where we stand
    @property
    def data_parallel(self) -> bool:
        """Return whether several processes train together (ddp or fsdp)."""
        return self.mode in DATA_PARALLEL_MODES and self.ranks.world_size > 1

    @property
    def sharded(self) -> bool:
        """Return whether the trained policies are sharded over the processes (fsdp)."""
        return self.mode == "fsdp" and self.data_parallel

    @property
    def is_main(self) -> bool:
        """Return whether this process writes the run's outputs (rank 0)."""
        return self.ranks.is_main

    def sync_of(self, model: Any) -> Sync:
        """Return how the gradients of `model`'s optimizer step meet the other processes': summed by its sharded
        backward, averaged before the step (a replicated model of a data-parallel run), or not at all."""
        if fsdp.is_sharded(model):
            return Sync.SHARDED
        return Sync.REPLICATED if self.data_parallel else Sync.NONE

    # -------------------------------------------------------------------------------------- models
    def prepare(self, model: torch.nn.Module) -> torch.nn.Module:
        """Return `model` sharded over the processes in place under fsdp (cooprl.parallel.fsdp.shard_model), else as
        is."""
        return fsdp.shard_model(model) if self.sharded else model

    @staticmethod
    def check_gathered(model: Any, what: str) -> None:
        """RuntimeError when `model` is sharded but not gathered (`sampling`): `what` runs a number of forwards of
        its own, which in the shards' lock-step would hang every process (cooprl.parallel.fsdp.check_gathered)."""
        fsdp.check_gathered(model, what)

    @staticmethod
    def load_whole_state_dict(model: Any, state: dict[str, torch.Tensor]) -> tuple[list[str], list[str]]:
        """Load a whole state dict into `model` (into each process's shard of it when it is sharded); return (the
        model's keys `state` lacks, the keys of `state` the model lacks). Tied weights are tied again afterwards."""
        if fsdp.is_sharded(model):   # every process passes the same state, together; sharding keeps tied weights one
            return fsdp.load_full_state_dict(model, state)
        missing, unexpected = model.load_state_dict(state, strict=False)
        if hasattr(model, "tie_weights"):
            model.tie_weights()
        return list(missing), list(unexpected)

    @contextlib.contextmanager
    def sampling(self, *models: Any) -> Iterator[None]:
        """Within this context the sharded `models` hold their whole weights, for a phase of forwards without
        gradient whose number differs between processes (a rollout, an evaluation, a collection): every process
        enters it together (cooprl.parallel.fsdp.full_weights). Nothing happens to unsharded models."""
        with fsdp.full_weights(*models):
            yield

    def whole_state_dicts(self, models: Sequence[Any]) -> Iterator[dict[str, torch.Tensor] | None]:
        """Yield each sharded model's whole state dict on rank 0 (None for an unsharded one); every process runs it
        through together (cooprl.parallel.fsdp.whole_state_dicts)."""
        return fsdp.whole_state_dicts(models)

    @staticmethod
    def devices(devices: Sequence[str]) -> list[str]:
        """Return where this process puts models configured for `devices` (critics, comparators, the reward model):
        under data-parallel training a CUDA device is this process's own GPU
        (cooprl.parallel.distributed.process_devices)."""
        return distributed.process_devices(devices)

    @staticmethod
    def forked_generators() -> contextlib.AbstractContextManager:
        """Return a context that restores torch's CPU and CUDA generators on exit (an evaluation's own seeding)."""
        return distributed.fork_generators()

    def broadcast_parameters(self, model: torch.nn.Module) -> None:
        """Overwrite `model`'s trainable parameters with rank 0's: for a model every process trains alike, so that
        the last bits of nondeterministic kernels cannot make the copies drift apart."""
        distributed.broadcast_parameters(model)

    # -------------------------------------------------------------------------------------- python objects
    def gather(self, value: Any) -> list[Any]:
        """Return every process's `value` (picklable) in rank order; [value] in a single process."""
        return distributed.gather(value)

    def broadcast(self, value: Any) -> Any:
        """Return rank 0's `value` on every process."""
        return distributed.broadcast(value)

    def from_main(self, make: Callable[[], R]) -> R:
        """Return `make()` run on rank 0 alone, on every process (a file only rank 0 reads, a folder it creates)."""
        return distributed.broadcast(make() if self.is_main else None)

    def run_seeded(self, tasks: Sequence[T], seed: int, work: Callable[[T, random.Random], R]) -> list[R]:
        """Return `work(task, rng)` for every task, each run on one process with generators seeded by its index, so
        the results do not depend on the number of processes (cooprl.parallel.distributed.run_sharded)."""
        return distributed.run_sharded(tasks, seed, work)

    def own_shares(self, count: int) -> range:
        """Return the indices of `count` shared tasks this process runs in `run_seeded`."""
        return distributed.own_shares(count)

    def barrier(self) -> None:
        """Wait until every process arrives here (nothing in a single process)."""
        distributed.barrier()

    def send_to_main(self, value: Any) -> None:
        """Send `value` to rank 0, which takes it in `receive_in_rank_order` (a checkpoint's per-process state)."""
        distributed.send_to_main(value)

    def receive_in_rank_order(self, own: Any) -> Iterator[Any]:
        """On rank 0: yield `own`, then every other process's value sent by `send_to_main`, one at a time."""
        return distributed.receive_in_rank_order(own)

    # -------------------------------------------------------------------------------------- optimizer state
    def optimizer_state(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """Return this process's optimizer state for its checkpoint file: the local shards under fsdp."""
        return fsdp.local_optimizer_state(optimizer) if self.sharded else optimizer.state_dict()

    def load_optimizer_state(self, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
        """Load what `optimizer_state` returned (of as many processes) into `optimizer`."""
        if self.sharded:
            fsdp.load_local_optimizer_state(optimizer, state)
        else:
            optimizer.load_state_dict(state)


SINGLE = Parallel()
