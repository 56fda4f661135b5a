"""The records a rollout buffer holds between optimizer steps, and that a checkpoint saves with it.

They sit on the ground floor (torch only) so that persistence (`cooprl.checkpoint`) can name the classes it may
rebuild without importing the trainers that fill them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class TrainSample:
    """One completion to train on: its prompt and completion ids, its advantage, and the importance weight of each
    of its tokens (vllm_importance_cap; None: every token weighs 1)."""

    prompt_ids: torch.Tensor
    completion_ids: torch.Tensor
    advantage: float
    importance_weights: torch.Tensor | None = None   # 1-D float, one per completion id (`importance_weights`)
    truncated: bool = False                          # the completion hit max_new_tokens before its end
    sampling_logps: torch.Tensor | None = None       # 1-D, the sampling policy's log-prob of each id (num_iterations)


@dataclass
class NodeGroup:
    """One agent's samples at one tree node (its sibling group), advantages set: the unit MAGRPO's buffer holds."""

    turn: int                   # 0-based turn of the node
    samples: list[TrainSample]


@dataclass
class CriticSample:
    """What one critic saw at one turn of one episode: its input ids (value read at the last), value, TD target."""

    ids: torch.Tensor
    value: float
    target: float


@dataclass
class Step:
    """One turn of one actor-critic episode: each agent's action (advantage set at update time), each critic's
    sample, the turn, and each agent's own TD target (its critic's bootstrap, its own reward: they differ with a
    reward-form KL)."""

    actions: list[TrainSample]
    critics: list[CriticSample]
    turn: int = 0
    targets: list[float] | None = None
    kls: list[float] | None = None    # each agent's sampled KL to its start model (reward form), for the metrics


BUFFER_RECORDS = (TrainSample, NodeGroup, Step, CriticSample)
