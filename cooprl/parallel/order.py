"""The data order every process agrees on: which dataset item each training step takes, on which process, with
which seed. Pure functions of the seed, the dataset size and the process's place; no collective.

- `data_order`: a seeded permutation of the items per epoch;
- `shard_order`: under data parallelism a step takes `world_size` items of that order, rank r the r-th; an epoch's
  items that fill no last step are left out of it (DistributedSampler's drop_last);
- `item_seed`: each item's rollout draws from generators seeded by (seed, its position in the order), so which
  process rolls an item out changes nothing;
- `ends_epoch`: whether a step closes an epoch (or an iterative trainer's round);
- `mean_metrics`: the processes' metrics of one step as one.
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


def mean_metrics(per_rank: list[dict[str, float]], summed: tuple[str, ...] = ()) -> dict[str, float]:
    """Return the ranks' metrics of one step as one: per key the mean over the ranks that have it, the keys ending
    with one of `summed` added up (counts such as env_steps); keys in the order they first appear."""
    keys = dict.fromkeys(k for metrics in per_rank for k in metrics)
    merged = {}
    for key in keys:
        values = [m[key] for m in per_rank if key in m]
        numeric = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if len(numeric) != len(values):
            merged[key] = values[0]
        elif key.endswith(summed):
            merged[key] = sum(numeric)
        else:
            merged[key] = sum(numeric) / len(numeric)
    return merged
