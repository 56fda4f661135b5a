"""Where metrics go: `metrics.jsonl` in the run folder always, W&B when available (offline by default).

Every event is one JSON object with `step`, `env_step`, the metric names and `wall_time` (seconds since the epoch);
a training step's event has `time/step_s` (its seconds), an evaluation's `time/eval_s`. W&B uses `env_step` as the
x-axis. A run without wandb installed, or with `wandb.mode: disabled`, still logs to JSONL. `wandb.mode: online`
without the package or an API key is refused before any model loads (`check_wandb`).
"""

from __future__ import annotations

import configparser
import importlib.util
import json
import logging
import math
import netrc
import os
import struct
import time
import urllib.parse
from pathlib import Path
from typing import Any, Iterator

from cooprl.errors import UserError

log = logging.getLogger(__name__)


class WandbUnavailable(UserError, RuntimeError):
    """W&B was asked for (online) but cannot start; the message says how to fix or avoid it."""


class RunTracker:
    """Appends metric events to metrics.jsonl and mirrors them to W&B."""

    def __init__(self, run_dir: Path, wandb_cfg: Any, config: dict[str, Any], run_name: str,
                 resume_id: str | None = None):
        self.path = run_dir / "metrics.jsonl"
        self.wandb_run = None
        if wandb_cfg.mode != "disabled":
            self.wandb_run = _start_wandb(run_dir, wandb_cfg, config, run_name, resume_id)
        if self.wandb_run is not None and resume_id:
            self._catch_up(Path(wandb_cfg.dir or run_dir) / "wandb", resume_id, read_metrics(run_dir))

    def _catch_up(self, wandb_dir: Path, run_id: str, events: list[dict[str, Any]]) -> None:
        """Send W&B the events of metrics.jsonl (up to the resumed step) that the W&B run `run_id` lacks: a process
        killed with SIGKILL loses the steps W&B had not yet written (all of them, often: offline W&B writes late)."""
        try:
            held = logged_in_wandb(wandb_dir, run_id)
        except (OSError, ValueError) as err:
            log.warning("W&B run %s: could not read what it holds (%s); the steps before the resume stay as W&B "
                        "has them", run_id, err)
            return
        missing = [e for e in events if _signature(e) not in held]
        for event in missing:
            self.wandb_run.log({k: (float("nan") if v is None else v) for k, v in event.items() if k != "wall_time"})
        if missing:
            log.warning("W&B run %s lacked %d event(s) of metrics.jsonl (steps %d to %d: a killed process had not "
                        "written them); sent now", run_id, len(missing), missing[0]["step"], missing[-1]["step"])

    @property
    def wandb_id(self) -> str | None:
        """Return the W&B run id (saved in checkpoints so a resumed run continues it), or None."""
        return self.wandb_run.id if self.wandb_run is not None else None

    def log(self, metrics: dict[str, float], step: int, env_step: int) -> None:
        """Record one event; non-finite values are written as null in JSONL, with the event's `wall_time` (seconds
        since the epoch; W&B keeps its own `_timestamp`)."""
        event = {"step": step, "env_step": env_step, **metrics}
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps({**{k: (v if not isinstance(v, float) or math.isfinite(v) else None)
                                   for k, v in event.items()}, "wall_time": round(time.time(), 3)}) + "\n")
        if self.wandb_run is not None:
            self.wandb_run.log(event)

    def close(self) -> None:
        """Finish the W&B run (files stay on disk in offline mode)."""
        if self.wandb_run is not None:
            self.wandb_run.finish()
            self.wandb_run = None


def check_wandb(cfg: Any) -> None:
    """Raise WandbUnavailable when `cfg` (the wandb section) asks for online logging that cannot start: wandb is not
    installed, or no API key is found (WANDB_API_KEY, WANDB_IDENTITY_TOKEN_FILE, a netrc entry for the W&B host,
    W&B's settings file). Run before any model loads: wandb.init would fail only once the run has started."""
    if cfg.mode != "online":
        return
    if importlib.util.find_spec("wandb") is None:
        raise WandbUnavailable("wandb.mode=online needs the wandb package: pip install wandb, or use --override "
                               "wandb.mode=offline (or disabled: metrics.jsonl only)")
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE") or _netrc_has_wandb_key() or \
            _settings_have_wandb_key():
        return
    raise WandbUnavailable("wandb.mode=online, but no W&B API key was found (WANDB_API_KEY, `wandb login`'s netrc "
                           "entry); log in with `wandb login` or set WANDB_API_KEY, or use --override "
                           "wandb.mode=offline (sync later with `wandb sync`)")


def _wandb_host() -> str:
    return urllib.parse.urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname or ""


