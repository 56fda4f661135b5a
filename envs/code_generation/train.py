"""What every `train_*.py` script runs: build the code task, the trainer's algorithm, and the shared loop.

Its errors for bad input (DatasetError, ModelError, ConfigError, CheckpointError, ...) all derive from
`cooprl.errors.UserError`, which the command line prints as one `error:` line (exit 2).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from cooprl.cli import run_cli
from cooprl.config import Config, ConfigError
from cooprl.trainers.loop import run_folder, seed_everything, train_loop

log = logging.getLogger(__name__)

# trainer name -> function(config, trainer, task) -> Algorithm
ALGORITHMS: dict[str, str] = {
    "magrpo": "cooprl.trainers.magrpo:build_magrpo",
    "grpo": "cooprl.trainers.magrpo:build_magrpo",
    "iac": "cooprl.trainers.actor_critic:build_iac",
    "maac": "cooprl.trainers.actor_critic:build_maac",
    "ac": "cooprl.trainers.actor_critic:build_iac",
    "madpo": "envs.code_generation.comparator:build_madpo",
    "madpo_iter": "envs.code_generation.comparator:build_madpo",
    "marlhf": "envs.code_generation.marlhf:build_marlhf",
    "marlhf_iter": "envs.code_generation.marlhf:build_marlhf",
}


def build_task_and_algorithm(config: Config, trainer: str) -> tuple[Any, Any]:
    """Return (code task, algorithm with its loaded agents) for `trainer`'s section of `config`."""
    if trainer not in ALGORITHMS:
        raise ConfigError(f"trainer {trainer!r} is not available yet in this version; available: {', '.join(ALGORITHMS)}")
    from importlib import import_module
    from envs.code_generation.task import build_code_task
    task = build_code_task(config, trainer)
    module, name = ALGORITHMS[trainer].split(":")
    return task, getattr(import_module(module), name)(config, trainer, task)


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


def train(config: Config, trainer: str) -> dict[str, Any]:
    """Train `trainer` on the code-generation task described by `config`; return the run summary."""
    seed_everything(config.seed)
    use_reward_executor(config)
    task, algorithm = build_task_and_algorithm(config, trainer)
    run_dir = run_folder(config, trainer)
    log.info("run folder: %s (%d train / %d eval problems)", run_dir, len(task.train_items), len(task.eval_items))
    summary = train_loop(config, trainer, task, algorithm, run_dir)
    if config.output.save_final_model:
        target = Path(config.output.save_path or run_dir / "final")
        for i, model in enumerate(algorithm.models):
            model.save_pretrained(target / f"agent_{i}")
        log.info("final models saved in %s", target)
    return summary


def main(trainer: str, default_config: str) -> int:
    """Entry point of `train_<trainer>.py`; return the process exit code."""
    return run_cli(trainer, default_config, train)
