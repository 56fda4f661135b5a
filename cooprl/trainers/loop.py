"""The training loop every trainer shares: run folder, data order, progress, evaluation, checkpoints, resume.

A trainer supplies an `Algorithm` (what one training step and one evaluation do, and which models and
extra state a checkpoint holds); this module does the rest the same way for all of them:
- run folder `<output.base_dir>/<run name>/` with `config.yaml`, `metrics.jsonl`, `checkpoints/`, `rewards.png`
  (and the preference trainers' `preferences/`, which a new run in a used folder moves aside: resumes read it);
- a deterministic data order (a permutation per epoch from the seed), so a resumed run sees the same items;
- a tqdm bar with steps/s and the running reward, evaluation every `eval_interval` steps and at the end;
- checkpoints every `checkpoint_interval` steps, at the end, and at the next safe point after Ctrl-C;
- a summary at the end: the first quarter of steps against the last quarter.

Under data-parallel training (`parallel_training: ddp`, see cooprl.parallel.distributed) a step takes one item per
process, each item's rollout draws from a generator seeded by its position in the data order, the step's metrics are
the processes' mean, and rank 0 alone writes the run folder, logs, evaluates, saves checkpoints and prints the
summary. """

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import random
import time
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch
from tqdm.auto import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from cooprl import checkpoint as ckpt
from cooprl.config import Config, ConfigError, IterativeFields, Run, is_data_parallel
from cooprl.console import open_run_log
from cooprl.metrics import Metrics
from cooprl.parallel.context import SINGLE, Parallel
from cooprl.parallel.order import Ranks, StepPlan, data_order, item_seed, shard_order
from cooprl.parallel.torchrun import command_for
from cooprl.plot import plot_run
from cooprl.run_folders import lock_run_folder, new_run_folder, record_version, remove_unfinished_saves
from cooprl.stopping import StopFlag, signal_of
from cooprl.task import Task
from cooprl.tracking import RunTracker, read_metrics
from cooprl.trainers.report import start_summary

log = logging.getLogger(__name__)

TRAINING_REWARD = "turn_1/reward_mean"   # the training reward of turn 1 (what the bar and the summary show)
EVAL_REWARD = "eval/turn_1/reward_mean"  # the evaluation's reward of turn 1 (the summary's verdict, when evaluated)
# the training reward judges a run only when each quarter of its logged steps holds at least this many: one step
# against one step is noise, not learning
MIN_STEPS_PER_QUARTER = 2


class Algorithm:
    """What the shared loop trains: a trainer subclasses it (TeamAlgorithm, MARLHF) and gives the four methods a run
    needs (`train_step`, `evaluate`, `state_dict`, `load_state_dict`); the other members are defaults the loop calls
    on every algorithm, which a trainer overrides when it has something to do there."""

    models: list[Any]                 # saved as agent_<i>/ in checkpoints
    shared_agents: int = 0            # agent_model.shared_policy: the agents models[0] plays (0: a model each)
    parallel: Parallel = SINGLE       # the run's parallel context (the builder's): gathers, the data order's shards
    rounds: int = 1                   # the step plan (items of the epochs, cut at max_steps) repeats this often
    task_reward_key: str = TRAINING_REWARD   # the metric of the task's own reward (MARLHF trains on a learned one)
    loss_key: str | None = None       # no reward (SFT): the loss the bar, summary and plot show (lower is better)

    def train_step(self, item: Any, step: int) -> Metrics:
        """Train on one dataset item; return the step's metrics (a plain mapping's values are means)."""
        raise NotImplementedError

    def evaluate(self, items: list[Any]) -> dict[str, float]:
        """Return the evaluation metrics on `items`."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """Return what a checkpoint needs besides the weights: optimizers, buffers, counters."""
        raise NotImplementedError

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` saved."""
        raise NotImplementedError

    def start_run(self, run_dir: Path, step: int, steps_per_round: int) -> None:
        """Called on every rank once the run folder is known and a resume has restored `step` (for files the
        algorithm keeps in the run folder, which rank 0 alone writes); nothing by default."""

    def end_epoch(self) -> Metrics:
        """Called after the last step of every epoch (and of every round) to train what the buffers still hold;
        return that update's metrics (the loop adds them to the step's). Nothing by default."""
        return Metrics()

    def rank_state(self) -> dict[str, Any]:
        """Return what differs between the processes of a data-parallel run (buffers, counters); none by default."""
        return {}

    def load_rank_state(self, state: dict[str, Any]) -> None:
        """Restore this rank's part saved by `rank_state`."""

    def generators(self) -> list[Any]:
        """Return the samplers the algorithm built: a data-parallel run closes their vLLM engines before it leaves
        its process group; none by default."""
        return []


