"""Run folders: where a new run writes, that it can write there, and which trainer made a folder.

A new run never shares a folder with an earlier one: when `<output.base_dir>/<run name>` already holds something
(the CPU configs fix `output.run_name`, so `make demo` run twice asks for the same folder), the run takes the first
free `<run name>-2`, `<run name>-3`, ... and says so. A resume (`--resume`, `checkpoint.resume_from_checkpoint`)
continues in its own folder. Every check here runs before any model is loaded.
"""

from __future__ import annotations

import fcntl
import importlib.metadata
import json
import logging
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import yaml

from cooprl.config import (TRAINER_SECTIONS, Config, ConfigError, IterativeFields, TrainerSection, config_from_data,
                           read_yaml, show, trainer_of_data)
from cooprl.errors import UserError

log = logging.getLogger(__name__)

RUN_CONFIG = "config.yaml"   # every run folder's copy of its config (its trainer's sections only)


def is_used(folder: Path) -> bool:
    """Return whether `folder` exists and holds anything (an empty folder is free for a new run)."""
    return folder.is_dir() and any(folder.iterdir())


def fresh_folder(folder: Path) -> Path:
    """Return `folder` when it is free (missing, or an empty folder), else the first free `<folder>-<n>`, n >= 2."""
    candidate, n = folder, 2
    while is_used(candidate) or (candidate.exists() and not candidate.is_dir()):
        candidate, n = folder.with_name(f"{folder.name}-{n}"), n + 1
    return candidate


# made with O_EXCL in a new run's folder when it is chosen: of two commands started at once with the same run name,
# one gets the folder and the other the next free one (they both wrote into one folder, mixing their metrics)
CLAIM = ".claimed"


