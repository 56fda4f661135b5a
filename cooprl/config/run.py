"""`Run`: what one training run reads of the config. A config file holds a section for every trainer; a run trains
one of them. `Run.of(config, trainer)` is built once, when the command line has read the config, and is what the
trainers, their builders, the task builders and the loop receive: the whole `config` (models, output, checkpoints,
the task's sections), the `trainer`'s name (errors name keys as `<trainer>.<key>`) and its own typed `section`.
MARLHF's run holds the run of its RL algorithm too (`rl`). Nobody looks a trainer's section up by name again, and
nobody asks a section whether it has a key: a key several trainers share is declared on the section class they share
(`TrainerSection`, `PreferenceFields`, `IterativeFields`, ...), and a capability only some have is an `isinstance`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Generic, Mapping, Optional, TypeVar

from cooprl.config.fields import ConfigError, field_aliases, show
from cooprl.config.overrides import check_override_sections
from cooprl.config.schema import Config
from cooprl.config.trainer_sections import TRAINER_SECTIONS, IterativeFields, MARLHFSection, TrainerSection

S = TypeVar("S", bound=TrainerSection)

# MARLHF's rl_algorithm -> the trainer that runs it (cooprl.trainers.marlhf.RL_BUILDERS builds it)
RL_TRAINERS = {"magrpo": "magrpo", "mareinforce": "magrpo", "maremax": "magrpo", "marloo": "magrpo",
               "iac": "iac", "maac": "maac"}
# the REINFORCE family: MAGRPO whose advantage baseline is none (raw returns), the group's best return, or the mean
# of the other samples' returns (leave-one-out); they override the section's advantage_mode
MAGRPO_ADVANTAGE_MODES = {"magrpo": None, "mareinforce": "raw", "maremax": "max", "marloo": "rloo"}


def check_trainer(trainer: str) -> None:
    """Raise ConfigError naming the choices when `trainer` is no trainer's name."""
    if trainer not in TRAINER_SECTIONS:
        raise ConfigError(f"unknown trainer {trainer!r}; choose one of {', '.join(TRAINER_SECTIONS)}")


@dataclass(frozen=True)
class Run(Generic[S]):
    """One run: the whole `config`, the `trainer` it trains and that trainer's `section`; for MARLHF, `rl`: the run
    its RL algorithm is built with."""

    config: Config
    trainer: str
    section: S
    rl: Optional["Run"] = None

    @classmethod
    def of(cls, config: Config, trainer: str) -> "Run":
        """Return the run of `trainer` (a name of TRAINER_SECTIONS) on `config`; ConfigError naming the choices for
        an unknown name."""
        check_trainer(trainer)
        section = config.trainer(trainer)
        rl = _rl_run(config, trainer, section) if isinstance(section, MARLHFSection) else None
        return cls(config, trainer, section, rl)


def _rl_run(config: Config, trainer: str, marlhf: MARLHFSection) -> Run:
    """Return the run MARLHF's `rl_algorithm` is built with. MAGRPO reads the MARLHF section itself (it holds every
    MAGRPO key); mareinforce / maremax / marloo read it with advantage_mode raw / max / rloo. IAC and MAAC read
    their own section, with the keys every trainer shares (learning rate, max_new_tokens, num_turns, ...) taken
    from MARLHF's. MARLHF_ITER's `num_iterations` counts its refresh iterations, not MAGRPO's passes (TRL's name,
    one key): its MAGRPO takes one pass."""
    name = marlhf.rl_algorithm
    if name in MAGRPO_ADVANTAGE_MODES:
        mode = MAGRPO_ADVANTAGE_MODES[name]
        section = marlhf if mode is None else dataclasses.replace(marlhf, advantage_mode=mode)
        if isinstance(marlhf, IterativeFields):
            section = dataclasses.replace(section, num_iterations=1)
        return Run(config, trainer, section)
    shared = {f.name: getattr(marlhf, f.name) for f in dataclasses.fields(TrainerSection)}
    return Run(config, name, dataclasses.replace(config.trainer(name), **shared))