def evaluation_seed(seed: int) -> int:
    """Return the seed of evaluation's own generator (separate from training's, see train_loop.evaluate)."""
    return seed + 12345


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch generators."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def run_prefix(run: Run) -> str:
    """Return the start of an unnamed run's folder name: `<trainer>-<task label>-` (the time follows); the code
    task's label is its dataset's name."""
    # run_label is optional on the sections class an environment registers (cooprl.config.load)
    label = run.config.task.run_label() if hasattr(run.config.task, "run_label") else "task"
    return f"{run.trainer}-{label}-"


def run_folder(run: Run) -> Path:
    """Return the run folder (created and locked for this process), named by output.run_name or trainer, dataset and
    time; a new run takes a free one (`<name>-2`, ... when the name is taken: cooprl.run_folders), a resume its own
    (the saves a killed process left unfinished removed)."""
    name = run.config.output.run_name or f"{run_prefix(run)}{datetime.datetime.now():%Y%m%d-%H%M%S}"
    folder = lock_run_folder(new_run_folder(run.config, name, run.trainer, run.section))   # one writer at a time
    remove_unfinished_saves(Path(run.config.checkpoint.checkpoint_dir or folder / "checkpoints"))
    return folder


def _resolve_resume(config: Config, checkpoint_dir: Path) -> Path | None:
    spec = config.checkpoint.resume_from_checkpoint
    if not spec:
        return None
    try:
        return ckpt.find_checkpoint(spec, checkpoint_dir)
    except FileNotFoundError as err:
        raise ConfigError(f"checkpoint.resume_from_checkpoint: {err}") from None


def _resume(checkpoint: Path, algorithm: Algorithm, ranks: Ranks = Ranks()) -> dict[str, Any]:
    """Load `checkpoint` into the algorithm's models and state and restore the RNG states; return the trainer
    state. CheckpointError when a file is damaged or the checkpoint does not fit this run (other agents, other
    optimizers, another number of data-parallel processes): nothing is written before everything is loaded."""
    state = ckpt.load_trainer_state(checkpoint)
    saved_world = state.get("world_size", 1)
    if saved_world != ranks.world_size:
        raise ckpt.CheckpointError(f"checkpoint {checkpoint} was written by {saved_world} data-parallel process(es); "
                                   f"resume it with as many (this run has {ranks.world_size})")
    ckpt.load_team_weights(algorithm.models, checkpoint, algorithm.shared_agents)
    try:
        algorithm.load_state_dict(state["algorithm"])
        if ranks.world_size > 1:   # this rank's own buffers and counters (and a sharded optimizer's shard)
            algorithm.load_rank_state(ckpt.load_rank_state(checkpoint, state, ranks.rank))
        ckpt.set_rng_state(state["rng"])
        position = (state["step"], state["env_step"], state.get("wandb_id"))
        if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in position[:2]):
            raise ValueError(f"step and env_step must be counts, got {position[:2]}")
    except (KeyError, TypeError, ValueError, IndexError, RuntimeError, AttributeError) as err:
        first = (str(err).strip().splitlines() or [""])[0][:200]
        raise ckpt.CheckpointError(f"checkpoint {checkpoint} is damaged or does not fit this run: {ckpt.STATE_FILE} "
                                   f"({type(err).__name__}: {first})") from None
    return state


