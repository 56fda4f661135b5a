"""The numbers a training step records, each with the rule that merges it where it is recorded (TRL's `_metrics`).

A rule merges a key's values over one process's records (its optimizer steps, its updates), then over the
processes of a data-parallel run, which take the same optimizer steps:
- `mean`: a measurement (a loss, a norm, a reward): the mean, then the mean over the processes;
- `sum`: a count of things each process has its own of (samples, pairs, environment steps): summed, then summed;
- `max`, `min`: an extreme: the largest (smallest), then the largest (smallest);
- `steps`: a count every process shares (optimizer steps, skipped steps): summed, then the processes' mean.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable, Iterator

MEAN, SUM, MAX, MIN, STEPS = "mean", "sum", "max", "min", "steps"


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


OVER_RECORDS: dict[str, Callable[[list[float]], float]] = {MEAN: _mean, SUM: sum, MAX: max, MIN: min, STEPS: sum}
OVER_RANKS: dict[str, Callable[[list[float]], float]] = {MEAN: _mean, SUM: sum, MAX: max, MIN: min, STEPS: _mean}


class Metrics(Mapping):
    """Recorded values by key, each key with one rule; reading a key gives this process's merged value."""

    def __init__(self, values: Mapping[str, float] | None = None, how: str = MEAN):
        self._values: dict[str, list[float]] = {}
        self._how: dict[str, str] = {}
        if values:
            self.update(values, how)

    def add(self, key: str, value: float, how: str = MEAN) -> None:
        """Record `value` under `key` with rule `how`; ValueError when the key was recorded with another rule."""
        if how not in OVER_RECORDS:
            raise ValueError(f"metric {key!r}: rule {how!r} is none of {', '.join(OVER_RECORDS)}")
        known = self._how.setdefault(key, how)
        if known != how:
            raise ValueError(f"metric {key!r} is recorded as {known} and as {how}")
        self._values.setdefault(key, []).append(float(value))

    def update(self, values: Mapping[str, float], how: str = MEAN) -> None:
        """Record every value of `values` with rule `how`."""
        for key, value in values.items():
            self.add(key, value, how)

    def merge(self, other: Mapping[str, float], prefix: str = "") -> None:
        """Record every value `other` recorded, under `prefix` + its key, with its rule (a plain mapping's: means)."""
        if not isinstance(other, Metrics):
            other = Metrics(other)
        for key, values in other._values.items():
            for value in values:
                self.add(prefix + key, value, other._how[key])

    def rule(self, key: str) -> str:
        """Return the rule `key` was recorded with."""
        return self._how[key]

    def __getitem__(self, key: str) -> float:
        return OVER_RECORDS[self._how[key]](self._values[key])

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Metrics({dict(self)!r})"

    def reduce(self, gather: Callable[[Any], list[Any]] | None = None) -> dict[str, float]:
        """Return each key's value: this process's, or with `gather` (every process's value of its argument, in rank
        order) the processes' merged by each key's rule, over the processes that recorded it."""
        mine = {key: (self._how[key], self[key]) for key in self}
        if gather is None:
            return {key: value for key, (_, value) in mine.items()}
        per_rank = gather(mine)
        keys = dict.fromkeys(key for rank in per_rank for key in rank)
        merged = {}
        for key in keys:
            found = [rank[key] for rank in per_rank if key in rank]
            merged[key] = OVER_RANKS[found[0][0]]([value for _, value in found])
        return merged
