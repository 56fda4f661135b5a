"""The planner_coder task's command line: `python -m envs.planner_coder.train TRAINER --config FILE [--override ...]`; the
train_*.py scripts come here too when a config has a top-level `planner_coder:` section (envs/train.py).
"""

from __future__ import annotations

import sys

from cooprl.cli import exit_status, read_command_line
from cooprl.config import ConfigError
from cooprl.train import train
from cooprl.trainers import TRAINERS
from envs.code_generation.train import use_reward_executor
from envs.planner_coder.config import PlannerCoderConfig
from envs.planner_coder.task import build_planner_coder_task

DEFAULT_CONFIG = "configs/planner_coder_cpu.yaml"


def main(trainer: str, default_config: str = DEFAULT_CONFIG, argv: list[str] | None = None) -> int:
    """Train `trainer` on the planner_coder task as the command line `argv` says; return the exit code."""
    def read_then_train() -> None:
        config = read_command_line(trainer, default_config, argv, task_config=PlannerCoderConfig)
        if config is None:   # --print-config
            return
        if trainer not in TRAINERS:
            raise ConfigError(f"unknown trainer {trainer!r}; choose one of {', '.join(TRAINERS)}")
        use_reward_executor(config)
        train(config, trainer, build_planner_coder_task(config, trainer))
    return exit_status(read_then_train)


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        sys.exit("usage: python -m envs.planner_coder.train TRAINER [--config FILE] [--override KEY=VALUE ...]")
    sys.exit(main(sys.argv[1], DEFAULT_CONFIG, sys.argv[2:]))