def train_loop(run: Run, task: Task, algorithm: Algorithm, run_dir: Path) -> dict[str, Any]:
    """Run (or resume) training to the end; return a summary dict (also printed)."""
    config, trainer, section = run.config, run.trainer, run.section
    checkpoint_dir = Path(config.checkpoint.checkpoint_dir or run_dir / "checkpoints")
    parallel = algorithm.parallel
    ranks = parallel.ranks
    plan = step_plan(run, len(task.train_items), algorithm.rounds, ranks)
    steps_per_round, rounds, total_steps = plan.steps_per_round, plan.rounds, plan.total_steps
    if section.max_steps and section.max_steps > len(plan.order) and ranks.is_main:
        log.warning("%s.max_steps=%d is more than the %d steps of %s.num_train_epochs=%d (%d per epoch): it trains "
                    "%d steps%s; to train longer: %s", trainer, section.max_steps, len(plan.order), trainer,
                    section.num_train_epochs, plan.epoch_length, len(plan.order),
                    " per iteration" if rounds > 1 else "", train_longer(run, len(plan.order)))

    start_step, env_step, wandb_id = 0, 0, None
    resume_from = _resolve_resume(config, checkpoint_dir)
    state = _resume(resume_from, algorithm, ranks) if resume_from is not None else None  # before writing anything
    if state is not None:
        start_step, env_step = state["step"], state["env_step"]
        # this run's W&B run goes on; a new run from another run's checkpoint starts its own
        wandb_id = state.get("wandb_id") if resume_from.resolve().is_relative_to(checkpoint_dir.resolve()) else None
        if start_step >= total_steps and (state.get("finished") or _eval_at(run_dir, start_step)):
            return _already_finished(run, run_dir, start_step, total_steps, len(plan.order), ranks.is_main)
    if ranks.is_main:   # the other ranks of a data-parallel run write nothing
        _open_run_folder(run, run_dir, start_step if state is not None else None)
        open_run_log(run_dir)   # the project's details, debug included, from the command line's start on
        if state is not None:
            log.info("resumed from %s at step %d", resume_from, start_step)
        log.info("%s", start_summary(run, task, algorithm.models, run_dir, total_steps, start_step, rounds))
    algorithm.start_run(run_dir, start_step, steps_per_round)   # on every rank; only rank 0's writes files
    tracker = (RunTracker(run_dir, config.wandb, config.to_dict(trainer), run_dir.name, resume_id=wandb_id)
               if ranks.is_main else _NoTracker())

    def save(step: int, finished: bool = False) -> None:
        # sharded models are gathered on rank 0 one at a time, as it writes them (every rank takes part)
        weights = parallel.whole_state_dicts(algorithm.models)
        if ranks.is_main:
            # finished: the final evaluation is done (a resume of it has nothing left to do)
            state = {"algorithm": algorithm.state_dict(), "env_step": env_step, "wandb_id": tracker.wandb_id,
                     "finished": finished}
            rank_states: Any = ()
            if ranks.world_size > 1:   # every rank's own buffers (and optimizer shards), for a resume with as many
                state["world_size"] = ranks.world_size
                rank_states = parallel.receive_in_rank_order(algorithm.rank_state())
            try:
                path = ckpt.save_checkpoint(checkpoint_dir, step, algorithm.models, state, weights, rank_states,
                                            shared_agents=algorithm.shared_agents)
                ckpt.prune_checkpoints(checkpoint_dir, config.checkpoint.checkpoint_total_limit)
            except ckpt.SaveError as err:
                tracker.close()   # the steps logged so far reach W&B
                again = f"--resume {run_dir}" if ckpt.list_checkpoints(checkpoint_dir) else "the same command"
                raise ckpt.SaveError(f"{err}; to go on, free space and run "
                                     f"{command_for(f'train_{trainer}.py', ranks.world_size)} {again}") from None
            log.info("checkpoint saved: %s", path)
        elif ranks.world_size > 1:
            list(weights)
            parallel.send_to_main(algorithm.rank_state())
        parallel.barrier()   # the other ranks wait until the checkpoint is written

    def evaluate(step: int) -> dict[str, float]:
        # under data-parallel training every rank holds the same weights: each evaluates its share of the problems
        # (cooprl.rollout.evaluation.evaluate_team); otherwise the only process evaluates
        items = task.eval_items[:section.eval_num_samples]
        # evaluation has no bar of its own: say what the run is doing after the bar reached its end
        if ranks.is_main:
            log.info(
                "evaluating at step %d on %d problems x %d samples%s",
                step,
                len(items),
                section.eval_num_generations,
                f" over {ranks.world_size} processes" if ranks.world_size > 1 else "",
            )
        # Evaluation draws from its own seeded generator: it neither disturbs nor depends on training's RNG,
        # so resumed runs match uninterrupted ones and evaluations at different steps are comparable.
        started = time.perf_counter()
        with parallel.forked_generators():   # the CUDA generators too: manual_seed reseeds them
            torch.manual_seed(evaluation_seed(config.seed))
            metrics = algorithm.evaluate(items) if items else {}
        if not ranks.is_main:
            return {}
        if metrics:
            tracker.log({**metrics, "time/eval_s": time.perf_counter() - started}, step, env_step)
        return metrics

    step = start_step
    interrupted = False
    if start_step == 0 and section.eval_at_start:
        try:
            evaluate(0)   # the starting point: evaluation's own generator, so training draws the same as without it
        except KeyboardInterrupt as stop:   # Ctrl-C (SIGTERM) before any step: nothing trained, nothing to save
            tracker.close()
            log.warning("interrupted during the evaluation before training: nothing was trained or saved; run the "
                        "same command again to start afresh")
            return {"run_dir": str(run_dir), "steps": 0, "interrupted": True, "signal": signal_of(stop)}
    task_reward, loss_key = algorithm.task_reward_key, algorithm.loss_key
    bar = tqdm(total=total_steps, initial=start_step, desc=trainer, unit="step", dynamic_ncols=True,
               disable=not ranks.is_main)
    # log lines written while the bar is drawn (an iteration's pair collection, say) go above it, not through it
    stopped_by = None   # the signal (SIGINT, SIGTERM) that stopped the run, after a save
    # a second signal stops in the step (a KeyboardInterrupt): the bar closed before the command's last line
    going_on = command_for(f"train_{trainer}.py", ranks.world_size)
    with StopFlag() as interrupt, logging_redirect_tqdm(), bar, _said_if_stopped_at_once(run_dir, checkpoint_dir,
                                                                                        going_on, ranks):
        for step in range(start_step + 1, total_steps + 1):
            started = time.perf_counter()
            metrics = _run_step(algorithm, task, plan, step, config.seed)
            metrics["time/step_s"] = time.perf_counter() - started
            env_step += int(metrics.pop("env_steps", 1))
            if step % section.logging_steps == 0 or step == total_steps:
                tracker.log(metrics, step, env_step)
            bar.set_postfix(_bar_fields(metrics, task_reward, loss_key))
            bar.update(1)
            if section.eval_interval and step % section.eval_interval == 0 and step < total_steps:
                evaluate(step)
            interval = config.checkpoint.checkpoint_interval
            stop = _stop_requested(bool(interrupt.requested), parallel)
            if stop or (interval and step % interval == 0 and step < total_steps):
                save(step)
            if stop:
                interrupted, stopped_by = True, interrupt.requested or "SIGINT"   # another rank's: its Ctrl-C
                break
    bar.close()
    final_eval = {}
    if not interrupted:
        try:
            final_eval = evaluate(step)
        except KeyboardInterrupt as stop:   # Ctrl-C (SIGTERM) in the final evaluation: keep the training
            log.warning("interrupted during the final evaluation: saving the trained models first")
            interrupted, stopped_by = True, signal_of(stop)
        with StopFlag():   # a Ctrl-C here waits for the final checkpoint (cut short, it would be lost)
            save(step, finished=not interrupted)
    tracker.close()
    if not ranks.is_main:
        return {"run_dir": str(run_dir), "steps": step, "interrupted": interrupted, "signal": stopped_by,
                "rank": ranks.rank}
    summary = {**summarize(run_dir, step, final_eval, interrupted, task_reward, loss_key), "signal": stopped_by}
    if interrupted:
        log.warning("interrupted (%s) at step %d of %d; to continue: %s --resume %s",
                    "Ctrl-C" if stopped_by == "SIGINT" else stopped_by, step, total_steps,
                    command_for(f"train_{trainer}.py", ranks.world_size), run_dir)
    try:
        plot_run(run_dir)
    except Exception as err:  # a missing plotting backend must not fail a finished run
        log.warning("could not draw rewards.png: %s", err)
    return summary


