"""The environments, and the one registry that names them.

`ENVIRONMENTS` maps an environment's name to its `Environment`: its config sections (read next to the library's),
what builds its `cooprl.task.Task`, and what it sets up before (the code tasks: the reward's executor). A config
file names its environment by the top-level section only that environment reads (`planner_coder:`,
`coder_tester:`, `arithmetic:`); none of them is the code task (`dataset`/`external`, which every older config has).
No `env:` key: the library's loader would have to know it, and cooprl/ names no environment.

A new environment is a folder under envs/ (config.py, task.py) and one entry here; `envs.launch` is the command
line every train_*.py runs. Tasks are built by functions that import them when called: a task pulls in torch,
which reading a config never needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from cooprl.config import Config, ConfigError, Run
from cooprl.task import Task
from envs.arithmetic.config import ArithmeticConfig
from envs.code_generation.config import CodeTaskConfig
from envs.coder_tester.config import CoderTesterConfig
from envs.planner_coder.config import PlannerCoderConfig


@dataclass(frozen=True)
class Environment:
    """A task environment: its name, the top-level config section that names it (None: the default environment),
    its config sections class, its task builder `build_task(run) -> Task` (the run's config and trainer section), and
    `setup(config)`, what must be in place before the task runs (None: nothing)."""

    name: str
    section: str | None
    config: type
    build_task: Callable[[Run], Task]
    setup: Callable[[Config], None] | None = None

    def prepare_task(self, run: Run) -> Task:
        """Return the task for `run`, after this environment's setup (training and evaluation both come here)."""
        if self.setup is not None:
            self.setup(run.config)
        return self.build_task(run)


def _code_task(run: Run) -> Task:
    from envs.code_generation.task import build_code_task
    return build_code_task(run)


def _planner_coder_task(run: Run) -> Task:
    from envs.planner_coder.task import build_planner_coder_task
    return build_planner_coder_task(run)


def _coder_tester_task(run: Run) -> Task:
    from envs.coder_tester.task import build_coder_tester_task
    return build_coder_tester_task(run)


def _arithmetic_task(run: Run) -> Task:
    from envs.arithmetic.task import build_arithmetic_task
    return build_arithmetic_task(run)


def _reward_executor(config: Config) -> None:
    from rewards.ray_pool import use_configured_executor
    use_configured_executor(config.reward)


ENVIRONMENTS: dict[str, Environment] = {env.name: env for env in (
    Environment("code_generation", None, CodeTaskConfig, _code_task, _reward_executor),
    Environment("planner_coder", "planner_coder", PlannerCoderConfig, _planner_coder_task, _reward_executor),
    Environment("coder_tester", "coder_tester", CoderTesterConfig, _coder_tester_task, _reward_executor),
    Environment("arithmetic", "arithmetic", ArithmeticConfig, _arithmetic_task),
)}
DEFAULT_ENVIRONMENT = ENVIRONMENTS["code_generation"]


def environment_of(data: dict[str, Any]) -> Environment:
    """Return the environment whose own top-level section the config file's mapping `data` holds (the code task
    when none, or when several: the loader then names the sections it does not know)."""
    found = [env for env in ENVIRONMENTS.values() if env.section is not None and env.section in data]
    return found[0] if len(found) == 1 else DEFAULT_ENVIRONMENT


def task_config_of(data: dict[str, Any]) -> type:
    """Return the config sections class of the environment `data` names (see `environment_of`)."""
    return environment_of(data).config


def environment_for(config: Config) -> Environment:
    """Return the environment whose sections `config` was read with (`config.task`'s class)."""
    for env in ENVIRONMENTS.values():
        if type(config.task) is env.config:
            return env
    raise ConfigError(f"the config's task sections ({type(config.task).__name__}) belong to no environment of "
                      f"envs.ENVIRONMENTS ({', '.join(ENVIRONMENTS)})")
