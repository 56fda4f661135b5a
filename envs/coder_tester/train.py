"""The coder_tester task's command line: `python -m envs.coder_tester.train TRAINER --config FILE [--override ...]`; the
train_*.py scripts come here too when a config has a top-level `coder_tester:` section (envs/train.py).
"""

from __future__ import annotations

import sys

from cooprl.config import Config
from cooprl.task import Task
from envs.code_generation.train import code_env_main
from envs.coder_tester.config import CoderTesterConfig

DEFAULT_CONFIG = "configs/coder_tester_cpu.yaml"


def build_task(config: Config, trainer: str) -> Task:
    """Return the coder_tester task for `trainer` (imported here: it pulls in torch, which a config error never needs)."""
    from envs.coder_tester.task import build_coder_tester_task
    return build_coder_tester_task(config, trainer)


def main(trainer: str, default_config: str = DEFAULT_CONFIG, argv: list[str] | None = None) -> int:
    """Train `trainer` on the coder_tester task as the command line `argv` says; return the exit code."""
    return code_env_main(trainer, default_config, argv, CoderTesterConfig, build_task)


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        sys.exit("usage: python -m envs.coder_tester.train TRAINER [--config FILE] [--override KEY=VALUE ...]")
    sys.exit(main(sys.argv[1], DEFAULT_CONFIG, sys.argv[2:]))
