"""Atomic checkpoints that resume bit-for-bit: weights (or adapters), optimizers, RNG states, position.

A checkpoint is a folder `checkpoint-<step>/` holding `agent_<i>/` (HF `save_pretrained` output, LoRA
adapters only when peft wraps the model; a value model adds its head), `trainer_state.pt` (optimizer states, RNG
states, counters, anything else the trainer passes), under data-parallel training `rank_<r>.pt` per process (what
differs between them: buffers, counters, a sharded optimizer's shard; written as rank 0 receives them one at a time)
and `done` (written last); a shared policy's (agent_model.shared_policy) holds its one model as `agent_0/` and
`shared_policy.json`, the number of agents it plays (a run's final/ models too). It is written under a temporary
name and renamed, so a crash mid-save leaves the previous checkpoints intact and never a half-written one.

Loading never runs code from a checkpoint: `trainer_state.pt` is read with `torch.load(weights_only=True)`, which
builds tensors and plain containers only. What a trainer's state holds beyond that is converted to plain data on
save (`to_plain`) and back on load (`from_plain`): numpy arrays and scalars become tagged bytes, dataclasses
become tagged field dicts, and only the dataclasses of `state_dataclasses()` are rebuilt. A checkpoint whose
files are missing, truncated or garbage raises `CheckpointError` ("checkpoint X is damaged: ..."); resuming
from `latest` (or from a checkpoints folder) skips damaged checkpoints with a warning and takes the newest
undamaged one.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import logging
import os
import pickle
import random
import re
import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import torch

from cooprl.errors import UserError
from cooprl.models.loading import (HEAD_FILE, ModelError, is_adapter_folder, load_agent_weights_from_folder,
                                   save_pretrained_on_this_rank, saved_models)
from cooprl.samples import BUFFER_RECORDS, CriticSample, NodeGroup, Step, TrainSample

log = logging.getLogger(__name__)

STATE_FILE = "trainer_state.pt"
SHARED_POLICY_FILE = "shared_policy.json"   # {"agents": N}: agent_0/ is the one model all N agents played
_TAG = "__cooprl_plain__"          # marks a dict that stands for a non-plain value
_NUMPY_KINDS = "biufc"             # bool, ints, floats, complex: numpy dtypes a state may hold
_MAX_SAFETENSORS_HEADER = 100 << 20


class CheckpointError(UserError, RuntimeError):
    """A checkpoint that is damaged (missing, truncated or garbage files) or does not fit the run."""


def damaged(checkpoint: Path, what: str) -> CheckpointError:
    """Return the error for a damaged checkpoint: "checkpoint X is damaged: what"."""
    return CheckpointError(f"checkpoint {checkpoint} is damaged: {what}")


# ------------------------------------------------------------------------------------------------ plain data
def _class_name(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


# The dataclasses a trainer's state may hold (its rollout buffer), by the name a checkpoint stores
# (`module:qualname`): only these are saved and rebuilt, the registry being these class objects, never a name
# looked up in a file. Checkpoints written before the records moved to cooprl.samples name them by their former
# modules; those names still rebuild the same classes, so an older run resumes.
STATE_DATACLASSES = {_class_name(cls): cls for cls in BUFFER_RECORDS}
_FORMER_NAMES = {"cooprl.policy_update:TrainSample": TrainSample, "cooprl.trainers.magrpo:NodeGroup": NodeGroup,
                 "cooprl.trainers.actor_critic:Step": Step, "cooprl.trainers.actor_critic:CriticSample": CriticSample}


def state_dataclasses() -> dict[str, type]:
    """Return the dataclasses a trainer's state may hold, by the name a checkpoint stores (`module:qualname`)."""
    return dict(STATE_DATACLASSES)


