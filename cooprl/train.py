"""The recipe every environment's training script runs once it has a config and a task."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from cooprl.checkpoint import save_model
from cooprl.config import DATA_PARALLEL_MODES, ConfigError, Run
from cooprl.console import close_run_log
from cooprl.parallel.context import Parallel
from cooprl.rollout.vllm_generation import close_engines
from cooprl.run_folders import release_unused
from cooprl.task import Task
from cooprl.trainers import build_algorithm
from cooprl.trainers.loop import run_folder, seed_everything, train_loop
from cooprl.trainers.report import results_summary

log = logging.getLogger(__name__)


def train(run: Run, task: Task) -> dict[str, Any]:
    """Train `run`'s trainer on `task` as its config says: seed, build the agents, run the shared loop in the run
    folder, save the final models when asked; return the run summary.

    Started by torchrun or accelerate with several processes, it joins their process group first
    (`parallel_training: ddp` or `fsdp`, cooprl.parallel.distributed); rank 0 names the run folder and alone saves the
    final models."""
    config = run.config
    parallel = join_processes(run)   # the run's one parallel context, handed to the trainer (and by it to the loop)
    seed_everything(config.seed)
    # the folder first: a name that is taken, or a folder that cannot be written, is settled before models load
    run_dir = parallel.from_main(lambda: run_folder(run))
    try:
        algorithm = build_algorithm(run, task, parallel)
    except BaseException:   # a model that would not load, Ctrl-C: the folder stays free for the same command
        if parallel.is_main:
            release_unused(run_dir)
        raise
    try:
        summary = train_loop(run, task, algorithm, run_dir)
        # sharded models (fsdp) are gathered on rank 0 while the processes are still together
        weights = list(parallel.whole_state_dicts(algorithm.models)) if config.output.save_final_model else []
    finally:
        if parallel.data_parallel:
            # vLLM engines (external_launcher) joined the group and made their own from it: they go first
            close_engines(algorithm.generators())
            # leave the group we joined; a single process's group (an in-process vLLM engine creates one) is its
            # creator's to destroy: destroying it here made vLLM's own exit fail ("Invalid process group specified")
            parallel.leave()
    if not parallel.is_main or summary.get("finished"):   # (a finished run resumed: its final models are saved)
        return summary
    target = None
    if config.output.save_final_model:
        target = Path(config.output.save_path or run_dir / "final")
        for i, model in enumerate(algorithm.models):
            save_model(model, target / f"agent_{i}", weights[i])
        log.info("final models saved in %s", target)
    if not summary.get("interrupted"):   # an interrupted run said how to continue it
        print("\n" + results_summary(run, run_dir, target))
    close_run_log()
    return summary


def join_processes(run: Run) -> Parallel:
    """Return the run's parallel context, after joining the launcher's process group when torchrun or accelerate
    started several processes; ConfigError when several processes run a trainer section without `parallel_training:
    ddp` (each would train its own copy into the same run folder)."""
    world = Parallel.launched_world_size()
    trainer, mode = run.trainer, run.section.parallel_training
    if world > 1 and mode not in DATA_PARALLEL_MODES:
        raise ConfigError(f"{trainer}.parallel_training: {mode}, but {world} processes were launched (WORLD_SIZE); "
                          f"set --override {trainer}.parallel_training=ddp (or fsdp), or start one process")
    return Parallel.join(run.section, run.config.agent_model.device)