def check_sections_read(run: Run, data: Mapping[str, Any], path: str | Path, overrides: list[str], reader: str,
                        use: Callable[[str], str]) -> None:
    """Raise ConfigError when the config file `path` (read as `data`) or an override gives `run` a trainer section it
    does not read, which would be dropped without a word: a file with other trainers' sections and none of `run`'s
    (`train_grpo.py --config configs/magrpo_che_cpu.yaml` would train with GRPO's defaults), or an override of
    another trainer's key. `reader`: this command; `use(trainer)`: the command that reads `trainer`'s section. A file
    holding several trainers' sections besides `run`'s own (configs shared by scripts) passes."""
    read = run.config.sections_read_by(run.trainer)
    present = [name for name in TRAINER_SECTIONS if name in data]
    if present and not set(present) & set(read):
        readers = [name for name in present if name not in helper_sections(data)] or present
        raise ConfigError(f"config file {str(path)!r} has no {run.trainer} section, only {', '.join(present)}: "
                          f"{reader} would ignore it and run with {run.trainer}'s defaults; use "
                          f"{use(readers[0])}, or give the file a {run.trainer}: section")
    _check_not_a_helper_section(run.trainer, data, path, reader, use)
    check_override_sections(overrides, read, {name: use(name) for name in TRAINER_SECTIONS}, reader)
    _check_shared_keys_of_rl_section(run, data, overrides)


def _check_shared_keys_of_rl_section(run: Run, data: Mapping[str, Any], overrides: list[str]) -> None:
    """Raise ConfigError when MARLHF's rl_algorithm section (iac, maac) is given a key every trainer shares with
    another value than MARLHF's own: the RL algorithm trains with MARLHF's (`_rl_run`). A file's value that is the
    section's default passes (a run's config.yaml of an older version held every key)."""
    if run.rl is None or run.rl.trainer == run.trainer:
        return
    name, section = run.rl.trainer, run.config.trainer(run.rl.trainer)
    aliases = field_aliases(type(section))
    overridden = set()
    for text in overrides:
        head, _, key = text.split("=", 1)[0].strip().partition(".")
        if head == name:
            overridden.add(aliases.get(key, key))
    in_file = data.get(name) if isinstance(data.get(name), Mapping) else {}
    given_keys = {aliases.get(key, key) for key in in_file} | overridden
    values, used, defaults = (dataclasses.asdict(s) for s in (section, run.section, type(section)()))
    for key in [f.name for f in dataclasses.fields(TrainerSection) if f.name in given_keys]:
        given = values[key]
        if given == used[key] or (key not in overridden and given == defaults[key]):
            continue
        raise ConfigError(f"{name}.{key}={show(given)}: MARLHF with rl_algorithm {name} trains with {run.trainer}'s "
                          f"value of every key all trainers share ({run.trainer}.{key}={show(used[key])}); set "
                          f"{run.trainer}.{key} instead ({name}: gives only {name}'s own keys, such as critic_type)")


def helper_sections(data: Mapping[str, Any]) -> set[str]:
    """Return the trainer sections of a config file's mapping `data` that a MARLHF section of the file reads as its
    rl_algorithm's (IAC's or MAAC's own keys, such as critic_type, beside a marlhf: section that holds the shared
    ones): the one a MARLHF section names (a MARLHF run's config.yaml), and those that set none of the keys every
    trainer has (max_steps, learning_rate, num_turns, ...)."""
    marlhf = [data[name] for name, cls in TRAINER_SECTIONS.items() if issubclass(cls, MARLHFSection) and name in data]
    if not marlhf:
        return set()
    named = {section.get("rl_algorithm") for section in marlhf if isinstance(section, Mapping)}
    shared = {f.name for f in dataclasses.fields(TrainerSection)}
    return {name for name in set(RL_TRAINERS.values()) - {"magrpo"}
            if isinstance(data.get(name), Mapping) and (name in named or not shared & set(data[name]))}


def _check_not_a_helper_section(trainer: str, data: Mapping[str, Any], path: str | Path, reader: str,
                                use: Callable[[str], str]) -> None:
    """Raise ConfigError when the file's `trainer` section is one of its helper_sections: `trainer`'s script would
    drop the MARLHF section (and run with `trainer`'s defaults for every shared key the section lacks)."""
    if trainer in helper_sections(data):
        marlhf = next(name for name, cls in TRAINER_SECTIONS.items() if issubclass(cls, MARLHFSection) and name in data)
        raise ConfigError(f"config file {str(path)!r}: its {trainer} section is what {marlhf}'s rl_algorithm: "
                          f"{trainer} reads besides {marlhf}'s own keys (max_steps, learning_rate, num_turns, ...): "
                          f"{reader} would drop the {marlhf} section; use {use(marlhf)} --override "
                          f"{marlhf}.rl_algorithm={trainer}, or (for {trainer} alone) a file without the {marlhf} "
                          f"section")
