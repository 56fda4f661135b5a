"""Command line shared by every `train_*.py` script: --config, --override, --print-config, --resume.

User errors (a bad config, a missing file, an unreachable dataset, a model or checkpoint that cannot be loaded)
are `cooprl.errors.UserError`s: they print one `error:` line and exit 2, without a traceback. Everything else is
a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

from cooprl.console import add_threads_option, setup_logging, use_torch_threads
from cooprl.config import Config, ConfigError, Run, check_trainer, config_from_data, read_yaml
from cooprl.errors import UserError

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


def parse_args(trainer: str, default_config: str, argv: Sequence[str] | None) -> argparse.Namespace:
    """Return the parsed command line of a trainer script."""
    parser = argparse.ArgumentParser(
        prog=f"train_{trainer}.py",
        description=f"Train with {trainer.upper()}. Every config key can be changed with --override KEY.PATH=VALUE.",
        epilog=f"example (a few steps on CPU):\n  python train_{trainer}.py --config {example_config(trainer)} "
               f"--override {trainer}.max_steps=2\nkeys: docs/config.md lists every key, its default and meaning; "
               f"RUN_DIR/train.log holds a run's details",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=default_config, help=f"YAML config (default: {default_config})")
    parser.add_argument("--override", nargs="*", default=[], metavar="KEY=VALUE",
                        help="e.g. magrpo.num_turns=1 agent_model.name=offline:tiny-random (values parsed as YAML)")
    parser.add_argument("--print-config", action="store_true", help="print the merged config as YAML and exit")
    parser.add_argument("--resume", metavar="RUN_DIR|latest",
                        help="continue a run from its newest complete checkpoint: RUN_DIR (its config.yaml is the "
                             "config, --override on top), or latest: the newest run of this trainer and dataset "
                             "under output.base_dir of --config")
    add_threads_option(parser)
    return parser.parse_args(argv)


def _quoted(value: object) -> str:
    return json.dumps(str(value))   # a YAML string, whatever the path holds


def read_config(path: str | Path, overrides: Sequence[str], choose: ChooseTaskConfig | None = None) -> Config:
    """Return the Config of the file at `path` plus `overrides`, the file read once through the hardened reader
    (`cooprl.config.read_yaml`); `choose` picks the environment's sections from the file's mapping."""
    data = read_yaml(path)
    return config_from_data(data, list(overrides), choose(data) if choose is not None else None)


def _has_checkpoint(run_dir: Path, choose: ChooseTaskConfig | None = None) -> bool:
    from cooprl import checkpoint as ckpt
    try:
        saved = read_config(run_dir / "config.yaml", [], choose)
        ckpt.find_checkpoint("latest", Path(saved.checkpoint.checkpoint_dir or run_dir / "checkpoints"))
        return True
    except (UserError, FileNotFoundError, OSError):
        return False


def find_latest_run(run: Run, choose: ChooseTaskConfig | None = None) -> Path:
    """Return the newest run folder under `output.base_dir` of `run`'s trainer on its dataset (its
    `output.run_name` when that is set) that holds a complete checkpoint; ConfigError when there is none."""
    from cooprl.trainers.loop import run_prefix
    config, trainer = run.config, run.trainer
    base = Path(config.output.base_dir)
    if config.output.run_name:
        candidates = [base / config.output.run_name]
    else:
        prefix = run_prefix(run)
        candidates = [p for p in base.glob(f"{prefix}*") if p.is_dir()] if base.is_dir() else []
    runs = [p for p in candidates if (p / "config.yaml").is_file() and _has_checkpoint(p, choose)]
    if not runs:
        raise ConfigError(f"--resume latest: no run of {trainer} with a complete checkpoint under {base} "
                          f"(looked for {', '.join(p.name for p in candidates) or 'none'})")
    return max(runs, key=lambda p: (p / "config.yaml").stat().st_mtime)


def resume_config(trainer: str, args: argparse.Namespace, choose: ChooseTaskConfig | None = None) -> Config:
    """The config that continues the run `args.resume` names: that run's config.yaml, then the --override values,
    then its own folder and its newest complete checkpoint."""
    if args.resume == "latest":
        run_dir = find_latest_run(Run.of(read_config(args.config, args.override, choose), trainer), choose)
    else:
        run_dir = Path(args.resume)
        if not (run_dir / "config.yaml").is_file():
            raise ConfigError(f"--resume {run_dir}: not a run folder (no config.yaml in it)")
    run_dir = run_dir.resolve()
    where = [f"output.base_dir={_quoted(run_dir.parent)}", f"output.run_name={_quoted(run_dir.name)}",
             "checkpoint.resume_from_checkpoint=latest"]
    logging.getLogger(__name__).info("resuming %s", run_dir)
    return read_config(run_dir / "config.yaml", list(args.override) + where, choose)


def read_command_line(trainer: str, default_config: str, argv: Sequence[str] | None = None,
                      choose: ChooseTaskConfig | None = None) -> Run | None:
    """Return the Run a trainer script's command line asks for: its config and `trainer`'s typed section (None when
    it asked for --print-config, which this prints); UserError for bad input, an unknown trainer included. The
    script then trains with it. `choose`:
    the environment's config sections for the file's mapping (default: the registered ones, see
    cooprl.config.register_task_config); each config file is read once."""
    args = parse_args(trainer, default_config, argv)
    setup_logging()
    use_torch_threads(args.torch_threads)
    check_trainer(trainer)   # before any file is read or any problem is loaded
    config = (resume_config(trainer, args, choose) if args.resume
              else read_config(args.config, args.override, choose))
    if args.print_config:
        sys.stdout.write(config.to_yaml(trainer))
        return None
    return Run.of(config, trainer)


def exit_status(run: Callable[[], object]) -> int:
    """Call `run()`; return the exit status of a command line: 0, or 2 after printing a UserError as one line."""
    try:
        run()
    except UserError as err:
        return print_user_error(err)
    return 0
