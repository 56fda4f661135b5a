"""Evaluate a saved run: python evaluate.py --config FILE --checkpoint DIR [--trainer NAME] [--override ...]

Loads the agents' weights (or LoRA adapters) from a checkpoint folder (or the newest checkpoint under a
checkpoints folder), rolls out the eval split with the trainer's evaluation settings and prints the
per-turn metrics (reward levels, pass rate, pass@k, aux usage); `--output FILE` also writes them as JSON.
Bad input (config, dataset, model, a damaged checkpoint) prints one `error: ...` line and exits 2.
Without `--trainer`, the trainer is the one whose section the config holds (a run folder's config.yaml holds
only its trainer's sections), else magrpo.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from cooprl import checkpoint as ckpt
from cooprl.cli import print_user_error
from cooprl.config import ConfigError, load_config, trainer_of_file
from cooprl.errors import UserError
from cooprl.trainers.loop import evaluation_seed
from envs.code_generation import train as code_train


def evaluate_checkpoint(config_path: str, checkpoint: str, trainer: str, overrides: list[str]) -> dict[str, float]:
    """Return the evaluation metrics of the agents saved in `checkpoint`."""
    config = load_config(config_path, overrides)
    try:
        folder = ckpt.find_checkpoint(checkpoint, Path(checkpoint))
    except FileNotFoundError as err:
        raise ConfigError(f"--checkpoint: {err}") from None
    task, algorithm = code_train.build_task_and_algorithm(config, trainer)
    for i, model in enumerate(algorithm.models):
        ckpt.load_agent_weights(model, folder, i)
    torch.manual_seed(evaluation_seed(config.seed))  # the same evaluation stream as during training
    items = task.eval_items[:config.trainer(trainer).eval_num_samples]
    return algorithm.evaluate(items)


def main(argv: list[str] | None = None) -> int:
    """Parse the command line, evaluate, print; return the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--checkpoint", required=True, help="checkpoint-N folder, or a checkpoints folder (newest)")
    parser.add_argument("--trainer", help="trainer section to use (default: the config's only trainer, else magrpo)")
    parser.add_argument("--override", nargs="*", default=[])
    parser.add_argument("--output", help="also write the metrics to this JSON file")
    args = parser.parse_args(argv)
    try:
        # a run's config.yaml holds only its trainer's section: evaluating it as magrpo would use magrpo's defaults
        trainer = args.trainer or trainer_of_file(args.config) or "magrpo"
        metrics = evaluate_checkpoint(args.config, args.checkpoint, trainer, args.override)
    except UserError as err:  # a bad config, dataset, model name or checkpoint: one line, exit 2
        return print_user_error(err)
    for key in sorted(metrics):
        print(f"{key}: {metrics[key]:.4f}")
    if args.output:
        try:
            Path(args.output).write_text(json.dumps(metrics, indent=2), encoding="utf-8")
        except OSError as err:
            print(f"error: --output {args.output!r} cannot be written: {err.strerror or err}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
