"""Command line shared by every `train_*.py` script: --config, --override, --print-config, --memory-plan, --resume.

User errors (a bad config, a missing file, an unreachable dataset, a model or checkpoint that cannot be loaded)
are `cooprl.errors.UserError`s: they print one `error:` line and exit 2, without a traceback. Everything else is
a bug and keeps its traceback. Refused before any model loads: a trainer section the script does not read (a file
of another trainer's, an override of another trainer's key), a run of another trainer to resume, and output
folders that are files or read-only. A run stopped by Ctrl-C exits 130.
"""

from __future__ import annotations

import argparse
import errno
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

from cooprl.config import (Config, ConfigError, Run, check_sections_read, check_trainer, config_from_data,
                           read_yaml)
from cooprl.console import add_threads_option, setup_logging, use_torch_threads
from cooprl.errors import UserError
from cooprl.stopping import INTERRUPTED, TerminateAsInterrupt, Terminated, exit_status_of  # noqa: F401
from cooprl.run_folders import (RUN_CONFIG, check_made_by, check_output, check_resumed_settings, made_by,
                                numbered_folders)
from cooprl.tracking import check_wandb

# the environment's config sections class for a config file's mapping (None: the registered one); the library
# names no environment, so the command line's caller (envs.launch) says which a file's sections name
ChooseTaskConfig = Callable[[dict[str, Any]], "type | None"]


def print_user_error(err: UserError) -> int:
    """Print `err` as one `error: ...` line on stderr; return the exit status of a user error (2)."""
    message = " ".join(str(err).split()) or type(err).__name__  # one line, whatever the message holds
    # names and values from hostile files: no terminal control sequences, no lone surrogates
    message = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in message)
    print(f"error: {message}", file=sys.stderr)
    return 2


def example_config(trainer: str) -> str:
    """Return the CPU config that --help's example trains `trainer` with (the `_iter` trainers share their base
    trainer's file)."""
    return f"configs/{trainer.removesuffix('_iter')}_che_cpu.yaml"


def add_override_option(parser: argparse.ArgumentParser, example: str) -> None:
    """Add `--override KEY=VALUE ...` to `parser`: every `--override` flag adds its keys to the earlier ones' (one
    more flag on a README command keeps the command's own); of two values of one key, the later wins."""
    parser.add_argument("--override", nargs="*", action="extend", default=[], metavar="KEY=VALUE",
                        help=f"{example} (values parsed as YAML; repeatable)")


def parse_args(trainer: str, default_config: str, argv: Sequence[str] | None) -> argparse.Namespace:
    """Return the parsed command line of a trainer script."""
    parser = argparse.ArgumentParser(
        prog=f"train_{trainer}.py",
        description=f"Train with {trainer.upper()}. Every config key can be changed with --override KEY.PATH=VALUE.",
        epilog=f"example (a few steps on CPU):\n  python train_{trainer}.py --config {example_config(trainer)} "
               f"--override {trainer}.max_steps=2\nkeys: docs/config.md lists every key, its default and meaning; "
               f"RUN_DIR/train.log holds a run's details",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help=f"YAML config (default: {default_config})")
    add_override_option(parser, "e.g. magrpo.num_turns=1 agent_model.name=offline:tiny-random")
    parser.add_argument("--print-config", action="store_true", help="print the merged config as YAML and exit")
    parser.add_argument("--memory-plan", type=float, metavar="GIB",
                        help="print what each GPU of GIB GiB would hold (weights, optimizer states, engines, the "
                             "update's peak) and exit: 0 when it fits, 2 with the keys to change when not; offline, "
                             "no weights loaded (data-parallel: WORLD_SIZE=N for N processes)")
    parser.add_argument("--resume", metavar="RUN_DIR|latest",
                        help="continue a run from its newest complete checkpoint: RUN_DIR (its config.yaml is the "
                             "config, --override on top), or latest: the newest run of this trainer and dataset "
                             "under output.base_dir of --config")
    add_threads_option(parser)
    args = parser.parse_args(argv)
    if args.resume and args.resume != "latest" and args.config is not None:
        # a resumed run reads its own config.yaml: another file would be dropped without a word
        raise ConfigError(f"--config {args.config} with --resume {args.resume}: a resumed run reads its own "
                          "config.yaml; drop --config (changes go in --override)")
    args.config = args.config or default_config
    return args


