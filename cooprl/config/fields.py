"""The typed-field machinery: `option()` (a dataclass field with a doc, choices, a range, upstream aliases),
coercion of YAML values to the field types, bounds, did-you-mean errors, and `build_section`."""

from __future__ import annotations

import dataclasses
import difflib
import math
import reprlib
import types
import typing
from dataclasses import field
from typing import Any, Mapping, Union

from cooprl.errors import UserError


class ConfigError(UserError, ValueError):
    """A user error in a config file or an override; the message is meant to be shown as is."""


_short = reprlib.Repr()
_short.maxstring, _short.maxother, _short.maxlong = 60, 60, 40
_short.maxlist = _short.maxtuple = _short.maxdict = _short.maxset = 4
_short.maxlevel = 2


def show(value: Any) -> str:
    """Return a short repr of `value` for an error message (long strings and big or deep containers are cut)."""
    return _short.repr(value)


def option(default: Any, doc: str, *, choices: tuple | None = None, min: float | None = None,
           max: float | None = None, aliases: tuple[str, ...] = (), null_is_default: bool = False) -> Any:
    """Return a dataclass field with a default, a one-line doc and optional allowed values or range.

    `aliases`: other names the key is read under (upstream's names, e.g. agent_learning_rate for learning_rate);
    the config keeps and prints ours. `null_is_default`: a section field where `null` means "all defaults"
    (`critic_model: null`)."""
    meta = {"doc": doc, "choices": choices, "min": min, "max": max, "aliases": tuple(aliases),
            "null_is_default": null_is_default}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    if dataclasses.is_dataclass(default):
        return field(default_factory=lambda: dataclasses.replace(default), metadata=meta)
    return field(default=default, metadata=meta)


