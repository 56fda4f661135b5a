"""Evaluate agents on the eval split: a run, a checkpoint, or the starting models as a baseline.

    python evaluate.py --run runs/RUN                       # the run's config and its newest checkpoint
    python evaluate.py --config FILE --checkpoint DIR       # a checkpoint-N folder, or a checkpoints folder (newest)
    python evaluate.py [--config FILE]                      # no checkpoint: the untrained models (the baseline)
    ... [--samples N|all] [--generations K] [--pass-k 1 5] [--trainer NAME] [--override ...] [--output FILE.json]
        [--torch-threads N]

Rolls out the eval split with the trainer's evaluation settings and prints the per-turn metrics (reward levels,
pass rate, pass@k, aux usage); `--output` also writes them as JSON. `--samples all` takes the whole eval split
(default: the trainer's eval_num_samples); `--generations K` samples K answers per problem, for pass@k up to K.
A bar counts the answers sampled, with their rate; the first line says the torch threads (cooprl/console.py).
Bad input (config, dataset, model, a damaged checkpoint, a section the trainer does not read, `--run` of another
trainer than `--trainer`, a run without a checkpoint) prints one `error: ...` line and exits 2; Ctrl-C one line, 130.
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
from cooprl.cli import add_override_option, print_interrupted, print_user_error, run_above
from cooprl.config import (ConfigError, Run, check_sections_read, check_trainer, config_from_data, read_yaml,
                           trainer_of_data)
from cooprl.console import add_threads_option, chosen_threads, setup_logging, use_torch_threads
from cooprl.errors import UserError
from cooprl.run_folders import RUN_CONFIG, check_made_by, check_writable
from cooprl.stopping import TerminateAsInterrupt, signal_of
from cooprl.trainers import build_algorithm
from cooprl.trainers.loop import evaluation_seed
from envs import environment_for, environment_of
from envs.launch import default_config

DEFAULT_TRAINER = "magrpo"


def read_evaluation_config(config_path: str, trainer: str | None, overrides: list[str], generations: int | None = None,
                           pass_k: list[int] | None = None) -> Run:
    """Return the Run of an evaluation (its config and trainer section): the file read once through the hardened
    reader, with the environment its sections name; the trainer is `trainer`, else the one whose section the file
    holds (a run folder's config.yaml holds only its trainer's sections: evaluating it as magrpo would use magrpo's
    defaults), else magrpo. `generations` and `pass_k` set that trainer's eval_num_generations and eval_pass_k."""
    data = read_yaml(config_path)
    trainer = trainer or trainer_of_data(data, config_path) or DEFAULT_TRAINER
    check_trainer(trainer)
    given = list(overrides)
    overrides = list(overrides)
    if generations is not None:
        overrides.append(f"{trainer}.eval_num_generations={generations}")
    if pass_k:
        overrides.append(f"{trainer}.eval_pass_k={json.dumps(pass_k)}")
    run = Run.of(config_from_data(data, overrides, environment_of(data).config), trainer)
    check_sections_read(run, data, config_path, given, f"evaluate.py --trainer {trainer}",
                        lambda name: f"evaluate.py --trainer {name}")
    return run


def run_checkpoints(run_dir: Path, run: Run) -> str:
    """Return the checkpoints folder of the run in `run_dir` (its checkpoint.checkpoint_dir, else checkpoints/);
    ConfigError when it holds no complete checkpoint, saying how to evaluate the run's starting models instead."""
    folder = Path(run.config.checkpoint.checkpoint_dir or run_dir / "checkpoints")
    if not ckpt.list_checkpoints(folder):
        raise ConfigError(f"--run {run_dir}: no complete checkpoint in {folder} (the run stopped before its first "
                          f"save); its starting models: python evaluate.py --config {run_dir / RUN_CONFIG}")
    return str(folder)


def eval_items(items: list, samples: str | None, default: int) -> list:
    """Return the first `samples` of `items` ("all": every one; None: `default`); ConfigError for another value."""
    if samples is None:
        return items[:default]
    if samples == "all":
        return items
    if samples.isdigit() and int(samples) > 0:
        return items[:int(samples)]
    raise ConfigError(f"--samples {samples!r}: expected a positive number or all")


