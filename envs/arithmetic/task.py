"""The arithmetic task as a `cooprl.task.Task`: agent i says a number, the team is rewarded by how close the sum
of the numbers comes to the item's target.

Reward of a joint answer: 1 - min(|sum - target|, 10) / 10 (1.0 exactly on target, 0 ten or more away); a text
without a number counts as 0. The next turn tells each agent the sum its team reached.
"""

from __future__ import annotations

import random
import re
from typing import Any, Sequence

from cooprl.config import Run
from cooprl.task import Score, Task

MAX_REWARD = 1.0
_NUMBER = re.compile(r"-?\d{1,6}")


def said_number(text: str) -> int:
    """Return the first integer in `text` (at most 6 digits), 0 when there is none."""
    found = _NUMBER.search(text or "")
    return int(found.group()) if found else 0


def joint_reward(target: int, texts: Sequence[str]) -> Score:
    """Return the team's Score for the agents' `texts` on `target` (see the module doc)."""
    total = sum(said_number(t) for t in texts)
    miss = abs(total - target)
    return Score(total=1.0 - min(miss, 10) / 10, metrics={"miss": float(miss)}, success=miss == 0, details=total)


def first_prompts(target: int, num_agents: int) -> list[str]:
    """Return each agent's prompt for `target`."""
    return [f"Team of {num_agents}: the numbers you say add up to {target}. Agent {i + 1}, your number:"
            for i in range(num_agents)]


def build_arithmetic_task(run: Run) -> Task:
    """Return the Task for `run`'s section (its `num_agents` agents) and `config.task.arithmetic`."""
    cfg = run.config.task.arithmetic
    num_agents = run.section.num_agents
    rng = random.Random(cfg.seed)
    targets = [rng.randint(0, cfg.max_target) for _ in range(cfg.num_train + cfg.num_eval)]

    def score(items: Sequence[int], joints: Sequence[Sequence[str]]) -> list[Score]:
        return [joint_reward(target, joint) for target, joint in zip(items, joints)]

    def next_prompts(target: int, histories: Sequence[Sequence[tuple[str, str]]], joint: Sequence[str],
                     score_: Score) -> list[str]:
        return [f"{history[-1][0]} {history[-1][1]}\nThe team's numbers added up to {score_.details}, not {target}. "
                f"Your new number:" for history in histories]

    def item_id(target: Any) -> str:
        return f"target={target}"

    return Task(name="arithmetic", num_agents=num_agents, train_items=targets[:cfg.num_train],
                eval_items=targets[cfg.num_train:], first_prompts=lambda t: first_prompts(t, num_agents),
                score=score, next_prompts=next_prompts, max_reward=MAX_REWARD, item_id=item_id)
