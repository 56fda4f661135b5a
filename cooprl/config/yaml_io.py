"""Reading YAML that may be hostile: a file that is not UTF-8 text, too big, or whose aliases expand past
MAX_YAML_NODES nodes or nest deeper than MAX_YAML_DEPTH is a ConfigError, never a traceback or a full memory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from cooprl.config.fields import ConfigError

MAX_CONFIG_BYTES = 1 << 20    # a config file is a few KB; a bigger one is not a config
MAX_YAML_NODES = 100_000      # nodes of a document with every alias expanded (the shipped configs: < 1,000)
MAX_YAML_DEPTH = 64           # nesting of a document (the shipped configs: 3)


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that checks each composed document before building it: at most MAX_YAML_NODES nodes with every
    alias expanded, at most MAX_YAML_DEPTH levels, no recursive alias. (PyYAML itself shares aliased nodes, but
    everything after it, validation included, walks the expanded tree: a 500-byte file of nested aliases is
    10^9 elements.)"""

    def compose_document(self) -> Any:
        node = super().compose_document()
        _check_node_graph(node)
        return node


def _children(node: Any) -> list[Any]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _check_node_graph(root: Any) -> None:
    """Raise ConfigError when the node graph under `root`, aliases expanded, is too big, too deep or cyclic."""
    sizes: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded node count, depth)
    open_nodes: set[int] = set()            # the nodes being walked: the current node's ancestors
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if finished:
            open_nodes.discard(key)
            children = [sizes[id(child)] for child in _children(node)]
            size = 1 + sum(c[0] for c in children)
            depth = 1 + max((c[1] for c in children), default=0)
            if size > MAX_YAML_NODES:
                raise ConfigError(f"its aliases expand to more than {MAX_YAML_NODES:,} values (line "
                                  f"{node.start_mark.line + 1}): "
                                  "refused (a config needs a few hundred)")
            if depth > MAX_YAML_DEPTH:
                raise ConfigError(f"nested more than {MAX_YAML_DEPTH} levels deep: refused")
            sizes[key] = (size, depth)
            continue
        if key in sizes:
            continue
        if key in open_nodes:
            raise ConfigError(f"recursive alias (line {node.start_mark.line + 1}): refused")
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in sizes)


def load_yaml_text(text: str) -> Any:
    """Return the data of one YAML document, refusing documents that expand too big or nest too deep
    (ConfigError without the file name) and python-specific tags (yaml.YAMLError)."""
    try:
        return yaml.load(text, Loader=_BoundedLoader)
    except RecursionError:  # PyYAML composes nested collections recursively
        raise ConfigError(f"nested more than {MAX_YAML_DEPTH} levels deep: refused") from None


def yaml_problem(err: yaml.YAMLError) -> str:
    """Return a one-line description of a YAML error, without the snippet of the file PyYAML appends."""
    problem = getattr(err, "problem", None)
    mark = getattr(err, "problem_mark", None)
    if problem is None:
        return " ".join(str(err).split())[:200]
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    context = getattr(err, "context", None)
    return f"{context + ': ' if context else ''}{problem}{where}"


def read_yaml(path: str | Path) -> dict[str, Any]:
    """Return the mapping in a YAML file; ConfigError when it is missing, empty, not UTF-8 YAML, or not a mapping."""
    path = Path(path)
    name = repr(str(path))
    if path.is_dir():
        raise ConfigError(f"config file {name} is a directory, not a YAML file")
    if not path.is_file():
        raise ConfigError(f"config file {name} not found")
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as err:
        raise ConfigError(f"config file {name} cannot be read: {err.strerror or err}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"config file {name} is larger than {MAX_CONFIG_BYTES >> 20} MiB: not a config file")
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")) or b"\x00" in raw:
        kind = "UTF-16 or UTF-32 text" if raw.startswith((b"\xff\xfe", b"\xfe\xff")) else "binary data (NUL bytes)"
        raise ConfigError(f"config file {name} is not UTF-8 text (it holds {kind}); save it as UTF-8 YAML")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise ConfigError(f"config file {name} is not UTF-8 text (byte 0x{raw[err.start]:02x} at offset {err.start}): "
                          "not a YAML config") from None
    try:
        data = load_yaml_text(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"config file {name} is not valid YAML: {yaml_problem(err)}") from None
    except ConfigError as err:
        raise ConfigError(f"config file {name}: {err}") from None
    if data is None:   # an empty or all-comment file: every key would silently take its default
        raise ConfigError(f"config file {name} is empty (no sections, or only comments): give it its sections "
                          "(docs/config.md), or leave out --config for the script's reference config")
    if not isinstance(data, dict):
        raise ConfigError(f"config file {name}: expected a mapping of sections at the top level")
    return data