def memory_plan_processes() -> int:
    """Return the processes a --memory-plan counts: WORLD_SIZE (as torchrun sets it), else 1; ConfigError when it is
    not a positive integer."""
    value = os.environ.get("WORLD_SIZE", "1")
    if not value.isdigit() or int(value) < 1:
        raise ConfigError(f"WORLD_SIZE={value!r}: expected a positive number of processes for --memory-plan")
    return int(value)


def _quoted(value: object) -> str:
    return json.dumps(str(value))   # a YAML string, whatever the path holds


def read_config(path: str | Path, overrides: Sequence[str], choose: ChooseTaskConfig | None = None) -> Config:
    """Return the Config of the file at `path` plus `overrides`, the file read once through the hardened reader
    (`cooprl.config.read_yaml`); `choose` picks the environment's sections from the file's mapping."""
    data = read_yaml(path)
    return config_from_data(data, list(overrides), choose(data) if choose is not None else None)


def _saved_config(run_dir: Path, choose: ChooseTaskConfig | None = None) -> Config | None:
    """Return the config a run folder saved (None when its config.yaml is missing or cannot be read)."""
    try:
        return read_config(run_dir / RUN_CONFIG, [], choose)
    except (UserError, OSError):
        return None


def _has_checkpoint(run_dir: Path, saved: Config) -> bool:
    from cooprl import checkpoint as ckpt   # torch: only when a run folder is asked about (--help stays light)
    return bool(ckpt.list_checkpoints(Path(saved.checkpoint.checkpoint_dir or run_dir / "checkpoints")))


def _label(config: Config) -> str | None:
    task = config.task
    return task.run_label() if hasattr(task, "run_label") else None


def find_latest_run(run: Run, choose: ChooseTaskConfig | None = None) -> Path:
    """Return the newest run of `run`'s trainer and dataset under `output.base_dir`: among the folders its config
    names (`output.run_name` and the numbered `<run_name>-<n>` that new runs take when it is taken; without a
    run_name, `<trainer>-<dataset>-<time>`), the runs of this trainer on this dataset, the one whose config.yaml
    was written last (a run writes it when it starts and when it resumes). ConfigError when there is none, or when
    that run holds no complete checkpoint (it stopped before its first save)."""
    from cooprl.trainers.loop import run_prefix   # torch and the trainers: only for --resume latest
    config, trainer = run.config, run.trainer
    base = Path(config.output.base_dir)
    if config.output.run_name:
        candidates = numbered_folders(base / config.output.run_name)
        looked = f"{config.output.run_name} and {config.output.run_name}-<n>"
    else:
        candidates = [p for p in base.glob(f"{run_prefix(run)}*") if p.is_dir()] if base.is_dir() else []
        looked = f"{run_prefix(run)}<time>"
    runs = {}
    for folder in candidates:
        saved = _saved_config(folder, choose)
        if saved is not None and made_by(folder) == trainer and _label(saved) == _label(config):
            runs[folder] = saved
    if not runs:
        raise ConfigError(f"--resume latest: no run of {trainer} on this dataset under {base} (looked for {looked})")
    newest = max(runs, key=lambda p: (p / RUN_CONFIG).stat().st_mtime_ns)
    if not _has_checkpoint(newest, runs[newest]):
        raise ConfigError(f"--resume latest: the newest run of {trainer}, {newest}, has no complete checkpoint (it "
                          "stopped before its first save): start afresh without --resume, or name a run: --resume RUN")
    return newest


def resume_folder(trainer: str, args: argparse.Namespace, choose: ChooseTaskConfig | None = None) -> Path:
    """Return the run folder `--resume` names (`latest`: see find_latest_run), after checking that it is a run
    folder of `trainer`."""
    if args.resume == "latest":
        data = read_yaml(args.config)
        run = Run.of(config_from_data(data, args.override, choose(data) if choose is not None else None), trainer)
        check_sections_read(run, data, args.config, args.override, f"train_{trainer}.py", _script)
        run_dir = find_latest_run(run, choose)
    else:
        run_dir = Path(args.resume)
        if not (run_dir / RUN_CONFIG).is_file():
            raise ConfigError(f"--resume {run_dir}: not a run folder (no config.yaml in it)"
                              f"{run_above(run_dir, '--resume')}")
    check_made_by(run_dir, trainer, lambda maker: f"train_{maker}.py --resume {run_dir}")
    return run_dir.resolve()


