"""Upstream's config files as they are: the trainer a file is for, upstream's `<trainer>.reward_shift`, and
upstream's older MADPO `preference:` section."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cooprl.config.fields import ConfigError, show
from cooprl.config.trainer_sections import TRAINER_SECTIONS
from cooprl.config.yaml_io import read_yaml


def trainer_of_file(path: str | Path) -> str | None:
    """Return the trainer a config file is for, when its trainer sections say it; else None.

    A run folder's config.yaml holds only the sections its trainer reads: one section, or a MARLHF section plus
    the section of its `rl_algorithm`. ConfigError when the file holds several unrelated trainer sections.
    """
    return trainer_of_data(read_yaml(path), path)


def trainer_of_data(data: dict[str, Any], path: str | Path = "") -> str | None:
    """Return the trainer the config file `path`, read as the mapping `data`, is for (see `trainer_of_file`)."""
    present = [name for name in TRAINER_SECTIONS if name in data]
    # sections read as another's rl_algorithm (MAGRPO under MARLHF reads the MARLHF section, not its own)
    helpers = {data[name].get("rl_algorithm") for name in present if isinstance(data[name], dict)} - {"magrpo"}
    candidates = [name for name in present if name not in helpers]
    if len(candidates) > 1:
        raise ConfigError(f"config file {str(path)!r} has the sections of several trainers ({', '.join(candidates)}): "
                          "name the one to use with --trainer")
    return candidates[0] if candidates else None


def lift_reward_shift(data: dict[str, Any]) -> dict[str, Any]:
    """Return `data` with upstream's `<trainer>.reward_shift` moved to our `reward_processor.shift` (the same
    number: added to every training reward); ConfigError when the two, or two trainer sections, disagree."""
    found = [(name, data[name]["reward_shift"]) for name in TRAINER_SECTIONS
             if isinstance(data.get(name), dict) and "reward_shift" in data[name]]
    if not found:
        return data
    data = {k: (dict(v) if k in TRAINER_SECTIONS and isinstance(v, dict) else v) for k, v in data.items()}
    processor = data.get("reward_processor")
    if processor is not None and not isinstance(processor, dict):
        return data  # build_section reports the malformed section
    processor = dict(processor or {})
    given = [("reward_processor.shift", processor["shift"])] if "shift" in processor else []
    for name, value in found:
        data[name].pop("reward_shift")
        given.append((f"{name}.reward_shift", value))
    first_key, first = given[0]
    for key, value in given[1:]:
        if value != first:
            raise ConfigError(f"{key}: upstream's name for reward_processor.shift, given as {show(value)} while "
                              f"{first_key} is {show(first)}; give one of them")
    processor["shift"] = first
    data["reward_processor"] = processor
    return data


# upstream's older MADPO schema (configs/madpo_*_config.yaml of commit 88b74938): a top-level `preference:` section
# whose `comparator:` block says who plain MADPO compares against; `self` (the policies' own samples) is ours
OLD_MADPO_COMPARATOR_NULLS = ("agents", "provider", "model", "api_key_env", "base_url")


def read_old_madpo_preference(data: dict[str, Any]) -> dict[str, Any]:
    """Return `data` without upstream's older MADPO `preference:` section when it asks for what plain MADPO does
    (`comparator.type: self`, the other comparator keys null); ConfigError naming every key of it that asks for
    more (an API or model comparator is madpo_iter's: comparator_policy, comparator_model, comparator_api_*).
    Files without a `madpo:` section are left alone (`preference` is then an unknown key)."""
    if "preference" not in data or not isinstance(data.get("madpo"), dict):
        return data
    section = data["preference"] if data["preference"] is not None else {}
    if not isinstance(section, dict):
        raise ConfigError(f"preference: expected a mapping (upstream's older MADPO schema), got {show(section)}")
    problems = [f"preference.{key}={show(value)}" for key, value in section.items() if key != "comparator"]
    comparator = section.get("comparator") if section.get("comparator") is not None else {}
    if not isinstance(comparator, dict):
        raise ConfigError(f"preference.comparator: expected a mapping, got {show(comparator)}")
    for key, value in comparator.items():
        wanted = (None, "self", "current") if key == "type" else (None,) if key in OLD_MADPO_COMPARATOR_NULLS else ()
        if value not in wanted:
            problems.append(f"preference.comparator.{key}={show(value)}")
    if problems:
        raise ConfigError(f"{', '.join(problems)}: upstream's older MADPO schema; plain madpo compares the policies' "
                          "own samples (preference.comparator.type: self, the other keys null). A comparator model or "
                          "API is madpo_iter's (comparator_policy, comparator_model, comparator_api_url, ...)")
    return {key: value for key, value in data.items() if key != "preference"}