def claim_fresh_folder(folder: Path) -> Path:
    """Return `fresh_folder(folder)`, created and claimed atomically (its CLAIM file made with O_EXCL): when another
    process claims it first, the next free `<folder>-<n>`. OSError when a folder cannot be created."""
    candidate = fresh_folder(folder)
    while True:
        candidate.mkdir(parents=True, exist_ok=True)
        try:
            os.close(os.open(candidate / CLAIM, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            return candidate
        except FileExistsError:   # claimed by a command started at the same time: the next free one
            n = int(candidate.name.rsplit("-", 1)[1]) + 1 if candidate != folder else 2
            candidate = fresh_folder(folder.with_name(f"{folder.name}-{n}"))


def release_unused(folder: Path) -> None:
    """Give back a claimed folder that a run left before writing anything in it (a model that would not load,
    Ctrl-C at start): remove its CLAIM and the folder when that leaves it empty, so that the same command, run
    again, takes the same folder."""
    unlock_run_folder(folder)
    try:
        names = {p.name for p in folder.iterdir()}
        if CLAIM in names and names <= {CLAIM, LOCK}:
            for name in names:
                (folder / name).unlink()
            folder.rmdir()
    except OSError:
        pass   # written to meanwhile, or gone: nothing to give back


# a run folder's writer lock: an flock on this file, held by the process that trains into the folder until the run
# ends, which removes the file (the kernel frees the lock when its process dies, kill -9 included: the file a killed
# process leaves is free to take)
LOCK = ".lock"
_held: dict[Path, int] = {}   # run folder -> the open file of its lock


def lock_run_folder(folder: Path) -> Path:
    """Return `folder`, locked for this process (see LOCK); ConfigError naming the process that holds the lock (a
    second --resume of a running run would train every step twice into one metrics.jsonl)."""
    key = folder.resolve()
    if key in _held:
        return folder
    while True:
        fd = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:   # held (BlockingIOError), or a file system without locks: refused either way
            holder = os.read(fd, 300).decode("utf-8", "replace").strip() or "another process"
            os.close(fd)
            raise ConfigError(f"{folder} is being trained by {holder}: a run folder has one writer at a time; wait "
                              f"for that run to end (or stop it), then --resume {folder}") from None
        if _same_file(fd, folder / LOCK):
            break
        os.close(fd)   # its holder removed it as we opened it: lock the one there now
    os.ftruncate(fd, 0)
    os.write(fd, f"process {os.getpid()} on {socket.gethostname()} (since {time.strftime('%Y-%m-%d %H:%M:%S')})"
             .encode())
    _held[key] = fd
    return folder


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.fstat(fd).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        return False


def unlock_run_folder(folder: Path) -> None:
    """Give up this process's lock of `folder`, removing its LOCK file (nothing when it holds none)."""
    fd = _held.pop(folder.resolve(), None)
    if fd is not None:
        (folder / LOCK).unlink(missing_ok=True)   # before closing: no one locks a file that is going away
        os.close(fd)   # closing the file frees its flock


def remove_unfinished_saves(checkpoint_dir: Path) -> None:
    """Remove the `.checkpoint-<step>-*` folders a save left when its process was killed mid-save (SIGKILL, power
    loss): a save writes under that name and renames it when complete. Called with the run folder locked."""
    leftovers = sorted(checkpoint_dir.glob(".checkpoint-*")) if checkpoint_dir.is_dir() else []
    for leftover in leftovers:
        shutil.rmtree(leftover, ignore_errors=True)
    if leftovers:
        log.warning("removed %d unfinished checkpoint save(s) a killed process left in %s (%s)", len(leftovers),
                    checkpoint_dir, ", ".join(p.name for p in leftovers[:3]))


VERSIONS = "versions.jsonl"   # which cooprl made a run folder: one line per start and resume


def code_version() -> dict[str, Any]:
    """Return the cooprl version running, the git commit of its checkout (None outside one) and whether that
    checkout has uncommitted changes to tracked files (`dirty`)."""
    try:
        version = importlib.metadata.version("cooprl")
    except importlib.metadata.PackageNotFoundError:
        version = None
    root = Path(__file__).resolve().parents[1]

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"cooprl": version, "commit": commit, "dirty": bool(status) if status is not None else None}


def record_version(run_dir: Path, resumed_at: int | None) -> None:
    """Append to `run_dir`'s VERSIONS the code that starts (`resumed_at` None) or resumes it (at step `resumed_at`):
    code_version() and the time."""
    line = {**code_version(), "started": "new" if resumed_at is None else f"resumed at step {resumed_at}",
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    with (run_dir / VERSIONS).open("a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


def numbered_folders(folder: Path) -> list[Path]:
    """Return `folder` and its numbered siblings `<folder>-<n>` (what `fresh_folder` hands out) that exist."""
    siblings = folder.parent.glob(f"{folder.name}-*") if folder.parent.is_dir() else []
    numbered = [p for p in siblings if p.name[len(folder.name) + 1:].isdigit()]
    return [p for p in [folder, *numbered] if p.is_dir()]


def check_writable(path: Path, key: str) -> None:
    """Raise ConfigError naming `key` unless `path` is a folder this process can write, or can be created as one (its
    nearest existing ancestor is a writable folder)."""
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"{key}: {existing} is a file, not a folder (the run would write {path}); choose another "
                          f"{key}")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"{key}: {existing} is read-only (the run would write {path}); choose another {key}")


def check_output(config: Config, trainer: str = "", section: TrainerSection | None = None) -> None:
    """Raise ConfigError naming the key when a folder the run writes (output.base_dir, its run folder,
    checkpoint.checkpoint_dir, output.save_path, wandb.dir, the policy_checkpoint_dir of `trainer`'s `section`) is a
    file, lies under a file, or cannot be written."""
    base = Path(config.output.base_dir)
    check_writable(base, "output.base_dir")   # first: a run_name is not what makes a base_dir under a file wrong
    if config.output.run_name:
        check_writable(base / config.output.run_name, "output.run_name")
    if config.checkpoint.checkpoint_dir:
        check_writable(Path(config.checkpoint.checkpoint_dir), "checkpoint.checkpoint_dir")
    if config.output.save_path:
        check_writable(Path(config.output.save_path), "output.save_path")
    if config.wandb.dir and config.wandb.mode != "disabled":   # W&B would write elsewhere without a word
        check_writable(Path(config.wandb.dir), "wandb.dir")
    snapshots = policy_snapshot_dir(section)
    if snapshots:
        check_writable(snapshots, f"{trainer}.policy_checkpoint_dir")


def policy_snapshot_dir(section: TrainerSection | None) -> Path | None:
    """Return the folder where a run of `section` saves its policy snapshots (policy_checkpoint_dir of the iterative
    preference trainers), or None."""
    if not isinstance(section, IterativeFields) or not section.policy_checkpoint_dir:
        return None
    return Path(section.policy_checkpoint_dir)


def policy_snapshots(folder: Path | None) -> list[Path]:
    """Return the policy snapshots (`initial/`, `iteration_<k>/`) an earlier run saved in `folder`."""
    if folder is None or not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir()
                  if p.is_dir() and (p.name == "initial" or p.name.startswith("iteration_")))


