"""The arithmetic task's config section. It is passed to the loader explicitly (`task_config=ArithmeticConfig`), so
it can live in one process with the code task, whose sections are registered globally."""

from __future__ import annotations

from dataclasses import dataclass

from cooprl.config import option


@dataclass
class ArithmeticSection:
    num_train: int = option(32, "training items (targets)", min=1)
    num_eval: int = option(8, "evaluation items", min=1)
    max_target: int = option(18, "targets are drawn from 0..max_target", min=0)
    seed: int = option(0, "seed of the targets (fixed: the same items whatever the training seed)", min=0)


@dataclass
class ArithmeticConfig:
    """The arithmetic task's sections of a config file."""
    arithmetic: ArithmeticSection = option(ArithmeticSection(), "the toy arithmetic task")

    def run_label(self) -> str:
        """Return the label of run folder names (`<trainer>-arithmetic-<time>`)."""
        return "arithmetic"
