"""MAGRPO: multi-agent group-relative policy optimization (GRPO is the same with one agent).

One training step on one dataset item:
1. roll out the tree: G samples per agent at every node, joint actions (aligned or cross), shared rewards,
   child nodes from the task's transition until `num_turns` or early termination;
2. returns: reward + discount x mean return of the child node;
3. advantages: each agent's G samples at a node form a sibling group; advantage = return - group baseline;
4. buffer the samples; every `rollout_buffer_size` items, one policy-gradient step per agent
   (loss = -sum log pi(completion) x advantage, averaged over the buffer, optional k3 KL to the start model).
"""

from __future__ import annotations

import copy
import logging
from typing import Any

import torch

from cooprl.agents import Agent, build_team
from cooprl.config import Config
from cooprl.evaluation import evaluate_team, evaluation_settings, tree_metrics
from cooprl.policy_update import TrainSample, policy_gradient_step
from cooprl.rollout import RolloutSettings, advantages, iter_nodes, rollout, sample_returns
from cooprl.task import Task
from cooprl.text import safe_print

log = logging.getLogger(__name__)


def reward_processor(config: Config, task: Task):
    """Return the function mapping a raw reward to the training reward: scale, then shift (default -max)."""
    cfg = config.reward_processor
    if not cfg.enabled:
        return lambda r: r
    shift = cfg.shift if cfg.shift is not None else -task.max_reward
    return lambda r: r * cfg.scale_factor + shift


class MAGRPO:
    """The MAGRPO algorithm for the shared training loop (see cooprl.trainers.loop)."""

    def __init__(self, config: Config, section: Any, task: Task, team: list[Agent]):
        self.config, self.section, self.task, self.team = config, section, task, team
        self.models = [agent.model for agent in team]
        self.process_reward = reward_processor(config, task)
        self.buffer: list[list[TrainSample]] = [[] for _ in team]
        self.buffered_items = 0
        self.references = [frozen_reference(agent.model) for agent in team] if section.reference_kl_coef > 0 else None

    # ------------------------------------------------------------------------------------------ rollout
    def _sample(self, agent: int, prompts: list[str], n: int):
        return self.team[agent].sample(prompts, n)

    def rollout_settings(self, evaluation: bool = False) -> RolloutSettings:
        """Return the tree shape: G samples per node in training; n chains of single samples in evaluation."""
        s = self.section
        if evaluation:
            return evaluation_settings(s, self.process_reward)
        return RolloutSettings(num_turns=s.num_turns, samples_per_turn=[s.num_generations] * s.num_turns,
                               joint_mode=s.joint_mode, discount=s.discount,
                               early_termination_threshold=s.early_termination_threshold,
                               process_reward=self.process_reward)

    # ------------------------------------------------------------------------------------------ training
    def train_step(self, item: Any, step: int) -> dict[str, float]:
        """Roll out one item, buffer its samples with advantages, update when the buffer is full; return metrics."""
        root = rollout([item], self.task, self._sample, self.rollout_settings())[0]
        num_joint = 0
        for node in iter_nodes(root):
            num_joint += len(node.joint)
            for a, agent in enumerate(self.team):
                adv = advantages(sample_returns(node, a), self.section.advantage_mode,
                                 self.section.advantage_normalization)
                for completion, value in zip(node.samples[a], adv):
                    self.buffer[a].append(TrainSample(completion.prompt_ids, completion.completion_ids, value))
        self.buffered_items += 1
        metrics = tree_metrics([root], self.section.num_turns)
        if self.buffered_items >= self.section.rollout_buffer_size:
            metrics.update(self.update())
        metrics["env_steps"] = num_joint
        if self.config.output.verbose:
            _print_tree(root, self.task)
        return metrics

    def update(self) -> dict[str, float]:
        """Take one optimizer step per agent on the buffered samples; return per-agent loss metrics."""
        metrics = {}
        for a, agent in enumerate(self.team):
            # Default batch: all of an agent's samples of one item (its whole tree, items in buffer order), so the
            # token trie of completion_logprobs runs the prefixes shared across the tree (turn-1 prompt) once.
            per_item = -(-len(self.buffer[a]) // max(self.buffered_items, 1))
            result = policy_gradient_step(
                agent.model, agent.optimizer, self.buffer[a], agent.tokenizer.pad_token_id,
                batch_size=self.section.train_batch_size or per_item, max_grad_norm=self.section.max_grad_norm,
                kl_coef=self.section.reference_kl_coef,
                reference=self.references[a] if self.references else None)
            metrics.update({f"agent_{a}/{k}": v for k, v in result.items()})
        self.buffer = [[] for _ in self.team]
        self.buffered_items = 0
        return metrics

    # ------------------------------------------------------------------------------------------ evaluation
    @torch.no_grad()
    def evaluate(self, items: list[Any]) -> dict[str, float]:
        """Return eval metrics per turn (reward levels, pass rate, pass@k, aux usage) on `items`."""
        return evaluate_team(items, self.task, self._sample, self.section, self.process_reward)

    # ------------------------------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """Return what a checkpoint needs besides the weights: optimizers and the rollout buffer."""
        return {"optimizers": [agent.optimizer.state_dict() for agent in self.team],
                "buffer": self.buffer, "buffered_items": self.buffered_items}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore optimizers and buffer saved by `state_dict`."""
        for agent, opt_state in zip(self.team, state["optimizers"]):
            agent.optimizer.load_state_dict(opt_state)
        self.buffer, self.buffered_items = state["buffer"], state["buffered_items"]


def frozen_reference(model: Any) -> Any:
    """Return the frozen start model of `model` for reference log-probs: with LoRA the model with its adapters
    disabled (no copy, see _AdapterOffView); otherwise a frozen deep copy."""
    if hasattr(model, "disable_adapter"):
        return _AdapterOffView(model)
    reference = copy.deepcopy(model).eval()
    for p in reference.parameters():
        p.requires_grad_(False)
    return reference


class _AdapterOffView:
    """Calls a peft model with its adapters disabled: the frozen start model, without a second copy."""

    def __init__(self, model: Any):
        self.model = model

    def parameters(self):
        return self.model.parameters()

    def modules(self):
        return self.model.modules()

    def __call__(self, **kwargs: Any) -> Any:
        with self.model.disable_adapter():
            return self.model(**kwargs)


def _print_tree(root: Any, task: Task) -> None:
    for node in iter_nodes(root):
        for j, score in enumerate(node.scores):
            safe_print(f"--- {task.item_id(node.item)} turn {node.turn + 1} joint {j}: reward {score.total:.3f}")
            for a, text in enumerate(node.joint_texts(j)):
                safe_print(f"[agent {a}]\n{text}")


def build_magrpo(config: Config, trainer: str, task: Task) -> MAGRPO:
    """Return a MAGRPO algorithm (GRPO when the task has one policy) with one agent per policy of the task.

    The task, not the section, says how many policies play: a centralized task has one model for both roles.
    The task checked the section's role count when it was built.
    """
    section = config.trainer(trainer)
    team = build_team(config, section, task.num_agents, task.stop_strings)
    return MAGRPO(config, section, task, team)