def train_longer(run: Run, epoch_steps: int) -> str:
    """Return the override that makes `run` train more steps than now, its epochs taking `epoch_steps` steps in all
    (max_steps counts below that; past it, only more epochs, or an _iter trainer's iterations, add steps)."""
    trainer, section = run.trainer, run.section
    if isinstance(section, IterativeFields):
        return f"--override {trainer}.num_iterations=<more>"
    more_epochs = f"--override {trainer}.num_train_epochs=<more>"
    if section.max_steps and section.max_steps < epoch_steps:
        return f"--override {trainer}.max_steps=<more> (up to {epoch_steps}; beyond: {more_epochs})"
    return more_epochs + (f" {trainer}.max_steps=null" if section.max_steps else "")


@contextlib.contextmanager
def _said_if_stopped_at_once(run_dir: Path, checkpoint_dir: Path, command: str, ranks: Ranks) -> Iterator[None]:
    """Log, on rank 0, what a run stopped in its step by a second signal kept and how it goes on."""
    try:
        yield
    except KeyboardInterrupt:
        if ranks.is_main:
            newest = ckpt.list_checkpoints(checkpoint_dir)
            log.warning("stopped at once, in the step in progress (not saved); %s",
                        f"its newest checkpoint is {newest[-1].name}: to continue, {command} --resume {run_dir}"
                        if newest else "no checkpoint was saved: run the same command again to start afresh")
        raise


