"""What every train_*.py script runs: pick the environment a config file names by its own section, then train.

A config file names its environment by the top-level section only that environment reads: `planner_coder:` ->
envs/planner_coder, `coder_tester:` -> envs/coder_tester, `arithmetic:` -> envs/arithmetic, none of them -> the code
task (envs/code_generation, whose sections `dataset`/`external` every older config has). No `env:` key: the library's
loader would have to know it, and cooprl/ names no environment; a section the environment reads anyway says it.
With `--resume RUN_DIR` the run's saved config.yaml decides.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Sequence

import yaml

# top-level section -> the environment's train module (each has main(trainer, default_config, argv))
ENV_SECTIONS = {"planner_coder": "envs.planner_coder.train", "coder_tester": "envs.coder_tester.train",
                "arithmetic": "envs.arithmetic.train"}
DEFAULT_ENV = "envs.code_generation.train"


def config_path(default_config: str, argv: Sequence[str]) -> Path:
    """Return the config file the command line reads: --resume RUN_DIR's config.yaml, --config's, or the default."""
    args = list(argv)
    for flag in ("--resume", "--config"):
        if flag in args and args.index(flag) + 1 < len(args):
            value = args[args.index(flag) + 1]
            if flag == "--resume":
                if (Path(value) / "config.yaml").is_file():
                    return Path(value) / "config.yaml"
                continue
            return Path(value)
    return Path(default_config)


def environment_of(path: Path) -> str:
    """Return the train module of the environment whose section the YAML file at `path` has (the code task when
    none; an unreadable file is left to the loader's error)."""
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return DEFAULT_ENV
    found = [module for section, module in ENV_SECTIONS.items() if isinstance(data, dict) and section in data]
    return found[0] if len(found) == 1 else DEFAULT_ENV


def task_config_of(path: Path) -> type | None:
    """Return the config sections class of the environment the YAML file at `path` names (None: the code task's,
    registered globally)."""
    module = environment_of(path)
    if module == DEFAULT_ENV:
        return None
    package = module.rsplit(".", 1)[0]
    config = importlib.import_module(f"{package}.config")
    return next(value for name, value in vars(config).items()
                if isinstance(value, type) and name.endswith("Config") and value.__module__ == config.__name__)


def main(trainer: str, default_config: str, argv: Sequence[str] | None = None) -> int:
    """Entry point of `train_<trainer>.py`: train on the environment the config names; return the exit code."""
    import sys
    args = list(sys.argv[1:] if argv is None else argv)
    module = importlib.import_module(environment_of(config_path(default_config, args)))
    if module.__name__ == "envs.arithmetic.train":
        return module.main(trainer, args)
    return module.main(trainer, default_config, args)
