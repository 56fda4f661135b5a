"""The planner_coder task's config sections: the code task's `dataset`, `external` and `code_reward`, and its own
`planner_coder`. Passed to the loader explicitly (`task_config=PlannerCoderConfig`); a config file's top-level
`planner_coder:` section is what makes the train_*.py scripts pick this environment (envs.environment_of)."""

from __future__ import annotations

from dataclasses import dataclass

from cooprl.config import option
from envs.code_generation.config import CodeTaskConfig


@dataclass
class PlannerCoderSection:
    revise: str = option("both", "what is revised after feedback: both (each agent revises its own with the "
                         "feedback) or decide (CollabCoder-style: the code when it is missing or does not parse, "
                         "else the plan, and the coder writes anew from the revised plan)", choices=("both", "decide"))
    plan_max_chars: int = option(400, "the plan shown to the coder is cut to this many characters", min=1)


@dataclass
class PlannerCoderConfig(CodeTaskConfig):
    """The planner_coder task's sections of a config file: the code task's, plus its own."""
    planner_coder: PlannerCoderSection = option(PlannerCoderSection(), "the planner+coder team")

    def run_label(self) -> str:
        """Return the label of run folder names: planner_coder-<dataset>."""
        return "planner_coder-" + super().run_label()
