"""`--override key.path=value`: each value parsed as YAML (through the bounded loader) and set in the file's data,
winning over the file's value under another name (an upstream alias)."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Collection, Mapping

import yaml

from cooprl.config.fields import ConfigError, field_aliases
from cooprl.config.schema import Config
from cooprl.config.trainer_sections import TRAINER_SECTIONS
from cooprl.config.yaml_io import load_yaml_text, yaml_problem


def parse_override(text: str) -> tuple[list[str], Any]:
    """Return (key path, value) of `a.b.c=value`, the value parsed as YAML (`null`, `[1, 2]`, `3e-5`...)."""
    if "=" not in text:
        raise ConfigError(f"--override {text!r}: expected KEY.PATH=VALUE")
    key, raw = text.split("=", 1)
    path = [p for p in key.strip().split(".")]
    if not all(path):
        raise ConfigError(f"--override {text!r}: empty part in key {key!r}")
    try:
        value = load_yaml_text(raw) if raw.strip() else ""
    except yaml.YAMLError as err:
        raise ConfigError(f"--override {text!r}: value is not valid YAML ({yaml_problem(err)})") from None
    except ConfigError as err:
        raise ConfigError(f"--override {text!r}: {err}") from None
    return path, value


def apply_overrides(data: dict[str, Any], overrides: list[str], task_config: type | None = None) -> dict[str, Any]:
    """Return a copy of `data` with each `a.b=v` override set (intermediate mappings created as needed);
    `task_config`: the task's sections (see `register_task_config`)."""
    merged = yaml.safe_load(yaml.safe_dump(data)) or {}
    overridden: set[tuple[str, ...]] = set()
    for text in overrides:
        path, value = parse_override(text)
        node = merged
        for i, part in enumerate(path[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise ConfigError(f"--override {text!r}: {'.'.join(path[:i + 1])} is a value, not a section")
            node = child
        section = _section_at(path[:-1], task_config)
        if section is not None:  # an override wins over the file's value under the other name (alias or ours)
            names = {path[-1]} | {a for a, n in field_aliases(section).items() if n == path[-1]}
            target = field_aliases(section).get(path[-1], path[-1])
            names |= {target} | {a for a, n in field_aliases(section).items() if n == target}
            for other in names - {path[-1]}:
                if (*path[:-1], other) not in overridden:   # two overrides of one key under two names: an error
                    node.pop(other, None)
        if len(path) == 2 and path[0] in TRAINER_SECTIONS and path[1] == "reward_shift":
            if isinstance(merged.get("reward_processor"), dict) and ("reward_processor", "shift") not in overridden:
                merged["reward_processor"].pop("shift", None)   # the override wins over the file's shift
        if path == ["reward_processor", "shift"]:
            for name in TRAINER_SECTIONS:
                if isinstance(merged.get(name), dict) and (name, "reward_shift") not in overridden:
                    merged[name].pop("reward_shift", None)
        node[path[-1]] = value
        overridden.add(tuple(path))
    return merged


def _section_at(path: list[str], task_config: type | None = None) -> type | None:
    """Return the dataclass of the config section at key `path` ([] = Config), or None when there is none."""
    cls: Any = Config
    if path and task_config is not None and path[0] in {f.name for f in dataclasses.fields(task_config)}:
        cls = task_config
    for part in path:
        fields = {f.name: f for f in dataclasses.fields(cls) if not f.metadata.get("task")}
        if part not in fields:
            return None
        tp = typing.get_type_hints(cls)[part]
        args = [a for a in typing.get_args(tp) if a is not types.NoneType] or [tp]
        cls = next((a for a in args if dataclasses.is_dataclass(a)), None)
        if cls is None:
            return None
    return cls


def check_override_sections(overrides: list[str], read: Collection[str], owners: Mapping[str, str],
                            reader: str) -> None:
    """Raise ConfigError for the first override that sets a section of `owners` (a section's name -> the command that
    reads it, e.g. "train_grpo.py") that `reader` (this command) does not read: it would be ignored without a word.
    The sections of `read` and those no owner claims (agent_model, dataset, ...) pass."""
    for text in overrides:
        section = text.split("=", 1)[0].split(".", 1)[0].strip()
        if section in owners and section not in read:
            own = ", ".join(f"{name}.*" for name in read) or "none of these sections"
            raise ConfigError(f"--override {text!r}: the {section} section is read by {owners[section]}, not by "
                              f"{reader} (its keys: {own})")
