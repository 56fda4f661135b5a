"""The arithmetic task's command line: `python -m envs.arithmetic.train TRAINER --config FILE [--override ...]`.

The same options as every train_*.py (--config, --override, --print-config, --resume), with the trainer named
first: magrpo, iac, maac, madpo, ... (cooprl.trainers.TRAINERS).
"""

from __future__ import annotations

import sys

from cooprl.cli import exit_status, read_command_line
from cooprl.train import train
from envs.arithmetic.config import ArithmeticConfig
from envs.arithmetic.task import build_arithmetic_task

DEFAULT_CONFIG = "configs/arithmetic_cpu.yaml"


def main(trainer: str, argv: list[str] | None = None) -> int:
    """Train `trainer` on the arithmetic task as the command line `argv` says; return the exit code."""
    def read_then_train() -> None:
        config = read_command_line(trainer, DEFAULT_CONFIG, argv, task_config=ArithmeticConfig)
        if config is not None:   # None: --print-config
            train(config, trainer, build_arithmetic_task(config, trainer))
    return exit_status(read_then_train)


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        sys.exit("usage: python -m envs.arithmetic.train TRAINER [--config FILE] [--override KEY=VALUE ...]")
    sys.exit(main(sys.argv[1], sys.argv[2:]))