def evaluate_checkpoint(run: Run, checkpoint: str | None, samples: str | None = None) -> dict[str, float]:
    """Return the evaluation metrics of the agents saved in `checkpoint` (None: the starting models) on the first
    `samples` eval problems ("all": every one; None: the trainer's eval_num_samples). The task and the algorithm
    are built as training builds them (`Environment.prepare_task`, `build_algorithm` with its checks)."""
    eval_items([], samples, 0)   # a bad --samples fails before any model is loaded
    folder = None
    if checkpoint is not None:
        try:
            folder = ckpt.find_named_checkpoint(checkpoint)
        except FileNotFoundError as err:
            raise ConfigError(f"--checkpoint: {err}") from None
    if folder is not None and ckpt.lost_init(run.config.agent_model.init_from, run.config.agent_model.lora):
        run.config.agent_model.init_from = None   # the checkpoint holds every weight
    task = environment_for(run.config).prepare_task(run)
    algorithm = build_algorithm(run, task)
    if folder is not None:
        ckpt.load_team_weights(algorithm.models, folder, algorithm.shared_agents)
    torch.manual_seed(evaluation_seed(run.config.seed))  # the same evaluation stream as during training
    items = eval_items(task.eval_items, samples, run.section.eval_num_samples)
    threads = chosen_threads()
    print(f"evaluating {'the starting models' if folder is None else folder} on {len(items)} problems x "
          f"{run.section.eval_num_generations} samples{'; ' + threads.describe() if threads else ''}",
          file=sys.stderr)
    return algorithm.evaluate(items)


def main(argv: list[str] | None = None) -> int:
    """Parse the command line, evaluate, print; return the exit code (SIGTERM ends it as Ctrl-C does, with 143)."""
    with TerminateAsInterrupt():   # `timeout`, SLURM and `kill` ended it with no message before
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  python evaluate.py --run runs/demo-magrpo-coop-cpu --samples all --output eval.json\n"
               "keys (--override): docs/config.md lists every key, its default and meaning")
    parser.add_argument("--run", help="a run folder: its config.yaml and (unless --checkpoint) its newest checkpoint")
    parser.add_argument("--config", help="YAML config (default: the run's config.yaml with --run, else the "
                                         "trainer's reference config, configs/<trainer>_che_config.yaml)")
    parser.add_argument("--checkpoint", help="checkpoint-N folder, or a checkpoints or run folder (newest); "
                                             "none: the starting models, as a baseline")
    parser.add_argument("--trainer", help="trainer section to use (default: the config's only trainer, else magrpo)")
    parser.add_argument("--samples", help="eval problems: a number or all (default: the trainer's eval_num_samples)")
    parser.add_argument("--generations", type=int, help="answers per problem (the trainer's eval_num_generations)")
    parser.add_argument("--pass-k", type=int, nargs="+", help="k values of pass@k (each <= --generations)")
    add_override_option(parser, "config keys, e.g. magrpo.max_new_tokens=256")
    add_threads_option(parser)
    parser.add_argument("--output", help="also write the metrics to this JSON file")
    args = parser.parse_args(argv)
    setup_logging()
    use_torch_threads(args.torch_threads)
    try:
        if args.output:   # before the evaluation, not after it
            check_writable(Path(args.output).parent, "--output")
            if Path(args.output).is_dir():
                raise ConfigError(f"--output {args.output}: is a folder; give a file name (e.g. eval.json)")
        config_path, checkpoint = args.config, args.checkpoint
        if args.run:
            run_dir = Path(args.run)
            if not (run_dir / RUN_CONFIG).is_file():
                raise ConfigError(f"--run {run_dir}: not a run folder (no config.yaml in it)"
                                  f"{run_above(run_dir, '--run')}")
            if args.trainer:
                check_made_by(run_dir, args.trainer, lambda maker: f"evaluate.py --run {run_dir} without --trainer")
            config_path = config_path or str(run_dir / RUN_CONFIG)
        config_path = config_path or default_config(args.trainer or DEFAULT_TRAINER)
        run = read_evaluation_config(config_path, args.trainer, args.override, args.generations, args.pass_k)
        if args.run and checkpoint is None:
            checkpoint = run_checkpoints(Path(args.run), run)
        metrics = evaluate_checkpoint(run, checkpoint, args.samples)
    except UserError as err:  # a bad config, dataset, model name or checkpoint: one line, exit 2
        return print_user_error(err)
    except KeyboardInterrupt as stop:   # one line and 130 (143), as the trainers: nothing was written
        return print_interrupted("nothing was written", signal_of(stop))
    for key in sorted(metrics):
        print(f"{key}: {metrics[key]:.4f}")
    if args.output:
        try:   # its folder may not exist yet: check_writable let it pass as one that can be created
            Path(args.output).parent.mkdir(parents=True, exist_ok=True)
            Path(args.output).write_text(json.dumps(metrics, indent=2), encoding="utf-8")
        except OSError as err:
            print(f"error: --output {args.output!r} cannot be written: {err.strerror or err}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