def run_above(folder: Path, option: str) -> str:
    """Return "; it is in the run R: <option> R ..." when `folder` lies in a run folder R (a checkpoints/ or
    checkpoint-N folder given where a run folder belongs), else ""."""
    for parent in list(folder.resolve().parents)[:3]:
        if (parent / RUN_CONFIG).is_file():
            return f"; it is in the run {parent}: {option} {parent} takes its newest complete checkpoint"
    return ""


def _script(trainer: str) -> str:
    return f"train_{trainer}.py"


def read_command_line(trainer: str, default_config: str, argv: Sequence[str] | None = None,
                      choose: ChooseTaskConfig | None = None,
                      first_prompts: Callable[[Run], Sequence[str] | str] | None = None) -> Run | None:
    """Return the Run a trainer script's command line asks for: its config and `trainer`'s typed section (None when
    it asked for --print-config, which this prints); UserError for bad input, an unknown trainer included, a
    section the trainer would not read, a run of another trainer to resume, or an output folder it cannot write.
    The script then trains with it. `choose`: the environment's config sections for the file's mapping (default:
    the registered ones, see cooprl.config.register_task_config); each config file is read once. `first_prompts`:
    the run's dataset's first prompts for --memory-plan, or why they could not be read offline."""
    args = parse_args(trainer, default_config, argv)
    setup_logging()
    use_torch_threads(args.torch_threads)
    check_trainer(trainer)   # before any file is read or any problem is loaded
    path, overrides = args.config, list(args.override)
    if args.resume:
        run_dir = resume_folder(trainer, args, choose)
        logging.getLogger(__name__).info("resuming %s", run_dir)
        # the run's own config and folder, its newest complete checkpoint
        path = run_dir / RUN_CONFIG
        overrides += [f"output.base_dir={_quoted(run_dir.parent)}", f"output.run_name={_quoted(run_dir.name)}",
                      "checkpoint.resume_from_checkpoint=latest"]
    data = read_yaml(path)
    config = config_from_data(data, overrides, choose(data) if choose is not None else None)
    run = Run.of(config, trainer)
    check_sections_read(run, data, path, args.override, _script(trainer), _script)
    if args.resume:   # before any model loads (the loop checks again, for checkpoint.resume_from_checkpoint)
        check_resumed_settings(run_dir, config, trainer)
    if args.print_config:
        sys.stdout.write(config.to_yaml(trainer))
        return None
    if args.memory_plan is not None:
        from cooprl.rollout.memory_plan import print_memory_plan   # torch and transformers: only when asked
        prompts = first_prompts(run) if first_prompts is not None else "no environment to read it"
        print_memory_plan(run, args.memory_plan, memory_plan_processes(), prompts)
        return None
    check_output(config, trainer, run.section)
    check_wandb(config.wandb)   # before any model loads: wandb.init failed only after them, leaving a run folder
    return run


def print_interrupted(note: str = "", signal_name: str | None = None) -> int:
    """Say in one line on stderr, without a traceback, that Ctrl-C (or SIGTERM: `signal_name`) stopped the command
    (`note`: what was kept, how to go on); return its exit status (INTERRUPTED, 130, or TERMINATED, 143)."""
    said = "terminated (SIGTERM)" if signal_name == "SIGTERM" else "interrupted (Ctrl-C)"
    print(f"{said}{'; ' + note if note else ''}", file=sys.stderr)
    return exit_status_of(signal_name)


def exit_status(run: Callable[[], object]) -> int:
    """Call `run()`; return the exit status of a command line: 0; 2 after printing a UserError (or a full disk) as
    one line; 130 (INTERRUPTED) when Ctrl-C stopped it, 143 (TERMINATED) when SIGTERM did: `run()` returned a
    summary saying `interrupted` (it saved first; `signal` names SIGTERM), or a KeyboardInterrupt (Terminated)
    reached here (said in one line, without a traceback)."""
    try:
        with TerminateAsInterrupt():   # SIGTERM (timeout, SLURM, kill) gets what Ctrl-C gets
            result = run()
    except UserError as err:
        return print_user_error(err)
    except OSError as err:
        if err.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        # a full disk where no save was being made (metrics.jsonl, train.log): the checkpoints stay as they were
        return print_user_error(UserError(f"no space left on the device writing {err.filename or 'a file'}; free "
                                          "space, then --resume the run (from its newest complete checkpoint)"))
    except KeyboardInterrupt as stop:
        return print_interrupted(signal_name="SIGTERM" if isinstance(stop, Terminated) else None)
    if isinstance(result, dict) and result.get("interrupted"):
        return exit_status_of(result.get("signal"))
    return 0
