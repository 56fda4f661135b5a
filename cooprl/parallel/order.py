"""The data order every process agrees on: which dataset item each training step takes, on which process, with
which seed. Pure functions of the seed, the dataset size and the process's place; no collective.

- `data_order`: a seeded permutation of the items per epoch;
- `shard_order`: under data parallelism a step takes `world_size` items of that order, rank r the r-th; an epoch's
  items that fill no last step are left out of it (DistributedSampler's drop_last);
- `item_seed`: each item's rollout draws from generators seeded by (seed, its position in the order), so which
  process rolls an item out changes nothing;
- `ends_epoch`: whether a step closes an epoch (or an iterative trainer's round);
- `StepPlan`: all of it for one run on this process: each step's item, its seed's position, where epochs end.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Ranks:
    """Where this process stands: its rank, the number of processes, its rank on this node."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        """Return whether this process writes the run's outputs (rank 0)."""
        return self.rank == 0


def data_order(num_items: int, epochs: int, seed: int) -> list[int]:
    """Return the item index of every training step: a seeded permutation per epoch."""
    order = []
    for epoch in range(epochs):
        generator = torch.Generator().manual_seed(seed * 1000 + epoch)
        order.extend(torch.randperm(num_items, generator=generator).tolist())
    return order


def ends_epoch(step: int, steps_per_round: int, epoch_length: int, rounds: int = 1) -> bool:
    """Return whether training step `step` (1-based) is the last of an epoch of `epoch_length` items, or, with
    several rounds (the iterative trainers' iterations), the last of its round (`steps_per_round` steps: the epochs,
    cut at max_steps). The end of a single-round plan cut by max_steps is not an epoch's end: a run extended
    later from its last checkpoint then trains exactly as one that ran the longer plan from the start."""
    position = (step - 1) % steps_per_round + 1
    return position % epoch_length == 0 or (rounds > 1 and position == steps_per_round)


def shard_order(order: list[int], epoch_length: int, ranks: Ranks) -> tuple[list[int], list[int], int]:
    """Return (this rank's item of every step, each of those items' position in `order`, steps per epoch): step k of
    an epoch takes its items k*W .. k*W+W-1 (W = world size), this rank the one at k*W + rank; an epoch's last
    items that fill no step are left out."""
    world = ranks.world_size
    steps = epoch_length // world
    items, positions = [], []
    for start in range(0, len(order), epoch_length):
        for k in range(steps):
            position = start + k * world + ranks.rank
            items.append(order[position])
            positions.append(position)
    return items, positions, steps


def item_seed(seed: int, position: int) -> int:
    """Return the seed of the item at `position` of the data order (a hash of both, below 2^63)."""
    digest = hashlib.sha256(f"{seed}:{position}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


@dataclass(frozen=True)
class StepPlan:
    """Which dataset item each training step takes on this process, and where epochs and rounds end."""

    order: list[int]              # item index of each step of a round (this rank's share under data parallelism)
    positions: list[int] | None   # each item's place in the shared order, which seeds it; None in one process
    epoch_length: int             # steps per epoch
    steps_per_round: int          # the epochs, cut at max_steps
    rounds: int = 1               # the iterative trainers repeat the round

    @property
    def total_steps(self) -> int:
        return self.steps_per_round * self.rounds

    def item(self, step: int) -> int:
        """Return the item index of training step `step` (1-based)."""
        return self.order[(step - 1) % self.steps_per_round]

    def position(self, step: int) -> int | None:
        """Return the place in the shared order of step `step`'s item (its seed), None in one process."""
        return None if self.positions is None else self.positions[(step - 1) % self.steps_per_round]

    def ends_epoch(self, step: int) -> bool:
        """Return whether step `step` is the last of an epoch or of a round (`ends_epoch`)."""
        return ends_epoch(step, self.steps_per_round, self.epoch_length, self.rounds)
