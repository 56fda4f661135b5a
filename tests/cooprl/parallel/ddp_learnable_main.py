"""A training script for the data-parallel tests: `python tests/cooprl/parallel/ddp_learnable_main.py TRAINER
--override ...` (or the same under torchrun) trains TRAINER on the learnable lowercase task (tests/learnable.py)
through cooprl.train.train, the recipe every environment's script runs. Its config is the library's defaults plus the
overrides."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT)]

from cooprl.cli import exit_status, read_command_line  # noqa: E402
from cooprl.train import train  # noqa: E402
from tests.learnable import lowercase_task  # noqa: E402


def main(trainer: str, argv: list[str]) -> int:
    """Train `trainer` on 4 lowercase items as the command line says; return the exit code."""
    def read_then_train() -> None:
        run = read_command_line(trainer, "", argv)   # --config is given
        if run is not None:
            train(run, lowercase_task(num_agents=run.section.num_agents, items=4))
    return exit_status(read_then_train)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