def _already_finished(run: Run, run_dir: Path, step: int, total_steps: int, epoch_steps: int,
                      main: bool = True) -> dict[str, Any]:
    """Say (on the `main` process) that the resumed run in `run_dir` ended: trained `step` of `total_steps` steps and
    evaluated; return its summary, without training, evaluating or writing anything. `epoch_steps`: the steps of
    the run's epochs (see train_longer)."""
    if main:
        done = (f"{step} of {total_steps} steps trained and evaluated" if step <= total_steps else
                f"{step} steps trained and evaluated, more than the {total_steps} asked (a resume undoes no step)")
        print(f"{run_dir} is finished: {done}; nothing to do (to train it further: --resume {run_dir} "
              f"{train_longer(run, epoch_steps)}; to evaluate it: python evaluate.py --run {run_dir})")
    return {"run_dir": str(run_dir), "steps": step, "interrupted": False, "finished": True}


def _open_run_folder(run: Run, run_dir: Path, resumed_at: int | None) -> None:
    """Create `run_dir` with the run's config.yaml; keep the metrics up to `resumed_at` (a resume), or none (a new
    run in a used folder)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(run.config.to_yaml(run.trainer), encoding="utf-8")
    record_version(run_dir, resumed_at)
    if resumed_at is not None:
        _truncate_metrics(run_dir, resumed_at)
    elif read_metrics(run_dir):
        # a new run in a used folder (e.g. the demo's fixed run_name, run twice): appending would mix the two
        # runs' steps in metrics.jsonl, the summary and rewards.png
        log.warning("%s holds an earlier run's metrics: metrics.jsonl starts afresh (to continue that run, "
                    "--resume %s)", run_dir, run_dir)
        _truncate_metrics(run_dir, 0)


def step_plan(run: Run, num_items: int, rounds: int, ranks: Ranks = Ranks()) -> StepPlan:
    """Return the run's step plan on this process: the seeded data order of its epochs, under data-parallel training
    this rank's share of every step (cooprl.parallel.order), cut at max_steps, repeated `rounds` times."""
    section = run.section
    order = data_order(num_items, section.num_train_epochs, run.config.seed)
    epoch_length, positions = num_items, None
    if is_data_parallel(section):   # a step takes world_size items of the order, this rank one of them
        if epoch_length < ranks.world_size:
            raise ConfigError(f"{run.trainer}.parallel_training: ddp with {ranks.world_size} processes needs at least "
                              f"as many training items; the training split has {epoch_length}: launch at most "
                              f"{epoch_length} processes, or widen dataset.train_split")
        order, positions, epoch_length = shard_order(order, epoch_length, ranks)
    return StepPlan(order, positions, epoch_length, min(len(order), section.max_steps or len(order)), rounds)


