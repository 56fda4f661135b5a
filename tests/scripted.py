"""A scripted task for trainer tests: no sandbox, a reward that is a pure function of the completion text."""

from __future__ import annotations

from cooprl.task import Score, Task
from cooprl.tracking import read_metrics as read_events


def letter_reward(text: str) -> float:
    """Reward = share of the letter 'a' among the first 8 characters (a smooth, learnable target)."""
    head = text[:8]
    return head.count("a") / 8 if head else 0.0


def scripted_task(num_agents: int = 2, items: int = 6) -> Task:
    """Return a Task whose items are short strings and whose joint reward is the mean letter reward."""
    def score(batch_items, joints):
        return [Score(sum(letter_reward(t) for t in joint) / len(joint),
                      {"length": float(sum(len(t) for t in joint))}, success=False) for joint in joints]

    def next_prompts(item, histories, joint, score_):
        return [f"{h[-1][0]}{h[-1][1]}\nagain:" for h in histories]

    return Task(name="scripted", num_agents=num_agents, train_items=[f"item {i}:" for i in range(items)],
                eval_items=["eval 0:", "eval 1:"], first_prompts=lambda item: [f"{item} agent {a}" for a in range(num_agents)],
                score=score, next_prompts=next_prompts, max_reward=1.0)


TIMING_KEYS = ("wall_time", "time/step_s", "time/eval_s")


def read_metrics(run_dir) -> list[dict]:
    """Return the events of `run_dir`/metrics.jsonl (`cooprl.tracking.read_metrics`) without their timing keys
    (`TIMING_KEYS`): two runs that compute the same numbers differ in those."""
    return [{k: v for k, v in e.items() if k not in TIMING_KEYS} for e in read_events(run_dir)]