def _netrc_has_wandb_key() -> bool:
    path = Path(os.environ.get("NETRC") or Path.home() / ".netrc")
    try:
        return netrc.netrc(str(path)).authenticators(_wandb_host()) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def _settings_have_wandb_key() -> bool:
    folder = Path(os.environ.get("WANDB_CONFIG_DIR") or Path.home() / ".config" / "wandb")
    settings = configparser.ConfigParser()
    try:
        settings.read(folder / "settings", encoding="utf-8")
    except (OSError, configparser.Error, UnicodeDecodeError):
        return False
    return any(settings.has_option(section, "api_key") for section in settings.sections())


def _start_wandb(run_dir: Path, cfg: Any, config: dict[str, Any], run_name: str, resume_id: str | None) -> Any:
    try:
        import wandb
    except ImportError:
        log.warning("wandb is not installed: metrics go to %s only", run_dir / "metrics.jsonl")
        return None
    run_id = cfg.id or resume_id
    resume = cfg.resume or ("allow" if run_id else None)
    try:
        run = wandb.init(project=cfg.project, entity=cfg.entity, name=cfg.name or run_name, dir=str(cfg.dir or run_dir),
                         tags=list(cfg.tags), mode=cfg.mode, id=run_id, resume=resume, config=config,
                         settings=wandb.Settings(silent=True, console="off"))
    except Exception as err:  # wandb raises many types (UsageError, CommError, AuthenticationError)
        if cfg.mode == "online":
            raise WandbUnavailable(f"wandb.mode=online could not start ({err}); log in with `wandb login` or set "
                                   "WANDB_API_KEY, or use --override wandb.mode=offline") from None
        log.warning("W&B could not start (%s): metrics go to metrics.jsonl only", err)
        return None
    run.define_metric("env_step")
    run.define_metric("*", step_metric="env_step")
    return run


_W_AND_B_KEYS = {"_step", "_runtime", "_timestamp", "wall_time"}   # W&B's own row keys, and ours W&B does not get


def _signature(event: dict[str, Any]) -> tuple[Any, frozenset[str]]:
    """Return what tells one logged event from another: its step and its keys (a step's training and evaluation
    events are two)."""
    return event.get("step"), frozenset(k for k in event if k not in _W_AND_B_KEYS)


def logged_in_wandb(wandb_dir: Path, run_id: str) -> set[tuple[Any, frozenset[str]]]:
    """Return the signatures (`_signature`) of the events the W&B run `run_id` wrote under `wandb_dir` (every
    `*-<run_id>/run-<run_id>.wandb` file: one per start and resume). ValueError for a file that is not W&B's."""
    from wandb.proto import wandb_internal_pb2
    held = set()
    for path in sorted(wandb_dir.glob(f"*-{run_id}/run-{run_id}.wandb")):
        for raw in _log_records(path.read_bytes()):
            record = wandb_internal_pb2.Record()
            try:
                record.ParseFromString(raw)
            except Exception as err:   # protobuf's DecodeError: a record cut off by the kill
                raise ValueError(f"{path}: {err}") from None
            if record.WhichOneof("record_type") == "history":
                row = {item.key or "/".join(item.nested_key): item.value_json for item in record.history.item}
                held.add((json.loads(row.get("step", "null")), frozenset(k for k in row if k not in _W_AND_B_KEYS)))
    return held


def _log_records(data: bytes) -> Iterator[bytes]:
    """Yield the records of a W&B transaction log (LevelDB's log format after a 7-byte header: 32 KiB blocks of
    chunks, each a 7-byte header of checksum, length and type: 1 whole, 2 first, 3 middle, 4 last); a chunk cut off
    by a kill ends it."""
    if not data.startswith(b":W&B"):
        raise ValueError("not a W&B file")
    pos, block, pending = 7, 32768, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7]) if left >= 7 else (0, 0, 0)
        if left < 7 or (length == 0 and kind == 0):   # a block's padding
            pos += left
            continue
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if len(chunk) < length:
            return
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            yield pending


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """Return the events of a run's metrics.jsonl, in order ([] when there is none). A line that is not a JSON
    object with a whole-number step (the last line of a run killed while writing it, or a damaged file) is skipped
    with a warning naming its line number: a resume, the summary and the plot read the events around it instead of
    failing on it."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    events, skipped = [], []
    for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except ValueError:
            event = None
        if isinstance(event, dict) and type(event.get("step", 0)) is int:   # every event's step is a whole number
            events.append(event)
        else:
            skipped.append(number)
    if skipped:
        shown = ", ".join(map(str, skipped[:5])) + (f" and {len(skipped) - 5} more" if len(skipped) > 5 else "")
        log.warning("%s: skipped %d line(s) that are no JSON object (line %s; a write cut off by a kill?)", path,
                    len(skipped), shown)
    return events
