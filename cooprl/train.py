"""The recipe every environment's training script runs once it has a config and a task."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from cooprl.checkpoint import mark_shared_policy, save_failed, save_model
from cooprl.config import DATA_PARALLEL_MODES, ConfigError, Run, SFTSection, check_training_samples_differ
from cooprl.console import close_run_log
from cooprl.parallel.context import Parallel
from cooprl.parallel.torchrun import plain_torchrun_warning
from cooprl.rollout.vllm_generation import close_engines
from cooprl.run_folders import release_unused
from cooprl.task import Task, shared_items
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
    check_training_samples_differ(run)   # before any model loads or any folder is made
    if not isinstance(run.section, SFTSection):   # SFT leaves them out of its demonstrations, and says so
        warn_shared_items(task)
    parallel = join_processes(run)   # the run's one parallel context, handed to the trainer (and by it to the loop)
    seed_everything(config.seed)
    # the folder first: a name that is taken, or a folder that cannot be written, is settled before models load
    run_dir = parallel.from_main(lambda: run_folder(run))
    try:
        return _train_in(run, task, parallel, run_dir)
    finally:
        if parallel.is_main:   # the lock given back; a folder nothing was written to (a finished run's fork) too
            release_unused(run_dir)


def _train_in(run: Run, task: Task, parallel: Parallel, run_dir: Path) -> dict[str, Any]:
    """Build the algorithm, train it in `run_dir`, save the final models when asked; return the run summary."""
    config = run.config
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
            save_final_model(model, target / f"agent_{i}", weights[i], run_dir)
        mark_shared_policy(target, algorithm.shared_agents)
        log.info("final models saved in %s", target)
    if not summary.get("interrupted"):   # an interrupted run said how to continue it
        print("\n" + results_summary(run, run_dir, target))
    close_run_log()
    return summary


def warn_shared_items(task: Task) -> None:
    """Log a warning when eval items of `task` are training items too: its eval metrics would measure, in part,
    problems it trained on."""
    shared = shared_items(task)
    if shared:
        log.warning("%d of the %d eval problems of %s are training problems too (its training and eval splits overlap, "
                    "e.g. %s): the eval metrics partly measure problems it trains on; give it disjoint splits",
                    len(shared), len(task.eval_items), task.name, ", ".join(shared[:3]))


def save_final_model(model: Any, folder: Path, weights: dict[str, Any] | None, run_dir: Path) -> None:
    """Save one of the final models into `folder`; SaveError when it cannot be written (a full disk): the run's final
    checkpoint, saved just before, holds the same weights."""
    from safetensors import SafetensorError
    try:
        save_model(model, folder, weights)
    except (OSError, SafetensorError) as err:
        needed = sum(p.numel() * p.element_size() for p in model.parameters()) if hasattr(model, "parameters") else 0
        raise save_failed(folder, err, needed, "the run's final checkpoint holds the same weights (python evaluate.py "
                          f"--run {run_dir} reads it)") from None


def join_processes(run: Run) -> Parallel:
    """Return the run's parallel context, after joining the launcher's process group when torchrun or accelerate
    started several processes; ConfigError when several processes run a trainer section without `parallel_training:
    ddp` (each would train its own copy into the same run folder), and when a ddp or fsdp section runs in a process
    no launcher started (torchrun with one process sets WORLD_SIZE=1: that one trains alone, as asked)."""
    world = Parallel.launched_world_size()
    trainer, mode = run.trainer, run.section.parallel_training
    if world > 1 and mode not in DATA_PARALLEL_MODES:
        raise ConfigError(f"{trainer}.parallel_training: {mode}, but {world} processes were launched (WORLD_SIZE); "
                          f"set --override {trainer}.parallel_training=ddp (or fsdp), or start one process")
    if mode in DATA_PARALLEL_MODES and "WORLD_SIZE" not in os.environ:   # torchrun, accelerate --multi_gpu set it
        raise ConfigError(f"{trainer}.parallel_training: {mode}, but no launcher started this process (WORLD_SIZE is "
                          f"unset): it would train alone; start it with python -m cooprl.parallel.torchrun "
                          f"--nproc_per_node=N train_{trainer}.py ... (or accelerate launch --multi_gpu "
                          f"--num_processes=N), or set --override {trainer}.parallel_training=none")
    parallel = Parallel.join(run.section, run.config.agent_model.device)
    if parallel.is_main and plain_torchrun_warning():
        log.warning(plain_torchrun_warning())
    return parallel
