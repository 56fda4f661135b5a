"""`load_config`: a file (read once, through the bounded loader) plus overrides, upstream's names lifted, every key
checked, the rules between keys applied; and the task sections an environment registers."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from cooprl.config.fields import build_section, unknown_key_error
from cooprl.config.overrides import apply_overrides
from cooprl.config.rules import check_consistency
from cooprl.config.schema import Config
from cooprl.config.trainer_sections import TRAINER_SECTIONS
from cooprl.config.upstream import lift_reward_shift, read_old_madpo_preference
from cooprl.config.yaml_io import read_yaml

# The library's config knows no task. An environment registers the dataclass of its own top-level sections; its
# fields are section names (read from the top level of a file, like the library's), and it may define
# `validate()` (raise ConfigError for values the task refuses together) and `run_label()` (a short name for run
# folders, e.g. the dataset's).
_TASK_CONFIG: type | None = None


def register_task_config(cls: type) -> type:
    """Make dataclass `cls` the task sections that `load_config` reads by default; return `cls`."""
    global _TASK_CONFIG
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"a task config is a dataclass of sections, not {cls!r}")
    _TASK_CONFIG = cls
    return cls


def registered_task_config() -> type | None:
    """Return the task config dataclass registered by the environment (None when none is)."""
    return _TASK_CONFIG


def _library_fields() -> dict[str, Any]:
    return {f.name: f for f in dataclasses.fields(Config) if not f.metadata.get("task")}


def load_config(path: str | Path | None = None, overrides: list[str] | None = None,
                task_config: type | None = None) -> Config:
    """Return the validated Config from a YAML file (optional) plus `--override` strings.

    The top-level sections of `task_config` (default: the one the environment registered) go to `config.task`."""
    return config_from_data(read_yaml(path) if path is not None else {}, overrides, task_config)


def config_from_data(data: dict[str, Any], overrides: list[str] | None = None,
                     task_config: type | None = None) -> Config:
    """Return the validated Config from a config file's mapping (as `read_yaml` returns it) plus `--override`
    strings: what `load_config` does once the file is read, for a caller that looked at the mapping first (the
    environment a file names by its sections)."""
    task_config = task_config or _TASK_CONFIG
    data = apply_overrides(data, overrides or [], task_config)
    data = read_old_madpo_preference(lift_reward_shift(data))
    task_names = {f.name for f in dataclasses.fields(task_config)} if task_config is not None else set()
    library_names = set(_library_fields())
    if task_names & library_names:
        raise TypeError(f"task config {task_config.__name__} reuses library sections: "
                        f"{sorted(task_names & library_names)}")
    task_data = {key: data[key] for key in data if key in task_names}
    data = {key: value for key, value in data.items() if key not in task_names}
    if task_config is not None:
        known = sorted(library_names | task_names)
        unknown = [key for key in data if key not in library_names]
        if unknown:
            raise unknown_key_error(str(unknown[0]), known, "")
    config = build_section(Config, data, trainer_sections=TRAINER_SECTIONS)
    if task_config is not None:
        config.task = build_section(task_config, task_data)
    check_consistency(config)
    return config