def to_plain(value: Any, where: str = "state") -> Any:
    """Return `value` as data `torch.load(weights_only=True)` reads back: tensors, numbers, strings, bytes, None
    and lists/tuples/dicts/sets of them; numpy values and the dataclasses of `state_dataclasses()` as tagged dicts.
    TypeError (naming `where`) for anything else, so an unsupported state fails at save, not at resume."""
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes, torch.Tensor, torch.dtype,
                                           torch.device, torch.Size)):
        return value
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in _NUMPY_KINDS:
            raise TypeError(f"{where}: numpy array of dtype {value.dtype} cannot be saved as plain data")
        return {_TAG: "ndarray", "dtype": value.dtype.str, "shape": list(value.shape),
                "data": np.ascontiguousarray(value).tobytes()}
    if isinstance(value, np.generic):
        if value.dtype.kind not in _NUMPY_KINDS:
            raise TypeError(f"{where}: numpy scalar of dtype {value.dtype} cannot be saved as plain data")
        return {_TAG: "numpy", "dtype": value.dtype.str, "data": value.tobytes()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        name = _class_name(type(value))
        if state_dataclasses().get(name) is not type(value):
            raise TypeError(f"{where}: dataclass {name} is not one of cooprl.checkpoint.state_dataclasses()")
        fields = {f.name: to_plain(getattr(value, f.name), f"{where}.{f.name}") for f in dataclasses.fields(value)}
        return {_TAG: "dataclass", "class": name, "fields": fields}
    if isinstance(value, dict):
        for key in value:
            if not (key is None or isinstance(key, (bool, int, float, str))):
                raise TypeError(f"{where}: dict key {key!r} is not a number or a string")
        items = {key: to_plain(v, f"{where}[{key!r}]") for key, v in value.items()}
        return {_TAG: "dict", "items": list(items.items())} if _TAG in items else items
    if isinstance(value, list):
        return [to_plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, tuple) and type(value) is tuple:
        return tuple(to_plain(v, f"{where}[{i}]") for i, v in enumerate(value))
    if isinstance(value, (set, frozenset)):
        return {_TAG: "frozenset" if isinstance(value, frozenset) else "set",
                "items": [to_plain(v, f"{where}{{}}") for v in value]}
    raise TypeError(f"{where}: {type(value).__name__} cannot be saved as plain data")


def _dataclass_type(name: Any) -> type:
    cls = (STATE_DATACLASSES.get(name) or _FORMER_NAMES.get(name)) if isinstance(name, str) else None
    if cls is None:   # never import or build anything a file names, only the listed classes
        raise ValueError(f"unknown class {str(name)[:80]!r}")
    return cls


def from_plain(value: Any) -> Any:
    """Return the value `to_plain` converted; ValueError for a tag or class it does not know."""
    if isinstance(value, list):
        return [from_plain(v) for v in value]
    if isinstance(value, tuple) and type(value) is tuple:
        return tuple(from_plain(v) for v in value)
    if isinstance(value, set):
        return {from_plain(v) for v in value}
    if not isinstance(value, dict):
        return value
    if _TAG not in value:
        return {key: from_plain(v) for key, v in value.items()}
    kind = value[_TAG]
    if kind == "dict":
        return {key: from_plain(v) for key, v in value["items"]}
    if kind in ("set", "frozenset"):
        items = (from_plain(v) for v in value["items"])
        return set(items) if kind == "set" else frozenset(items)
    if kind in ("ndarray", "numpy"):
        dtype = np.dtype(str(value["dtype"]))
        if dtype.kind not in _NUMPY_KINDS:
            raise ValueError(f"numpy dtype {dtype} is not allowed")
        data = value["data"]
        if not isinstance(data, bytes):
            raise ValueError("numpy data is not bytes")
        if kind == "numpy":
            return np.frombuffer(data, dtype=dtype, count=1)[0]
        shape = tuple(int(n) for n in value["shape"])
        return np.frombuffer(data, dtype=dtype).reshape(shape).copy()  # a writable array, like the saved one
    if kind == "dataclass":
        cls = _dataclass_type(value["class"])
        fields = value["fields"]
        # a field added since the checkpoint was written (with a default) takes its default: an older run resumes
        defaults = {f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()
                    for f in dataclasses.fields(cls)
                    if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING}
        expected = {f.name for f in dataclasses.fields(cls)}
        if not isinstance(fields, dict) or not set(fields) <= expected or not expected - set(defaults) <= set(fields):
            raise ValueError(f"fields of {value['class']} do not match: {sorted(map(str, fields))[:8]}")
        obj = object.__new__(cls)  # like unpickling: no __init__ or __post_init__ runs
        for name, v in {**defaults, **{name: from_plain(v) for name, v in fields.items()}}.items():
            object.__setattr__(obj, name, v)
        return obj
    raise ValueError(f"unknown tag {str(kind)[:40]!r}")


# ------------------------------------------------------------------------------------------------ RNG states
def rng_state() -> dict[str, Any]:
    """Return the state of every random generator the training uses."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore the generators saved by `rng_state`."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(directory: Path, step: int, models: list[Any], state: dict[str, Any],
                    weights: Iterable[dict[str, Any] | None] = (), rank_states: Iterable[dict[str, Any]] = (),
                    shared_agents: int = 0) -> Path:
    """Write checkpoint-<step> atomically under `directory` and return its path: `weights` yields, model by model, a
    whole state dict (a sharded model's, gathered, one at a time) or None (it saves its own); `rank_states` each
    data-parallel process's own state in rank order (`rank_<r>.pt`); `shared_agents` the agents `models[0]` plays
    under a shared policy (0: a model each)."""
    from safetensors import SafetensorError
    final = directory / f"checkpoint-{step}"
    needed = expected_size(directory, models)
    tmp = None
    try:
        directory.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(directory).free
        if free < needed:   # refused before writing: a save cut off by a full disk can take the disk's last bytes
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        tmp = Path(tempfile.mkdtemp(prefix=f".checkpoint-{step}-", dir=directory))
        whole = iter(weights)
        for i, model in enumerate(models):
            save_model(model, tmp / f"agent_{i}", next(whole, None))
        mark_shared_policy(tmp, shared_agents)
        torch.save(to_plain({**state, "rng": rng_state(), "step": step}), tmp / STATE_FILE)
        for rank, rank_state in enumerate(rank_states):
            torch.save(to_plain(rank_state), tmp / rank_file(rank))
        (tmp / "done").write_text(str(step))
        if final.exists():  # re-saving the same step (e.g. the final save right after an interval save)
            shutil.rmtree(final)
        tmp.rename(final)
    except (OSError, SafetensorError) as err:
        newest = list_checkpoints(directory)
        kept = (f"the newest complete checkpoint, {newest[-1].name}, is kept" if newest else
                "no earlier checkpoint was saved")
        raise save_failed(final, err, needed, kept) from None
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def prune_checkpoints(directory: Path, keep_last: int | None) -> None:
    """Remove all but the newest `keep_last` complete checkpoints under `directory` (None or 0: keep every one)."""
    for old in list_checkpoints(directory)[:-keep_last] if keep_last else []:
        shutil.rmtree(old, ignore_errors=True)


class SaveError(CheckpointError):
    """A checkpoint (or a final model) that could not be written: a full disk, a read-only folder. What was saved
    before stays."""


def save_failed(target: Path, err: BaseException, needed: int, kept: str) -> SaveError:
    """Return the error for `target` that could not be written (`err`): why, how much space the save needed and
    found, and `kept`, what the run still has."""
    free = _free_bytes(target)
    full = (isinstance(err, OSError) and err.errno == errno.ENOSPC) or "No space left" in str(err)
    why = "no space left on the device" if full else " ".join(str(getattr(err, "strerror", None) or err).split())
    found = _size(free) if free is not None else "an unknown amount"
    return SaveError(f"{target} could not be saved: {why} (it needs about {_size(needed)}, {found} free); {kept}")


def _free_bytes(target: Path) -> int | None:
    for folder in (target.parent, *target.parent.parents):
        if folder.is_dir():
            try:
                return shutil.disk_usage(folder).free
            except OSError:
                return None
    return None


def _size(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.0f} KiB"


def folder_size(folder: Path) -> int:
    """Return the bytes of the files under `folder`."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def expected_size(directory: Path, models: list[Any]) -> int:
    """Return the bytes a new checkpoint under `directory` is expected to take: the newest one's size, or, for the
    first, the trained weights and their two AdamW moments (float32): what is saved whatever else the state holds."""
    found = list_checkpoints(directory)
    if found:
        return folder_size(found[-1])
    trained = [p for m in models if hasattr(m, "parameters") for p in m.parameters() if p.requires_grad]
    return sum(p.numel() * (p.element_size() + 8) for p in trained)


def save_model(model: Any, folder: Path, weights: dict[str, Any] | None = None) -> None:
    """Write `model` with `save_pretrained` into `folder`: its own weights, or `weights` (a sharded model's whole
    state dict, see cooprl.parallel.fsdp.full_state_dict; LoRA keeps only its adapters of it). The caller picks the
    process that saves (rank 0 of a data-parallel run: every checkpoint, final model and policy snapshot), and that
    process writes, whatever transformers' own rule; CheckpointError when no weights were written."""
    if weights is not None:
        # tied weights (an LM head that is the embedding) are one tensor: saved once, as save_pretrained does
        tied = getattr(model, "_tied_weights_keys", None) or {}
        if getattr(getattr(model, "config", None), "tie_word_embeddings", False):
            weights = {k: v for k, v in weights.items() if k not in tied}
        save_pretrained_on_this_rank(model, folder, state_dict=weights)
    else:
        save_pretrained_on_this_rank(model, folder)
    if not any(Path(folder).glob("*.safetensors")):
        raise CheckpointError(f"saving {type(model).__name__} into {folder} wrote no weights")


def list_checkpoints(directory: Path) -> list[Path]:
    """Return the checkpoints under `directory` that have their `done` marker, oldest first (not checked
    further: see `check_checkpoint`)."""
    if not directory.is_dir():
        return []
    found = [p for p in directory.glob("checkpoint-*")
             if p.name.rsplit("-", 1)[1].isdigit() and (p / "done").is_file()]
    return sorted(found, key=lambda p: int(p.name.rsplit("-", 1)[1]))


def find_checkpoint(spec: str, default_dir: Path) -> Path:
    """Return the checkpoint folder named by `spec`.

    'latest' is the newest undamaged checkpoint under `default_dir`, and a folder of checkpoints its newest
    undamaged one: damaged ones are skipped with a warning. A checkpoint folder named exactly is returned as is
    (loading it raises CheckpointError when it is damaged). FileNotFoundError when there is no checkpoint at all (its
    message names the folder, not an option: the caller says which option named it).
    """
    if spec == "latest":
        found = list_checkpoints(default_dir)
        if not found:
            raise FileNotFoundError(f"no complete checkpoint under {default_dir}")
        return _newest_undamaged(found)
    path = Path(spec)
    if (path / "done").is_file():
        return path
    found = list_checkpoints(path)  # a checkpoint_dir was given: take its newest
    if found:
        return _newest_undamaged(found)
    raise FileNotFoundError(f"{spec}: neither a complete checkpoint nor a folder holding one")


def find_named_checkpoint(spec: str) -> Path:
    """Return the checkpoint folder an option such as `--checkpoint` names: a checkpoint folder, or a checkpoints
    folder or a run folder (that holds checkpoints/): its newest undamaged checkpoint. FileNotFoundError as
    `find_checkpoint` raises it."""
    if (Path(spec) / "checkpoints").is_dir():   # a run folder
        spec = str(Path(spec) / "checkpoints")
    return find_checkpoint(spec, Path(spec))


def _newest_undamaged(found: list[Path]) -> Path:
    problems = []
    for path in reversed(found):
        try:
            check_checkpoint(path)
        except CheckpointError as err:
            log.warning("%s; falling back to an older checkpoint", err)
            problems.append(str(err))
            continue
        if problems:
            log.warning("resuming from %s, the newest undamaged checkpoint", path)
        return path
    raise CheckpointError(f"every checkpoint under {found[0].parent} is damaged: {'; '.join(problems)}")


def check_checkpoint(checkpoint: Path) -> None:
    """Raise CheckpointError when `checkpoint`'s files do not load: its trainer state is read (tensor data
    memory-mapped, not read) and every agent's safetensors header and length are checked."""
    state = _read_state(checkpoint, mmap=True)
    world = state.get("world_size", 1)
    if "ranks" not in state and isinstance(world, int) and world > 1:   # a data-parallel run's per-process files
        for rank in range(world):
            _read_plain(checkpoint, rank_file(rank), mmap=True)
    agents = sorted(p for p in checkpoint.glob("agent_*") if p.name[6:].isdigit())
    if not agents:
        raise damaged(checkpoint, "no agent_<i>/ folder")
    for i in range(len(agents)):
        check_agent_folder(checkpoint, i)


def rank_file(rank: int) -> str:
    """Return the name of data-parallel process `rank`'s own state file in a checkpoint."""
    return f"rank_{rank}.pt"


def load_rank_state(checkpoint: Path, state: dict[str, Any], rank: int) -> dict[str, Any]:
    """Return process `rank`'s own state saved in `checkpoint`, whose trainer state `state` was read already (plain
    data only); CheckpointError when its file is missing or damaged. Checkpoints written before these files kept
    every rank's state in the trainer state."""
    if "ranks" in state:
        return state["ranks"][rank]
    return _read_plain(checkpoint, rank_file(rank), mmap=True)


def _read_state(checkpoint: Path, mmap: bool = False) -> dict[str, Any]:
    state = _read_plain(checkpoint, STATE_FILE, mmap)
    for key, kind in (("step", int), ("rng", dict)):
        if not isinstance(state.get(key), kind) or isinstance(state.get(key), bool):
            raise damaged(checkpoint, f"{STATE_FILE} has no valid {key!r}")
    return state


def _read_plain(checkpoint: Path, name: str, mmap: bool = False) -> dict[str, Any]:
    """Return the plain-data dict of file `name` in `checkpoint`; CheckpointError when it is missing, truncated,
    garbage or holds anything but plain data."""
    path = checkpoint / name
    if not path.is_file():
        raise damaged(checkpoint, f"{name} is missing")
    try:
        # into CPU memory: a GPU run's optimizer states load on a machine without its GPUs (evaluate.py on a CPU),
        # and a resume holds no second copy of them on the GPU (load_state_dict moves each to its parameter)
        raw = torch.load(path, weights_only=True, map_location="cpu", mmap=mmap)
    except pickle.UnpicklingError as err:
        # weights_only refuses any global it does not know: a crafted file, or one written by an older cooprl
        found = re.search(r"GLOBAL ([\w.]+)", str(err))
        what = f"it names {found.group(1)}" if found else " ".join(str(err).split())[:120]
        raise damaged(checkpoint, f"{name} holds more than plain data and is refused ({what}; a crafted file, "
                                  "or one written before cooprl saved plain data)") from None
    except (RuntimeError, OSError, EOFError, ValueError, zipfile.BadZipFile, KeyError, IndexError, TypeError) as err:
        raise damaged(checkpoint, f"{name} cannot be read ({type(err).__name__}: "
                                  f"{str(err).splitlines()[0][:200] if str(err) else 'truncated'})") from None
    try:
        state = from_plain(raw)
    except (ValueError, TypeError, KeyError, AttributeError, ImportError, RuntimeError) as err:  # RecursionError too
        raise damaged(checkpoint, f"{name}: {type(err).__name__}: {str(err)[:200]}") from None
    if not isinstance(state, dict):
        raise damaged(checkpoint, f"{name} holds a {type(state).__name__}, expected the trainer state")
    return state


def load_trainer_state(checkpoint: Path) -> dict[str, Any]:
    """Return the trainer state saved in `checkpoint` (RNG states are restored by the caller); plain data only,
    never code. CheckpointError when the file is missing, truncated, garbage or holds anything but plain data.

    Memory-mapped: its tensors are read from the page cache as they are used (private: a write copies the page), so
    the processes of a ddp resume, each reading the same replicated optimizer states (~49 GB for two 3B agents),
    share one copy in host memory instead of holding one each."""
    return _read_state(checkpoint, mmap=True)


def _check_safetensors(checkpoint: Path, path: Path) -> None:
    """Raise CheckpointError unless `path` has a safetensors header whose tensors end exactly at the file's end."""
    name = path.relative_to(checkpoint)
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            head = f.read(8)
            length = int.from_bytes(head, "little") if len(head) == 8 else -1
            if length < 2 or length > min(size - 8, _MAX_SAFETENSORS_HEADER):
                raise damaged(checkpoint, f"{name} is truncated or not a safetensors file")
            header = json.loads(f.read(length))
        ends = [int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"]
    except CheckpointError:
        raise
    except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError) as err:
        raise damaged(checkpoint, f"{name} is not a safetensors file ({type(err).__name__})") from None
    if 8 + length + max(ends, default=0) != size:
        raise damaged(checkpoint, f"{name} is truncated ({size} bytes, its header describes "
                                  f"{8 + length + max(ends, default=0)})")


def check_agent_folder(checkpoint: Path, agent: int) -> Path:
    """Return `checkpoint`'s folder of agent `agent`; CheckpointError when it is missing or a weights file is
    truncated or garbage."""
    folder = checkpoint / f"agent_{agent}"
    if not folder.is_dir():
        raise damaged(checkpoint, f"agent_{agent}/ is missing")
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise damaged(checkpoint, f"agent_{agent}/ holds no .safetensors weights")
    for path in files:
        _check_safetensors(checkpoint, path)
    return folder


def load_team_weights(models: list[Any], checkpoint: Path, shared_agents: int = 0) -> None:
    """Load agent i's saved weights into `models[i]`, for every model; CheckpointError when `checkpoint` holds
    another number of agents (a single agent's checkpoint in a team, or a team's first agent evaluated alone, would
    otherwise be called damaged, or load without a word), or not this run's shared policy (`shared_agents`; 0: none)."""
    saved = shared_policy_agents(checkpoint)
    if saved != shared_agents:
        held, this = (f"a shared policy of {n} agents" if n else "a model per agent" for n in (saved, shared_agents))
        fix = f"; resume or evaluate it with --override agent_model.shared_policy={'true' if saved else 'false'}"
        raise CheckpointError(f"checkpoint {checkpoint} holds {held} (agent_model.shared_policy) and this run has "
                              f"{this}{fix if bool(saved) != bool(shared_agents) else ''}")
    held = len(saved_models(checkpoint))   # the agents, then critics or a reward model, as `models` lists them
    if held != len(models):
        raise CheckpointError(f"checkpoint {checkpoint} holds {held} model(s) (agent_<i>/: agents, then critics), "
                              f"this run has {len(models)}: it is another kind of run's (evaluate it with --run on "
                              "the run that saved it)")
    for i, model in enumerate(models):
        load_agent_weights(model, checkpoint, i)


def mark_shared_policy(folder: Path, shared_agents: int) -> None:
    """Write (with 0: remove) the shared-policy marker of `folder`: the number of agents its agent_0/ played."""
    (folder / SHARED_POLICY_FILE).unlink(missing_ok=True)
    if shared_agents:
        (folder / SHARED_POLICY_FILE).write_text(json.dumps({"agents": shared_agents}), encoding="utf-8")


def shared_policy_agents(folder: Path) -> int:
    """Return the number of agents the one model saved in `folder` played (agent_model.shared_policy), 0 when it
    holds a model per agent; CheckpointError when the marker is damaged."""
    marker = folder / SHARED_POLICY_FILE
    try:
        agents = json.loads(marker.read_text(encoding="utf-8"))["agents"] if marker.is_file() else 0
        if type(agents) is not int or agents < 0:
            raise ValueError(agents)
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise damaged(folder, f"{SHARED_POLICY_FILE} holds no number of agents ({type(err).__name__})") from None
    return agents


def load_agent_weights(model: Any, checkpoint: Path, agent: int) -> None:
    """Load model `agent`'s saved weights (full model, LoRA adapters, or a value model) into `model` in place;
    CheckpointError when the files are missing, truncated or garbage, or do not fit the model."""
    from safetensors import SafetensorError
    folder = check_agent_folder(checkpoint, agent)
    _check_lora_fits(model, checkpoint, agent)
    try:
        if hasattr(model, "load_weights"):  # a ValueModel (critic or reward model) knows its own layout
            model.load_weights(folder)
        else:
            load_agent_weights_from_folder(model, folder)
    except CheckpointError:
        raise
    except FileNotFoundError as err:
        missing = Path(err.filename).name if err.filename else str(err)
        raise damaged(checkpoint, f"agent_{agent}/{missing} is missing") from None
    except (SafetensorError, OSError) as err:
        raise damaged(checkpoint, f"agent_{agent}/: {type(err).__name__}: {str(err)[:200]}") from None
    except (RuntimeError, ValueError, KeyError) as err:  # shapes or names that differ from the model's
        # torch's message names the model on its first line and each mismatch on one line after it
        lines = [line.strip() for line in str(err).splitlines() if line.strip()] or [type(err).__name__]
        first = " ".join(lines[:2]) + (f" (and {len(lines) - 2} more)" if len(lines) > 2 else "")
        first = first if len(first) <= 500 else first[:500] + "..."
        raise CheckpointError(f"checkpoint {checkpoint}: agent_{agent}/ does not match the model ({first}); a "
                              f"checkpoint is loaded into the model its run trained: evaluate it with --run on that "
                              f"run (its config.yaml), or give its agent_model") from None


def _check_lora_fits(model: Any, checkpoint: Path, agent: int) -> None:
    """Raise CheckpointError when agent `agent` of `checkpoint` saved LoRA adapters and `model` has none, or saved
    full weights and `model` is a LoRA model: the config is not the one the run trained with (agent_model.lora)."""
    if hasattr(model, "load_weights"):   # a value model: its own layout
        return
    adapters, lora_model = is_adapter_folder(checkpoint / f"agent_{agent}"), hasattr(model, "peft_config")
    if adapters == lora_model:
        return
    saved, config = (("LoRA adapters", "agent_model.lora=null (full weights)") if adapters else
                     ("full weights (a run without LoRA)", "agent_model.lora set (LoRA adapters)"))
    fix = "agent_model.lora as the run trained" if adapters else "agent_model.lora=null"
    raise CheckpointError(f"checkpoint {checkpoint}: agent_{agent}/ holds {saved}, and this config has {config}; "
                          f"evaluate it with the config of the run that saved it (--run RUN), or --override {fix}")


# ------------------------------------------------------------------------------------------------ agent_model.init_from
def init_source(run: str) -> Path:
    """Return the folder holding the agent_<i>/ folders of `run` (agent_model.init_from): a run folder's final/
    models when it saved them, else its newest undamaged checkpoint; or a checkpoint folder itself. ModelError when
    there is none."""
    path = Path(run).expanduser()
    if not path.is_dir():
        raise ModelError(f"agent_model.init_from: {run!r} is not a folder (give a finished run's folder)")
    if (path / "final" / "agent_0").is_dir():
        return path / "final"
    try:
        spec = path / "checkpoints" if (path / "checkpoints").is_dir() else path
        return find_checkpoint(str(spec), spec)
    except (FileNotFoundError, CheckpointError) as err:
        raise ModelError(f"agent_model.init_from: {run!r} has no final/ models and no usable checkpoint "
                         f"({err})") from None


def lost_init(init_from: str | None, lora: Any, start_models_used: bool = False) -> bool:
    """Return whether agent_model.init_from (`init_from`) names a folder that was deleted, for a run that loads a
    checkpoint next (a resume, an evaluation): it then starts from agent_model.name, the checkpoint holding every
    weight. ModelError when the checkpoint does not: LoRA adapters trained on the deleted weights (`lora` set), or a
    training that compares with its start models (`start_models_used`: a reference KL, MADPO's reference_model)."""
    if not init_from or Path(init_from).expanduser().exists():
        return False
    lacking = ("this LoRA run's checkpoints hold its adapters, not the weights under them" if lora is not None else
               "its reference model (the frozen start models) is those weights" if start_models_used else None)
    if lacking:
        raise ModelError(f"agent_model.init_from: {init_from} was deleted, and {lacking}: restore that folder")
    log.info("agent_model.init_from: %s was deleted; the checkpoint holds every weight", init_from)
    return True


def saved_policies(folder: Path) -> list[int]:
    """Return the indices of the agent_<i>/ folders in `folder` that hold a language model's weights, not a value
    model's: an actor-critic or MARLHF run saves its critics or reward model (a value head file) after its agents.
    (An actor with a value head of its own, use_separate_critic: false, counts as a value model here.)"""
    return [i for i in saved_models(folder) if not (folder / f"agent_{i}" / HEAD_FILE).is_file()]


def init_folders(run: str, num_agents: int) -> list[Path]:
    """Return the saved folder of each of `num_agents` agents in `run` (agent_model.init_from): a run folder's
    final/ models when it saved them, else its newest undamaged checkpoint; or a checkpoint folder itself (a shared
    policy's one model for each agent).
    ModelError naming the problem when there is no such run, it holds another number of agents, or a file is damaged."""
    source = init_source(run)
    saved, policies = saved_models(source), saved_policies(source)
    try:
        shared = num_agents > 1 and shared_policy_agents(source) > 0   # every agent starts from the shared policy
        if not shared and saved != list(range(num_agents)) and policies != list(range(num_agents)):
            others = len(saved) - len(policies)
            held = f"{len(policies)} agent(s)" + (f" and {others} value model(s) (critics)" if others else "")
            raise ModelError(f"agent_model.init_from: {source} holds {held}, this run has {num_agents} agent(s); each "
                             f"agent starts from the saved agent of its index: name a run of {num_agents} agent(s)")
        return [check_agent_folder(source, 0 if shared else i) for i in range(num_agents)]
    except CheckpointError as err:
        raise ModelError(f"agent_model.init_from: {err}") from None
