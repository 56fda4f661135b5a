"""The trainers, and the one registry that names them.

`TRAINERS` maps a trainer's name (its config section, its `train_<name>.py` script) to its config section class
and its builder, a plain callable `build(run, task) -> algorithm` for the shared loop
(`cooprl.trainers.loop.train_loop`). The section classes come from `cooprl.config.TRAINER_SECTIONS`, the table the
config loader reads (it stays in `cooprl.config` so that loading a config never imports torch); a trainer added
here without its section there (or the other way round) fails at import.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from cooprl.config import TRAINER_SECTIONS, ConfigError, MAGRPOSection, Run
from cooprl.parallel.context import Parallel
from cooprl.task import Task
from cooprl.trainers.actor_critic import build_iac, build_maac
from cooprl.trainers.madpo import build_madpo
from cooprl.trainers.magrpo import build_magrpo
from cooprl.trainers.marlhf import build_marlhf
from cooprl.trainers.sft import build_sft
from cooprl.trainers.team import check_shared_policy


@dataclass(frozen=True)
class TrainerSpec:
    """A trainer: its config section class and its builder."""

    section: type
    build: Callable[[Run, Task, Parallel | None], Any]


_BUILDERS: dict[str, Callable[[Run, Task, Parallel | None], Any]] = {
    "magrpo": build_magrpo, "grpo": build_magrpo,          # GRPO: MAGRPO with one agent
    "iac": build_iac, "ac": build_iac,                     # AC: IAC with one agent
    "maac": build_maac,
    "madpo": build_madpo, "madpo_iter": build_madpo,       # the iterative variants: the section's extra keys
    "marlhf": build_marlhf, "marlhf_iter": build_marlhf,
    "sft": build_sft,                                      # supervised fine-tuning on demonstrations
}
if set(_BUILDERS) != set(TRAINER_SECTIONS):
    raise ImportError(f"trainers without a builder or a config section: "
                      f"{sorted(set(_BUILDERS) ^ set(TRAINER_SECTIONS))}")

TRAINERS: dict[str, TrainerSpec] = {name: TrainerSpec(TRAINER_SECTIONS[name], build) for name,
                                    build in _BUILDERS.items()}


def build_algorithm(run: Run, task: Task, parallel: Parallel | None = None) -> Any:
    """Return the algorithm of `run`'s trainer for `task`, its agents loaded, with the run's parallel context (None:
    the section's, in one process); ConfigError for a section the task cannot be trained with, before any model is
    loaded."""
    check_task_fits(run, task)
    check_shared_policy(run, task.num_agents)
    return TRAINERS[run.trainer].build(run, task, parallel)


def check_task_fits(run: Run, task: Task) -> None:
    """Raise ConfigError when `run`'s section asks for what `task` cannot do: a sequential team (a task with
    `follow_prompt`: each agent answers the earlier agents' texts of its own joint action) has aligned joint actions
    only, since agent a answers each joint action of agents 0..a-1 once. (Only the MAGRPO family has a cross mode.)"""
    trainer = run.trainer
    mode = run.section.joint_mode if isinstance(run.section, MAGRPOSection) else "aligned"
    if task.follow_prompt is not None and mode != "aligned":
        raise ConfigError(f"{trainer}.joint_mode={mode}: {task.name} is a sequential team (each agent answers the "
                          f"earlier agents' texts once), so its joint actions are aligned; set {trainer}.joint_mode="
                          f"aligned")
