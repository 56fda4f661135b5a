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


def train(config: Config, trainer: str) -> dict[str, Any]:
    """Train `trainer` on the code-generation task described by `config`; return the run summary."""
    seed_everything(config.seed)
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
