"""The recipe every environment's training script runs once it has a config and a task."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from cooprl.config import Config
from cooprl.task import Task
from cooprl.trainers import build_algorithm
from cooprl.trainers.loop import run_folder, seed_everything, train_loop

log = logging.getLogger(__name__)


def train(config: Config, trainer: str, task: Task) -> dict[str, Any]:
    """Train `trainer` (a name of cooprl.trainers.TRAINERS) on `task` as `config` says: seed, build the agents,
    run the shared loop in the run folder, save the final models when asked; return the run summary."""
    seed_everything(config.seed)
    algorithm = build_algorithm(config, trainer, task)
    run_dir = run_folder(config, trainer)
    log.info("run folder: %s (%d train / %d eval items)", run_dir, len(task.train_items), len(task.eval_items))
    summary = train_loop(config, trainer, task, algorithm, run_dir)
    if config.output.save_final_model:
        target = Path(config.output.save_path or run_dir / "final")
        for i, model in enumerate(algorithm.models):
            model.save_pretrained(target / f"agent_{i}")
        log.info("final models saved in %s", target)
    return summary
