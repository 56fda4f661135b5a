"""A scripted task for trainer tests (no sandbox, a reward that is a pure function of the completion text), and the
one-term policy-gradient step the update tests take."""

from __future__ import annotations

from typing import Any, Sequence

import torch

from cooprl.parallel import distributed
from cooprl.parallel.context import SINGLE, Parallel, Sync
from cooprl.samples import TrainSample
from cooprl.task import Score, Task
from cooprl.tracking import read_metrics as read_events
from cooprl.update.engine import optimizer_step
from cooprl.update.policy_gradient import LossKL, policy_gradient_metrics, policy_gradient_term


def policy_gradient_step(model: Any, optimizer: torch.optim.Optimizer, samples: Sequence[TrainSample], pad_id: int,
                         *, batch_size: int | None = None, max_grad_norm: float | None = 1.0, kl_coef: float = 0.0,
                         reference: Any = None, sync: Sync = Sync.NONE) -> dict[str, float]:
    """Take one optimizer step of `model` on the policy loss of `samples` alone; return its metrics. `sync`
    REPLICATED: the step of a ddp run of the current process group (a sharded model syncs as sharded)."""
    kl = LossKL(reference, kl_coef) if reference is not None and kl_coef > 0 else None
    parallel = Parallel("ddp", distributed.current()) if sync is Sync.REPLICATED else SINGLE
    term = policy_gradient_term(model, samples, pad_id, batch_size=batch_size, kl=kl)
    result = optimizer_step([optimizer], [term], [model], weight=len(samples), max_grad_norm=max_grad_norm,
                            parallel=parallel)
    return policy_gradient_metrics(samples, term, result, kl).reduce()


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
                eval_items=["eval 0:",
                            "eval 1:"], first_prompts=lambda item: [f"{item} agent {a}" for a in range(num_agents)],
                score=score, next_prompts=next_prompts, max_reward=1.0)


TIMING_KEYS = ("wall_time", "time/step_s", "time/eval_s")


def read_metrics(run_dir) -> list[dict]:
    """Return the events of `run_dir`/metrics.jsonl (`cooprl.tracking.read_metrics`) without their timing keys
    (`TIMING_KEYS`): two runs that compute the same numbers differ in those."""
    return [{k: v for k, v in e.items() if k not in TIMING_KEYS} for e in read_events(run_dir)]