# What a resumed run may change (`--resume RUN --override KEY=...`): how far it trains, how it is evaluated, logged
# and saved, and where it runs. Every other key made the run's checkpoints and its metrics so far: a change would
# mix two runs' settings under a config.yaml that then describes only the second (or fail on the checkpoint once the
# models are loaded: another LoRA rank, another number of agents)
RESUMABLE_KEYS = ("output.", "wandb.", "reward.", "checkpoint.checkpoint_interval", "checkpoint.checkpoint_total_limit",
                  "checkpoint.resume_from_checkpoint", "agent_model.device", "agent_model.generation_backend",
                  "agent_model.vllm_", "agent_model.logprob_chunk_size", "agent_model.gradient_checkpointing",
                  "agent_model.autocast")
RESUMABLE_TRAINER_KEYS = ("max_steps", "num_train_epochs", "num_iterations", "logging_steps", "eval_interval",
                          "eval_at_start", "eval_batch_size", "log_reward_distribution", "parallel_training",
                          "agent_devices", "critic_devices", "comparator_devices", "reward_model_device")


def resumable(key: str) -> bool:
    """Return whether a resumed run may change the config key `key` (dotted, e.g. "magrpo.max_steps")."""
    section, _, name = key.partition(".")
    if section in TRAINER_SECTIONS:
        return name in RESUMABLE_TRAINER_KEYS
    return key.startswith(RESUMABLE_KEYS)


def _changes(saved: Any, now: Any, prefix: str = "") -> Iterator[tuple[str, Any, Any]]:
    """Yield (key, saved value, new value) for every leaf where `now` differs from `saved` (keys only one holds, one
    this version no longer reads, are no change)."""
    if isinstance(saved, dict) and isinstance(now, dict):
        for key in [k for k in saved if k in now]:
            yield from _changes(saved[key], now[key], f"{prefix}{key}.")
    elif (isinstance(saved, list) and isinstance(now, list) and len(saved) == len(now)
          and any(isinstance(x, dict) for x in saved + now)):   # `agents:` entries: agents[1].temperature
        for i, (a, b) in enumerate(zip(saved, now, strict=True)):
            yield from _changes(a, b, f"{prefix[:-1]}[{i}].")
    elif saved != now:
        yield prefix[:-1], saved, now


