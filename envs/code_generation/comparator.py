"""What the code task gives the preference trainers' comparators (through its Task): its joint answer format and
an API client.

A centralized comparator writes aux and main in one answer to `centralized_prompt` (style and answer form
from the trainer's `centralized_prompt` / `centralized_answer`), stops at `</main>` when bounded, and its
answer is split by `parse_joint_answer` into the two agents' texts. The API comparator uses the same
OpenAI-compatible client as the expert_edits transition.
"""

from __future__ import annotations

from typing import Any

from cooprl.config import TrainerSection
from cooprl.task import JointFormat
from envs.code_generation.prompts import AUX_HEADER, centralized_prompt, centralized_stop_strings, parse_joint_answer
from envs.code_generation.transitions import make_expert_client


def code_joint_format(section: TrainerSection) -> JointFormat:
    """Return how one model writes [aux, main] in one answer, with `section`'s prompt style and answer form."""
    style, answer = section.centralized_prompt, section.centralized_answer

    def split(problem: Any, text: str) -> list[str]:
        # The aux agent's prompt ends with `def aux(`: its text continues that header, as its own samples do.
        # The main function stays whole (its prompt's header may differ); the reward accepts a restarted header.
        parsed = parse_joint_answer(text, problem, answer, style)
        return [parsed.aux.removeprefix(AUX_HEADER), parsed.main]

    return JointFormat(prompt=lambda problem: centralized_prompt(problem, style, answer), split=split,
                       stop_strings=tuple(centralized_stop_strings(answer)))


def api_client(model: str, max_tokens: int, base_url: str | None = None, api_key: str | None = None) -> Any:
    """Return a chat client for `model` at `base_url` with `api_key` (None: from the environment; ValueError when
    the API's URL or key is not set)."""
    return make_expert_client(model, base_url=base_url, api_key=api_key, max_tokens=max_tokens)