def _run_step(algorithm: Algorithm, task: Task, plan: StepPlan, step: int, seed: int) -> dict[str, float]:
    """Train on step `step`'s item (this rank's, under data-parallel training), flush the buffers at an epoch's end;
    return the step's metrics (under data-parallel training the processes', merged by each key's rule)."""
    position = plan.position(step)
    if position is not None:   # the item's own seed: which rank rolls it out, and the items before it, change nothing
        torch.manual_seed(item_seed(seed, position))
    metrics = as_metrics(algorithm.train_step(task.train_items[plan.item(step)], step))
    if plan.ends_epoch(step):
        metrics.merge(algorithm.end_epoch())
    parallel = algorithm.parallel
    return metrics.reduce(parallel.gather if position is not None and parallel.data_parallel else None)


def as_metrics(values: Any) -> Metrics:
    """Return `values` as Metrics: as they are, or a plain mapping's values recorded as means."""
    return values if isinstance(values, Metrics) else Metrics(values)


def _stop_requested(requested: bool, parallel: Parallel) -> bool:
    """Return whether to stop after this step: this process was interrupted, or, under data-parallel training, any
    rank was (they stop together, at the same step)."""
    if not parallel.data_parallel:
        return requested
    return any(parallel.gather(requested))


class _NoTracker:
    """The tracker of a data-parallel run's other ranks: rank 0 alone logs."""

    wandb_id = None

    def log(self, metrics: dict[str, float], step: int, env_step: int) -> None:
        """Log nothing."""

    def close(self) -> None:
        """Close nothing."""


def _truncate_metrics(run_dir: Path, step: int) -> None:
    # rewritten whole, always: a line a kill cut off (which read_metrics skips) must not prefix the next event
    kept = [e for e in read_metrics(run_dir) if e.get("step", 0) <= step]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in kept), encoding="utf-8")