def _describe(tp: Any) -> str:
    if tp is types.NoneType:
        return "null"
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(a) for a in args)
    if origin is list:
        return f"a list of {_describe(args[0])}"
    if origin is dict:
        return "a mapping"
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, key: str, trainer_sections: Mapping[str, type] | None = None) -> Any:
    """Return `value` converted to type `tp`, or raise ConfigError naming `key`; `trainer_sections`: as in
    `build_section`."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        if value is None and types.NoneType in args:
            return None
        candidates = [a for a in args if a is not types.NoneType]
        sections = [a for a in candidates if dataclasses.is_dataclass(a)]
        if len(candidates) == 1 or (isinstance(value, dict) and len(sections) == 1):
            # Optional[X], or a mapping for the one section of str-or-section: let its own, more precise error through
            return _coerce(value, sections[0] if len(candidates) > 1 else candidates[0], key, trainer_sections)
        for arg in candidates:
            try:
                return _coerce(value, arg, key, trainer_sections)
            except ConfigError:
                continue
        raise ConfigError(f"{key}: expected {_describe(tp)}, got {show(value)}")
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping of {tp.__name__} keys, got {show(value)}")
        return build_section(tp, value, key, trainer_sections)
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected {_describe(tp)}, got {show(value)}")
        return [_coerce(v, args[0], f"{key}[{i}]", trainer_sections) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {show(value)}")
        if len(args) != 2:
            return dict(value)
        return {_coerce(k, args[0], f"{key} key"): _coerce(v, args[1], f"{key}.{k}", trainer_sections)
                for k, v in value.items()}
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        number = None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = value
        elif isinstance(value, str):  # PyYAML reads 1e-5 (no dot) as a string
            try:
                number = float(value)
            except ValueError:
                pass
        if number is not None:
            try:
                number = float(number)
            except OverflowError:  # an int too large for a float
                number = math.inf
            if not math.isfinite(number):  # .nan, .inf, 'nan', 1e999: every float field needs a real number
                raise ConfigError(f"{key}: expected a finite number, got {show(value)}")
            return number
    elif tp is str:
        if isinstance(value, str):
            return value
    raise ConfigError(f"{key}: expected {_describe(tp)}, got {show(value)}")


def _check_bounds(value: Any, meta: Any, key: str) -> None:
    choices = meta.get("choices")
    if choices is not None and value not in choices:
        allowed = ", ".join("null" if c is None else str(c) for c in choices)
        raise ConfigError(f"{key}: {show(value)} is not allowed; choose one of: {allowed}")
    lo, hi = meta.get("min"), meta.get("max")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            bounds = f"[{'-inf' if lo is None else lo}, {'inf' if hi is None else hi}]"
            raise ConfigError(f"{key}: {show(value)} is out of range; expected a value in {bounds}")


def unknown_key_error(key: str, known: list[str], prefix: str,
                      trainer_sections: Mapping[str, type] | None = None) -> ConfigError:
    """Return a ConfigError for an unknown key with the nearest valid keys as suggestions; when none is near and
    `prefix` is a trainer of `trainer_sections` (trainer name -> its section's dataclass), the error names the
    trainers whose sections have `key`."""
    full = f"{prefix}.{key}" if prefix else key
    if len(full) > 100:
        full = show(full)
    near = difflib.get_close_matches(key, known, n=2, cutoff=0.75)
    hint = " or ".join(f"{prefix + '.' if prefix else ''}{n}" for n in near)
    if hint:
        return ConfigError(f"{full}: unknown key; did you mean {hint}?")
    # a key of another trainer (e.g. madpo.comparator_policy, which only the iterative trainers have)
    trainer_sections = trainer_sections or {}
    owners = [name for name, cls in trainer_sections.items()
              if prefix in trainer_sections and key in {f.name for f in dataclasses.fields(cls)}]
    if owners:
        return ConfigError(f"{full}: unknown key; {prefix} has no {key}, these trainers do: {', '.join(owners)}")
    return ConfigError(f"{full}: unknown key; valid keys here: {', '.join(known)}")


def build_section(cls: type, data: dict[str, Any], prefix: str = "",
                  trainer_sections: Mapping[str, type] | None = None) -> Any:
    """Return an instance of dataclass `cls` built from `data`, every key and value checked. `trainer_sections`
    (trainer name -> its section's dataclass; the loader passes TRAINER_SECTIONS): an unknown key of a trainer's
    section below `cls` that other trainers have is named with them (`unknown_key_error`)."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if not f.metadata.get("task")}
    data = resolve_aliases(cls, data, prefix)
    kwargs = {}
    for key, value in data.items():
        full = f"{prefix}.{key}" if prefix else str(key)
        if key not in fields:
            raise unknown_key_error(str(key), list(fields), prefix, trainer_sections)
        if value is None and fields[key].metadata.get("null_is_default"):
            continue  # `critic_model: null`: the section with its defaults
        converted = _coerce(value, hints[key], full, trainer_sections)
        _check_bounds(converted, fields[key].metadata, full)
        kwargs[key] = converted
    return cls(**kwargs)


def field_aliases(cls: type) -> dict[str, str]:
    """Return {alias: field name} of dataclass `cls` (the upstream names its fields are also read under)."""
    return {alias: f.name for f in dataclasses.fields(cls) for alias in f.metadata.get("aliases", ())}


def resolve_aliases(cls: type, data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Return `data` with every alias key renamed to its field; ConfigError when an alias and the field (or two
    aliases of one field) are both given with different values."""
    aliases = field_aliases(cls)
    if not aliases or not any(key in aliases for key in data):
        return data
    hints = typing.get_type_hints(cls)

    def same(a: Any, b: Any, name: str) -> bool:
        try:  # compare the values as the field reads them (2e-5 and 2.0e-05 are one learning rate)
            return _coerce(a, hints[name], name) == _coerce(b, hints[name], name)
        except ConfigError:
            return a == b

    resolved: dict[str, Any] = {}
    given_as: dict[str, str] = {}
    for key, value in data.items():
        name = aliases.get(key, key)
        if name in resolved and not same(resolved[name], value, name):
            first, second = (f"{prefix}.{k}" if prefix else k for k in (given_as[name], key))
            raise ConfigError(f"{second}: same key as {first} (upstream's name for {name}), given with another value "
                              f"({show(value)} vs {show(resolved[name])}); give one of them")
        resolved.setdefault(name, value)
        given_as.setdefault(name, key)
    return resolved


def field_doc(f: Any) -> str:
    """Return the doc of dataclass field `f`, with the upstream names it is also read under."""
    doc = f.metadata.get("doc", "")
    aliases = f.metadata.get("aliases", ())
    return doc + (f" (also read as upstream's {', '.join(aliases)})" if aliases else "")