def check_resumed_settings(run_dir: Path, config: Config, trainer: str) -> None:
    """Raise ConfigError when the run in `run_dir` is resumed with `config` changing a setting it was trained with
    (its config.yaml's; see RESUMABLE_KEYS for what may change), naming each change and the way to train with
    them: a new run from this one's models (agent_model.init_from). A key its config.yaml lacks (written by an older
    version) was trained with its default: another value is a change too. Nothing to compare without a config.yaml."""
    path = run_dir / RUN_CONFIG
    if not path.is_file():
        return
    written = read_yaml(path)
    saved = _with_defaults(written, config, trainer)
    now = yaml.safe_load(config.to_yaml(trainer))
    changed = [(k, a, b) for k, a, b in _changes(saved, now) if not resumable(k)]
    if changed:
        said = ", ".join(f"{key} {_shown(written, key, a)} -> {show(b)}" for key, a, b in changed[:4])
        more = f" and {len(changed) - 4} more" if len(changed) > 4 else ""
        raise ConfigError(f"resuming {run_dir}: {said}{more} would change what the run was trained with (a resume "
                          f"may change only how far it trains, its evaluation interval, logging, saving and devices); "
                          f"to train with new settings, start a new run from its models: --config {path} --override "
                          f"agent_model.init_from={run_dir} {changed[0][0].split('[')[0]}=...")


def _with_defaults(written: dict[str, Any], config: Config, trainer: str) -> dict[str, Any]:
    """Return a run's config.yaml mapping `written` with the keys it lacks at their defaults (as `config`'s loader
    reads it); `written` itself when this version cannot read it."""
    try:
        task = type(config.task) if config.task is not None else None
        return yaml.safe_load(config_from_data(written, [], task).to_yaml(trainer))
    except (UserError, TypeError, ValueError):
        return written


def _shown(written: dict[str, Any], key: str, value: Any) -> str:
    """Return `value` of dotted `key` as the change names it: said to be a default when config.yaml lacks the key."""
    node: Any = written
    for part in key.replace("[", ".").replace("]", "").split("."):   # agents[1].temperature: an entry's key
        if isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
            continue
        if not isinstance(node, dict) or part not in node:
            return f"{show(value)} (the default: its config.yaml, of an older version, lacks the key)"
        node = node[part]
    return show(value)


def new_run_folder(config: Config, name: str, trainer: str, section: TrainerSection | None = None) -> Path:
    """Return the folder `trainer`'s run named `name` writes under output.base_dir, created: for a new run a free one
    (`fresh_folder`, claimed: `claim_fresh_folder`; logged when it is not `name`), for a resume
    (checkpoint.resume_from_checkpoint set) its own; a new run from another run's checkpoint (resume_from_checkpoint
    naming a checkpoint of the run folder R) is a new run, held to the settings R was trained with.
    ConfigError when it cannot be created, when a resume changes the settings the run was trained with
    (check_resumed_settings), when the checkpoint to resume is not there, or when a new run's outputs hold an earlier
    run's (check_new_outputs; `section`: the trainer's, for its policy_checkpoint_dir)."""
    asked = Path(config.output.base_dir) / name
    source = resumed_run(config, asked)
    continuing = source == asked.resolve()
    if source is not None:
        check_made_by(source, trainer, lambda maker: f"train_{maker}.py --resume {source}")
        check_resumed_settings(source, config, trainer)
    if not continuing:
        check_new_outputs(config, trainer, section)
    if continuing:
        folder = asked
    else:
        try:
            folder = claim_fresh_folder(asked)
        except OSError as err:
            raise ConfigError(f"output.base_dir: cannot create the run folder under {asked.parent} "
                              f"({err.strerror or err})") from None
    if source is not None and not continuing:
        log.warning("a new run from %s's checkpoint (%s): it writes %s and a W&B run of its own; to continue %s "
                    "itself: --resume %s", source, config.checkpoint.resume_from_checkpoint, folder, source, source)
    elif folder != asked:
        log.warning("%s holds an earlier run: this run writes %s (to continue the earlier one: --resume %s)",
                    asked, folder, asked)
    return create_folder(folder)