def summarize(run_dir: Path, step: int, final_eval: dict[str, float], interrupted: bool,
              task_reward: str = TRAINING_REWARD, loss_key: str | None = None) -> dict[str, Any]:
    """Print and return the first-quarter vs last-quarter means of the training metrics of turn 1 (with `loss_key`,
    a trainer without a reward: that loss and its per-agent parts), and the verdict: by the evaluation before
    training (step 0) and after it when both exist, else by the training reward (`task_reward`: the task's own reward
    where the trainer trains on another, MARLHF's learned one) or the loss, when each quarter holds at least
    MIN_STEPS_PER_QUARTER logged steps (`learned` is None when nothing can judge)."""
    headline = loss_key or TRAINING_REWARD
    events = [e for e in read_metrics(run_dir) if headline in e]
    summary: dict[str, Any] = {"run_dir": str(run_dir), "steps": step, "interrupted": interrupted, "learned": None}
    if events:
        quarter = max(1, len(events) // 4)
        first, last = events[:quarter], events[-quarter:]
        rows = []
        for key in _summary_keys(events[0], loss_key):
            a = _mean(e.get(key) for e in first)
            b = _mean(e.get(key) for e in last)
            rows.append((key.removeprefix("turn_1/"), a, b))
            summary[key] = {"first_quarter": a, "last_quarter": b}
        width = max(len(r[0]) for r in rows)
        lines = [f"{('loss' if loss_key else 'turn 1 metric').ljust(width)}  first quarter  last quarter"]
        # no -0.000: a mean like -1e-17 (float sums of small negative parts) rounds to zero first
        lines += [f"{name.ljust(width)}  {round(a, 3) + 0.0:13.3f}  {round(b, 3) + 0.0:12.3f}" for name, a, b in rows]
        judged = loss_key or (task_reward if task_reward in summary else TRAINING_REWARD)
        value = summary[judged]
        start = _eval_at(run_dir, 0)
        by_eval = EVAL_REWARD in start and EVAL_REWARD in final_eval
        if quarter < MIN_STEPS_PER_QUARTER:
            verdict = f": too few steps to judge (a verdict needs {4 * MIN_STEPS_PER_QUARTER} logged steps)"
        else:
            better = (value["last_quarter"] < value["first_quarter"] if loss_key
                      else value["last_quarter"] > value["first_quarter"])
            summary["learned"] = better
            verdict = f": {_verdict(better)}"
        what = ("loss" if loss_key else
                f"training {'task ' if judged != TRAINING_REWARD else ''}reward")
        lines.append(f"mean {what}: {value['first_quarter']:.3f} (first {quarter} steps) -> "
                     f"{value['last_quarter']:.3f} (last {quarter} steps){'' if by_eval else verdict}")
        if by_eval:
            # an offline learner (MADPO's pairs from the start policy) logs the start policy's samples while it
            # trains: the evaluation before and after says whether the policies improved
            summary["learned"] = final_eval[EVAL_REWARD] > start[EVAL_REWARD]
            lines.append(f"eval reward: {start[EVAL_REWARD]:.3f} (before training) -> {final_eval[EVAL_REWARD]:.3f} "
                         f"(after {step} steps): {_verdict(summary['learned'])}")
        for key in sorted(k for k in final_eval if "pass@" in k or k.endswith("reward_mean")):
            lines.append(f"{key}: {final_eval[key]:.3f}")
        print("\n".join(["", f"Summary of {run_dir} ({step} steps{', interrupted' if interrupted else ''})"] + lines))
    summary["final_eval"] = final_eval
    return summary


def _summary_keys(event: dict[str, Any], loss_key: str | None) -> list[str]:
    """Return the metrics the summary compares: turn 1's (not its node counts), or the loss and each agent's."""
    if loss_key:
        return [loss_key] + [k for k in event if k.startswith("agent_") and k.endswith("/nll")]
    return [k for k in event if k.startswith("turn_1/") and not k.endswith(("nodes", "early_terminations"))]


def _verdict(improved: bool) -> str:
    return "learned" if improved else "did not improve"


def _eval_at(run_dir: Path, step: int) -> dict[str, float]:
    """Return the evaluation metrics logged at `step` (empty when there was no evaluation then)."""
    return {k: v for e in read_metrics(run_dir) if e.get("step") == step for k, v in e.items() if k.startswith("eval/")}


def _bar_fields(metrics: dict[str, float], task_reward: str = TRAINING_REWARD,
                loss_key: str | None = None) -> dict[str, str]:
    """Return the progress bar's fields: the loss of a trainer without a reward (SFT), else the training reward, and
    the task reward when they differ (MARLHF)."""
    if loss_key:
        return {"loss": f"{metrics.get(loss_key, float('nan')):.3f}"}
    fields = {"reward": f"{metrics.get(TRAINING_REWARD, float('nan')):.3f}"}
    if task_reward != TRAINING_REWARD and task_reward in metrics:
        fields["task_reward"] = f"{metrics[task_reward]:.3f}"
    return fields


def _mean(values: Any) -> float:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else float("nan")
