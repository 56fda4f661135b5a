"""The code task's own config sections: `dataset` (which problems), `external` (the transitions between turns) and
`code_reward` (hidden tests or self tests).

They sit at the top level of a config file and are read into `config.task` (a
`CodeTaskConfig`): the library's `Config` holds only its own sections, and this environment registers these
(`register_task_config`) when `envs.code_generation` is imported.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Optional, Union

from cooprl.config import ConfigError, option, register_task_config


@dataclass
class DatasetSection:
    name: str = option("coop", "humaneval, coop (shipped cooperative set), or a hub id such as OpenMLRL/CoopHumanEval")
    type: str = option("coophumaneval", "dataset family", choices=("humaneval", "coophumaneval", "mbpp", "custom"))
    train_split: str = option("train[16:]", "training split with optional slice, e.g. test[33:163]")
    eval_split: str = option("test[:16]", "evaluation split with optional slice, e.g. test[:32]")
    path: Optional[str] = option(None, "local .json/.jsonl file of HumanEval-format records (overrides name)")


@dataclass
class ExternalSection:
    """The `external` section: how the next turn's prompts are built (the code task's transitions)."""
    mode: str = option("level_feedback", "how the next turn's prompt is built",
                       choices=("level_feedback", "plain", "expert_edits"))
    sandbox_slice: Union[int, str, None] = option(
        1, "asserts shown/run for feedback: n>0 first n, n<0 last |n|, 0/null/'all' every one")
    expert_model: str = option("deepseek-coder", "model of the expert_edits mode (OpenAI-compatible API)")
    external_prompt_passthrough: bool = option(False, "use the external prompt as is, without the agent's history")


@dataclass
class CodeRewardSection:
    """Which tests the code reward runs. Here and not in the library's `reward:` section (the executor and the
    pipeline of any task): what the tests are is this task's, and cooprl/ names no code concept."""
    type: str = option("hidden_tests", "hidden_tests: the problem's tests; self_tests: support among generated tests "
                       "(the problem's examples, a tester's asserts) weighted by reliability, no hidden test "
                       "(rewards/self_tests.py has the formula; one function only: single agent, planner_coder, "
                       "coder_tester)", choices=("hidden_tests", "self_tests"))
    cooperation: str = option("seed", "how the aux+main cooperation bonus is judged: seed (the paper's rule, on "
                              "main's code: +0.5 calls aux, +1.0 not a thin wrapper, -0.5 ignores its return) or "
                              "verified (paid only when runs with aux raising, passing an argument through "
                              "where its result is a move of it, returning one value, or returning other values "
                              "each fail a passing test to completion, and +1.0 only when aux alone fails one; "
                              "scaled by the share of tests passed; recommended for research: docs/rewards.md)",
                              choices=("seed", "verified"))


@dataclass
class AuxMainSection:
    """How the aux+main team sees each other (the code task with two agents)."""
    main_sees_aux: bool = option(False, "main's prompt shows the aux code of its own joint action (a sequential "
                                 "team: aux writes first, main reads it); false as upstream: main only knows that "
                                 "aux exists, so calling it is a guess. Every trainer trains with it, MADPO and MARLHF "
                                 "included (their candidates are such joint answers); madpo_iter and marlhf_iter "
                                 "then compare the policies' own candidates (comparator_policy current, "
                                 "comparator_candidate_budget shared)")


@dataclass
class CodePromptSection:
    """How the code prompts end (every role whose prompt ends with the problem's code: main, single, a coder)."""
    open_body: bool = option(False, "end the prompt inside the function: after the docstring, the body's first "
                             "indentation, so the model's first token is code, not prose (SmolLM2-135M wrote a "
                             "function body for the single-agent prompt in 10 of 64 samples with it, 3 of 64 "
                             "without: bench/function_rate.py). Not with planner_coder (its coder's prompt already "
                             "ends inside the body, under the plan)")


@dataclass
class CodeTaskConfig:
    """The code task's sections of a config file."""
    # its rules between keys, for docs/config.md (each one checked by `validate` and by tests/project/test_docs.py)
    RULES: ClassVar[tuple[str, ...]] = ("`external.sandbox_slice`: an int, `null` or the string `all` (checked at "
                                        "load).",)
    dataset: DatasetSection = option(DatasetSection(), "problems")
    external: ExternalSection = option(ExternalSection(), "transitions between turns")
    code_reward: CodeRewardSection = option(CodeRewardSection(), "which tests the code reward runs")
    aux_main: AuxMainSection = option(AuxMainSection(), "the aux+main team (two agents)")
    code_prompt: CodePromptSection = option(CodePromptSection(), "how the code prompts end")

    def validate(self) -> None:
        """Raise ConfigError for values that each key accepts alone but the task does not."""
        slice_ = self.external.sandbox_slice
        if isinstance(slice_, str) and slice_.lower() != "all":
            raise ConfigError(f"external.sandbox_slice: expected an int, null or 'all', got {slice_!r}")

    def run_label(self) -> str:
        """Return the dataset's short name, for run folder names (`<trainer>-<label>-<time>`)."""
        dataset = self.dataset
        return (dataset.path and Path(dataset.path).stem) or dataset.name.split("/")[-1]


register_task_config(CodeTaskConfig)