def resumed_run(config: Config, asked: Path) -> Path | None:
    """Return the run folder whose checkpoint `config` resumes (checkpoint.resume_from_checkpoint): `asked` itself for
    `latest` or a checkpoint of its own (or of a checkpoint_dir outside any run folder), else the run folder holding
    the checkpoint; None for a new run. ConfigError when there is no such checkpoint (`latest` on a first run)."""
    from cooprl.checkpoint import list_checkpoints   # torch: once a run folder is made, not for the command line
    spec = config.checkpoint.resume_from_checkpoint
    if not spec:
        return None
    if spec == "latest":
        own = Path(config.checkpoint.checkpoint_dir or asked / "checkpoints")
        if not list_checkpoints(own):
            raise ConfigError(f"checkpoint.resume_from_checkpoint: latest, but {own} holds no complete checkpoint "
                              "(a first run has none: drop the key, or name a checkpoint)")
        return asked.resolve()
    path = Path(spec).expanduser()
    if not path.is_dir():
        raise ConfigError(f"checkpoint.resume_from_checkpoint: {spec} is not a folder (give a checkpoint-<step> "
                          "folder, a checkpoints folder, or latest)")
    owner = next((p for p in [path.resolve(), *path.resolve().parents][:3] if (p / RUN_CONFIG).is_file()), None)
    return owner or asked.resolve()


def check_new_outputs(config: Config, trainer: str, section: TrainerSection | None = None) -> None:
    """Raise ConfigError when a new run's checkpoint.checkpoint_dir holds an earlier run's checkpoints (their rotation
    would mix the two runs), its output.save_path an earlier run's final models, or the policy_checkpoint_dir of
    `trainer`'s `section` an earlier run's policy snapshots."""
    from cooprl.checkpoint import list_checkpoints   # torch: once a run folder is made, not for the command line
    shared = config.checkpoint.checkpoint_dir
    if shared and list_checkpoints(Path(shared)):
        raise ConfigError(f"checkpoint.checkpoint_dir: {shared} holds an earlier run's checkpoints; give a new run "
                          "an empty folder, or continue that run with --resume")
    final = config.output.save_path
    if final and config.output.save_final_model and any(Path(final).glob("agent_*")):
        # the new agent_<i>/ would replace the earlier ones and keep the rest (a team's agent_1 beside a new single
        # agent): agent_model.init_from that folder would then start from two runs' agents
        raise ConfigError(f"output.save_path: {final} holds an earlier run's final models; give a new run an empty "
                          "folder (or null: <run dir>/final)")
    snapshots = policy_snapshots(policy_snapshot_dir(section))
    if snapshots:
        # a resumed run keeps the snapshots there (pairs.save_policy_checkpoint): a new one would keep the earlier
        # run's as its own
        raise ConfigError(f"{trainer}.policy_checkpoint_dir: {snapshots[0].parent} holds an earlier run's policy "
                          f"snapshots ({', '.join(p.name for p in snapshots[:3])}); give a new run an empty folder, "
                          "or continue that run with --resume")


def create_folder(folder: Path) -> Path:
    """Return `folder`, created with its parents; ConfigError naming output.base_dir when it cannot be."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"output.base_dir: cannot create {folder} ({err.strerror or err})") from None
    return folder


def made_by(run_dir: Path) -> str | None:
    """Return the trainer whose run `run_dir` is, by the sections of its config.yaml (None when they do not say)."""
    path = run_dir / RUN_CONFIG
    return trainer_of_data(read_yaml(path), path)


def check_made_by(run_dir: Path, trainer: str, use: Callable[[str], str]) -> None:
    """Raise ConfigError when the run in `run_dir` was made by another trainer than `trainer`, naming the maker and
    `use(maker)`: the command that reads its runs (e.g. "train_magrpo.py --resume RUN")."""
    maker = made_by(run_dir)
    if maker is not None and maker != trainer:
        raise ConfigError(f"{run_dir} is a run of {maker}, not {trainer}: use {use(maker)}")
