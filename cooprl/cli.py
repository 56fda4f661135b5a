"""Command line shared by every `train_*.py` script: --config, --override, --print-config.

User errors (a bad config, a missing file, an unreachable dataset, a model or checkpoint that cannot be loaded)
are `cooprl.errors.UserError`s: they print one `error:` line and exit 2, without a traceback. Everything else is
a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Callable, Sequence

from cooprl.config import Config, load_config
from cooprl.errors import UserError


def print_user_error(err: UserError) -> int:
    """Print `err` as one `error: ...` line on stderr; return the exit status of a user error (2)."""
    message = " ".join(str(err).split()) or type(err).__name__  # one line, whatever the message holds
    # names and values from hostile files: no terminal control sequences, no lone surrogates
    message = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in message)
    print(f"error: {message}", file=sys.stderr)
    return 2


def parse_args(trainer: str, default_config: str, argv: Sequence[str] | None) -> argparse.Namespace:
    """Return the parsed command line of a trainer script."""
    parser = argparse.ArgumentParser(
        prog=f"train_{trainer}.py",
        description=f"Train with {trainer.upper()}. Every config key can be changed with --override KEY.PATH=VALUE.")
    parser.add_argument("--config", default=default_config, help=f"YAML config (default: {default_config})")
    parser.add_argument("--override", nargs="*", default=[], metavar="KEY=VALUE",
                        help="e.g. magrpo.num_turns=1 agent_model.name=offline:tiny-random (values parsed as YAML)")
    parser.add_argument("--print-config", action="store_true", help="print the merged config as YAML and exit")
    return parser.parse_args(argv)


def run_cli(trainer: str, default_config: str, train: Callable[[Config, str], object],
            argv: Sequence[str] | None = None) -> int:
    """Parse the command line, load the config and call `train(config, trainer)`; return the exit code."""
    args = parse_args(trainer, default_config, argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    try:
        config_path = Path(args.config)
        config = load_config(config_path, args.override)
        if args.print_config:
            sys.stdout.write(config.to_yaml(trainer))
            return 0
        train(config, trainer)
    except UserError as err:
        return print_user_error(err)
    return 0
