"""The coder_tester task's config sections: the code task's `dataset`, `external` and `code_reward`, and its own
`coder_tester`. Passed to the loader explicitly (`task_config=CoderTesterConfig`); a config file's top-level
`coder_tester:` section is what makes the train_*.py scripts pick this environment (envs.environment_of)."""

from __future__ import annotations

from dataclasses import dataclass

from cooprl.config import option
from envs.code_generation.config import CodeTaskConfig


@dataclass
class CoderTesterSection:
    reward_sharing: str = option("shared", "shared: both agents get coder + tester reward; individual: the coder "
                                 "its code reward, the tester its tests' reward (needs MAGRPO, IAC or single-turn "
                                 "MAAC; MADPO/MARLHF rank joint answers by one reward)",
                                 choices=("shared", "individual"))
    max_tests: int = option(5, "asserts of a tester completion that count (the first ones)", min=1)


@dataclass
class CoderTesterConfig(CodeTaskConfig):
    """The coder_tester task's sections of a config file: the code task's, plus its own."""
    coder_tester: CoderTesterSection = option(CoderTesterSection(), "the coder+tester team")

    def run_label(self) -> str:
        """Return the label of run folder names: coder_tester-<dataset>."""
        return "coder_tester-" + super().run_label()
