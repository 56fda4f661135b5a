"""The command line every `train_*.py` script runs, and `python -m envs TRAINER [--config FILE] [...]`.

One path: read the config file once through the hardened reader (`cooprl.cli.read_config`), pick the environment
its sections name (`envs.ENVIRONMENTS`), set it up and build its task (`Environment.prepare_task`), train
(`cooprl.train.train`, which checks that the trainer fits the task). `evaluate.py` builds through the same
`prepare_task`.

Bad input (DatasetError, ModelError, ConfigError, CheckpointError, ...: `cooprl.errors.UserError`) prints one
`error:` line and exits 2; a run stopped by Ctrl-C exits 130 (after saving, see cooprl.trainers.loop). torch,
transformers and the trainers are imported only once the config has been read:
a typo, a missing file or `--print-config` answers in a fraction of a second instead of after ~5 s of imports.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Sequence

from cooprl.cli import exit_status, read_command_line
from cooprl.task import all_first_prompts
from envs import environment_for, task_config_of

if TYPE_CHECKING:
    from cooprl.config import Run

OFFLINE = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")


def default_config(trainer: str) -> str:
    """Return the config file `python -m envs TRAINER` and evaluate.py read without --config: the trainer's
    reference config on CoopHumanEval (each train_*.py names its own, `default=`)."""
    return f"configs/{trainer}_che_config.yaml"


def train_main(trainer: str, argv: Sequence[str] | None = None, default: str | None = None) -> int:
    """Train `trainer` as the command line `argv` (default: sys.argv) says, on the environment its config names;
    return the exit code (2 after a one-line error for bad input). `default`: the config without --config."""
    def read_then_train() -> dict | None:
        run = read_command_line(trainer, default or default_config(trainer), argv, task_config_of,
                                dataset_first_prompts)
        if run is None:   # --print-config
            return None
        from cooprl.train import train
        return train(run, environment_for(run.config).prepare_task(run))   # its `interrupted` sets the exit status
    return exit_status(read_then_train)


def dataset_first_prompts(run: "Run") -> list[str] | str:
    """Return the first prompts of `run`'s train and eval items, its task built without the environment's setup and
    without the network (for --memory-plan); why not, in a few words, when the dataset cannot be read so."""
    saved = {name: os.environ.get(name) for name in OFFLINE}
    os.environ.update({name: "1" for name in OFFLINE})
    try:
        return all_first_prompts(environment_for(run.config).build_task(run))
    except Exception as err:  # noqa: BLE001 - any dataset that does not load offline: the plan bounds by max_length
        return f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else 'no message'}"
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
