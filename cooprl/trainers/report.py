"""What a training run says at its start and at its end, besides the progress bar and the summary of its metrics.

At the start, one block: the trainer, the model and where it comes from, `init_from` and what was loaded, the team,
the data, the steps, samples per prompt (G), turns, LoRA, device, torch threads, the reward and the run folder. At
the end: where the results are (metrics, plot, log, final models) and the command that evaluates the run.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

from cooprl.checkpoint import init_source
from cooprl.config import ActorCriticSection, MAGRPOSection, Run
from cooprl.console import RUN_LOG, chosen_threads
from cooprl.task import Task


# the sections whose num_generations is what a run samples per prompt (MADPO's has no effect: it samples
# preference_num_candidates)
GENERATING = (MAGRPOSection, ActorCriticSection)


def model_source(name: str) -> str:
    """Return where model `name` comes from, in words: embedded (offline:), a local folder, or the Hugging Face hub."""
    if name.startswith("offline:"):
        cache = os.environ.get("COOPRL_CACHE") or "~/.cache/cooprl"
        return f"embedded, no download; kept in {cache}"
    if Path(name).expanduser().is_dir():
        return "a local folder"
    return "the Hugging Face hub (downloaded once into its cache)"


def init_description(init_from: str | None) -> str:
    """Return what `agent_model.init_from` loads: the folder of the agents' saved weights, or that it is unset."""
    if not init_from:
        return "none (the model's own weights)"
    if not Path(init_from).expanduser().exists():   # a resume of a run whose source was deleted (lost_init)
        return f"{init_from} (deleted: the checkpoint holds every weight)"
    return f"{init_from} (agents loaded from {init_source(init_from)})"   # where build_team loaded them from


def lora_description(lora: Any) -> str:
    """Return the LoRA setting in words (full fine-tuning when there is none)."""
    if lora is None:
        return "none (full fine-tuning)"
    return f"r={lora.r}, alpha={lora.alpha}, dropout={lora.dropout}"


def devices_of(models: Sequence[Any]) -> str:
    """Return the devices the models sit on, e.g. `cpu` or `cuda:0, cuda:1`."""
    found = []
    for model in models:
        device = str(next(model.parameters()).device)
        if device not in found:
            found.append(device)
    return ", ".join(found) or "none"


def start_summary(run: Run, task: Task, models: Sequence[Any], run_dir: Path, total_steps: int,
                  start_step: int, rounds: int = 1) -> str:
    """Return the start-up block of a run: what will run, on what, with which settings, and where it writes
    (`rounds`: the iterations of the _iter trainers, each `total_steps / rounds` steps)."""
    config, section = run.config, run.section
    threads = chosen_threads()
    rows = [
        ("trainer", run.trainer),
        ("model", f"{config.agent_model.name} ({model_source(config.agent_model.name)})"),
        ("init_from", init_description(config.agent_model.init_from)),
        ("team", f"{task.name}, {task.num_agents} agent(s)"
                 + (", one model playing them all (agent_model.shared_policy)" if config.agent_model.shared_policy
                    else "")),
        ("data", f"{len(task.train_items)} training items, {section.eval_num_samples or 0} of "
                 f"{len(task.eval_items)} eval problems x {section.eval_num_generations} sample(s)"),
        ("steps", f"{total_steps}" + (f" ({rounds} iterations x {total_steps // rounds})" if rounds > 1 else "")
                  + (f", resuming after step {start_step}" if start_step else "")),
        ("samples per prompt (G)", str(section.num_generations) if isinstance(section, GENERATING) else "-"),
        ("turns", str(section.num_turns)),
        ("LoRA", lora_description(config.agent_model.lora)
                 + (", every agent's adapter on one base (share_base)" if config.agent_model.share_base else "")),
        ("device", devices_of(models)),
        ("torch threads", threads.describe().removeprefix("torch threads: ") if threads else "torch's own"),
        ("reward", task.reward_label or f"{task.name} (at most {task.max_reward:g})"),
        ("run folder", f"{run_dir} (details in {RUN_LOG})"),
    ]
    width = max(len(name) for name, _ in rows)
    return "\n".join(["what will run:"] + [f"  {name.ljust(width)}  {value}" for name, value in rows])


def results_summary(run: Run, run_dir: Path, final_dir: Path | None) -> str:
    """Return the end-of-run block: where the metrics, the plot, the log and the final models are, and the command
    that evaluates the run."""
    lines = ["results:",
             f"  metrics      {run_dir / 'metrics.jsonl'}",
             f"  plot         {run_dir / 'rewards.png'}",
             f"  log          {run_dir / RUN_LOG}",
             f"  final models {final_dir if final_dir is not None else 'not saved (output.save_final_model: false)'}"
             f"; checkpoints in {run.config.checkpoint.checkpoint_dir or run_dir / 'checkpoints'}",
             "next:",
             f"  python evaluate.py --run {run_dir}"]
    return "\n".join(lines)
