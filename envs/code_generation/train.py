"""What every `train_*.py` script runs: build the code task, the trainer's algorithm, and the shared loop.

Its errors for bad input (DatasetError, ModelError, ConfigError, CheckpointError, ...) all derive from
`cooprl.errors.UserError`, which the command line prints as one `error:` line (exit 2).

torch, transformers and the trainers are imported only once the command line and the config have been read: a
typo, a missing file or `--print-config` answers in a fraction of a second instead of after ~5 s of imports.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from cooprl.cli import exit_status, read_command_line
from cooprl.config import TRAINER_SECTIONS, Config, ConfigError
from cooprl.task import Task

log = logging.getLogger(__name__)


def build_task_and_algorithm(config: Config, trainer: str) -> tuple[Task, Any]:
    """Return (code task, algorithm with its loaded agents) for `trainer`'s section of `config`."""
    from cooprl.trainers import TRAINERS
    from envs.code_generation.task import build_code_task
    check_trainer(trainer)
    task = build_code_task(config, trainer)
    return task, TRAINERS[trainer].build(config, trainer, task)


def check_trainer(trainer: str) -> None:
    """Raise ConfigError naming the choices when `trainer` is no trainer's name (before any problem is loaded)."""
    if trainer not in TRAINER_SECTIONS:
        raise ConfigError(f"unknown trainer {trainer!r}; choose one of {', '.join(TRAINER_SECTIONS)}")


def use_reward_executor(config: Config) -> None:
    """Make the process-wide pool that runs the reward's programs as `config.reward` says: local or on Ray, and
    refused when `require_full_isolation` is set and the sandbox cannot isolate fully."""
    from rewards.ray_pool import make_sandbox, use_sandbox
    from rewards.sandbox import IsolationError
    reward = config.reward
    options = {"require_full_isolation": reward.require_full_isolation}
    if reward.executor == "ray":
        options.update(actors=reward.ray_actors, address=reward.ray_address,
                       workers_per_actor=reward.ray_workers_per_actor)
    try:
        use_sandbox(make_sandbox(reward.executor, **options))
    except ImportError as e:
        raise ConfigError(f"reward.executor: ray needs the ray extra (pip install 'cooprl[ray]'): {e}") from None
    except IsolationError as e:
        raise ConfigError(f"reward.require_full_isolation: {e}") from None


def train(config: Config, trainer: str, build_task: Callable[[Config, str], Task] | None = None) -> dict[str, Any]:
    """Train `trainer` on the task `build_task` builds from `config` (default: the code-generation task), with the
    reward executor `config.reward` names; return the run summary."""
    from cooprl.train import train as train_task
    if build_task is None:
        from envs.code_generation.task import build_code_task as build_task
    check_trainer(trainer)   # before the task loads its problems
    use_reward_executor(config)
    return train_task(config, trainer, build_task(config, trainer))


def code_env_main(trainer: str, default_config: str, argv: list[str] | None, task_config: type | None = None,
                  build_task: Callable[[Config, str], Task] | None = None) -> int:
    """Entry point of a code environment: read the command line (`argv`, default sys.argv) with the environment's
    config sections (`task_config`, e.g. planner_coder's; None: the code task's), train on the task `build_task`
    builds (None: the code task); return the exit code (2 after a one-line error for bad input)."""
    def read_then_train() -> None:
        config = read_command_line(trainer, default_config, argv, task_config=task_config)
        if config is not None:   # None: --print-config
            train(config, trainer, build_task)
    return exit_status(read_then_train)


def main(trainer: str, default_config: str, argv: list[str] | None = None) -> int:
    """Entry point of `train_<trainer>.py` for the code task; return the process exit code."""
    return code_env_main(trainer, default_config, argv)
