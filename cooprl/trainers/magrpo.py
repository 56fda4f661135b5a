"""MAGRPO: multi-agent group-relative policy optimization (GRPO is the same with one agent).

One training step on one dataset item:
1. roll out the tree: G samples per agent at every node, joint actions (aligned or cross), shared rewards,
   child nodes from the task's transition until `num_turns` or early termination;
2. returns: reward + discount x mean return of the child node;
3. advantages: each agent's G samples at a node form a sibling group; advantage = return - group baseline,
   standardized within the group (`advantage_normalization`). In cross mode a sample's return is the sum
   (`cross_return: sum`, the default) or the mean of the returns of the G^(N-1) joint actions it is in;
4. buffer the sibling groups and update (loss = -sum log pi(completion) x advantage, averaged over the samples of
   an optimizer step, optional k3 KL to the start model), on one of two schedules (`update_schedule`):
   - `nodes` (the default): `rollout_buffer_size` counts nodes (an agent's sibling group at one node); each time an
     agent's buffer holds that many, it is trained turn by turn (turn 1's nodes first), the nodes of a turn in a
     shuffled order, one optimizer step per `train_batch_size` nodes, its samples in one forward;
   - `items`: `rollout_buffer_size` counts dataset items; one optimizer step per agent on all of their samples, the
     samples of one item's whole tree in one forward (its shared turn-1 prompt runs once: the faster update).
   What the buffer holds at the end of an epoch is trained then (`end_epoch`).
With `reference_kl_coef` > 0 in the `reward` form (the default), each sample's return at its node is lowered by
coef x its k3 KL to the frozen start model (scored once after the rollout, no gradient) before the group baseline;
in the `loss` form the KL is a term of the policy loss instead.
With `agent_model.vllm_importance_cap` each sample's tokens carry truncated importance weights against vLLM's sampler,
scored when its group is built (before any update of the step): `cooprl.update.policy_gradient`.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

import torch

from cooprl.config import ConfigError, MAGRPOSection, Run
from cooprl.parallel.context import Parallel
from cooprl.rollout.evaluation import evaluation_settings
from cooprl.rollout.tree import RolloutSettings, iter_nodes, pipeline_settings, rollout, sample_returns, tree_metrics
from cooprl.samples import NodeGroup
from cooprl.task import Task, all_first_prompts
from cooprl.trainers.base import TeamAlgorithm
from cooprl.trainers.team import Agent, build_team
from cooprl.update.engine import train_step
from cooprl.update.losses import group_advantages, kl_penalized
from cooprl.update.policy_gradient import policy_gradient_metrics, policy_gradient_term, sampled_kls

log = logging.getLogger(__name__)


class MAGRPO(TeamAlgorithm):
    """The MAGRPO algorithm for the shared training loop (see cooprl.trainers.loop)."""

    section: MAGRPOSection

    def __init__(self, run: Run[MAGRPOSection], task: Task, team: list[Agent], parallel: Parallel | None = None):
        section = run.section
        super().__init__(run, task, team, references=section.reference_kl_coef > 0, parallel=parallel)
        self.buffer: list[list[NodeGroup]] = [[] for _ in team]   # per agent, in tree order (breadth-first)
        self.buffered_items = 0                                   # items of the buffer (update_schedule items)
        self.kl_in_reward = self.references is not None and section.reference_kl_form == "reward"
        self.step_updates: list[dict[str, float]] = []             # the current step's updates (for end_epoch)

    # ------------------------------------------------------------------------------------------ rollout
    def rollout_settings(self, evaluation: bool = False) -> RolloutSettings:
        """Return the tree shape: G samples per node in training; n chains of single samples in evaluation."""
        s = self.section
        if evaluation:
            return evaluation_settings(s, self.process_reward)
        return RolloutSettings(num_turns=s.num_turns, samples_per_turn=[s.num_generations] * s.num_turns,
                               joint_mode=s.joint_mode, discount=s.discount,
                               early_termination_threshold=s.early_termination_threshold,
                               process_reward=self.process_reward, run_agents=self.runner.sample,
                               **pipeline_settings(self.config))

    # ------------------------------------------------------------------------------------------ training
    def train_step(self, item: Any, step: int) -> dict[str, float]:
        """Roll out one item, buffer its sibling groups with advantages, update when the buffer is full (see the
        module docstring for the two schedules); return metrics."""
        # every node's groups first: their advantages (and reward-form KLs) come from the policy that sampled them,
        # before any update of this step trains on them; sharded agents are gathered meanwhile
        node_groups, kls = [], [[] for _ in self.team]
        with self.parallel.sampling(*self.models):
            root = rollout([item], self.task, self._sample, self.rollout_settings())[0]
            for node in iter_nodes(root):
                node_groups.append(self.sibling_groups(node, kls))
        metrics = tree_metrics([root], self.section.num_turns)
        if self.kl_in_reward:
            metrics.update({f"agent_{a}/kl": sum(values) / len(values) for a, values in enumerate(kls)})
        updates = self.step_updates = []
        for groups in node_groups:
            for a, group in enumerate(groups):
                self.buffer[a].append(group)
            if self.section.update_schedule == "nodes" and len(self.buffer[0]) >= self.section.rollout_buffer_size:
                updates.append(self.update())
        self.buffered_items += 1
        if self.section.update_schedule == "items" and self.buffered_items >= self.section.rollout_buffer_size:
            updates.append(self.update())
        metrics.update(merge_update_metrics(updates))
        metrics["env_steps"] = sum(len(node.joint) for node in iter_nodes(root))
        if self.config.output.verbose:
            self.print_tree(root)
        return metrics

    def sibling_groups(self, node: Any, kls: list[list[float]] | None = None) -> list[NodeGroup]:
        """Return each agent's sibling group at `node`: its G samples with their advantages. In the reward form of
        the reference KL each sample's return is first lowered by coef x its sampled KL (appended to `kls[agent]`)."""
        s, groups = self.section, []
        for a in range(len(self.team)):
            samples = self.train_samples(a, node.samples[a])
            returns = sample_returns(node, a, s.cross_return)
            if self.kl_in_reward:
                agent = self.team[a]
                sampled = sampled_kls(agent.model, self.references[a], samples, agent.tokenizer.pad_token_id)
                returns = kl_penalized(returns, sampled, s.reference_kl_coef)
                if kls is not None:
                    kls[a].extend(sampled)
            adv = group_advantages(returns, s.advantage_mode, s.advantage_normalization)
            for sample, value in zip(samples, adv):
                sample.advantage = value
            groups.append(NodeGroup(node.turn, samples))
        return groups

    def end_epoch(self, metrics: dict[str, float]) -> None:
        """At an epoch's end, train on what the buffers still hold (nodes short of `rollout_buffer_size` would
        otherwise never be trained) and merge that update into `metrics`, those of the
        epoch's last step."""
        if any(self.buffer):
            self.step_updates.append(self.update())
            metrics.update(merge_update_metrics(self.step_updates))

    def update(self) -> dict[str, float]:
        """Train every agent on its buffer and empty it; return per-agent metrics (summed or averaged over the
        optimizer steps taken, see merge_update_metrics). The agents' optimizer batches are drawn first, in agent
        order; their steps then run one agent after the other, or concurrently under parallel_training mp."""
        metrics = {}
        plans = [self._optimizer_batches(a) for a in range(len(self.team))]
        per_agent = self.runner.update(lambda a: [self._step(a, groups, size) for groups, size in plans[a]],
                                       len(self.team))
        for a, steps in enumerate(per_agent):
            metrics.update({f"agent_{a}/{k}": v for k, v in merge_step_metrics(steps).items()})
        self.buffer = [[] for _ in self.team]
        self.buffered_items = 0
        return metrics

    def _optimizer_batches(self, a: int) -> list[tuple[list[NodeGroup], int]]:
        """Return agent `a`'s optimizer steps of this update: (the node groups of each step, its forward batch)."""
        s = self.section
        if s.update_schedule == "nodes":
            # all of a step's samples in one forward: the token trie runs each shared prefix once (a node's prompt
            # for its G samples, the turn-1 prompt that turn-2 prompts start with), and the step's gradient is the
            # same however its samples are batched (one forward per node before). What still separates it from
            # `items`: a step per turn, so the turn-1 prompt runs in each and the optimizer steps twice.
            return [(batch, sum(len(g.samples) for g in batch))
                    for batch in node_batches(self.buffer[a], s.train_batch_size or s.rollout_buffer_size)]
        # One step on everything. Default forward batch: all of an agent's samples of one item (its whole tree, items in
        # buffer order), so the token trie of completion_logprobs runs the prefixes shared across the tree (the turn-1
        # prompt) once.
        samples = [x for group in self.buffer[a] for x in group.samples]
        per_item = -(-len(samples) // max(self.buffered_items, 1))
        return [(self.buffer[a], s.train_batch_size or per_item)]

    def _step(self, agent_index: int, groups: list[NodeGroup], forward_batch: int) -> dict[str, float]:
        """Take one optimizer step of `agent_index` on the samples of `groups`; return its metrics."""
        agent = self.team[agent_index]
        kl_in_loss = self.references is not None and not self.kl_in_reward
        kl_coef = self.section.reference_kl_coef if kl_in_loss else 0.0
        samples = [x for group in groups for x in group.samples]
        policy = policy_gradient_term(agent.model, samples, agent.tokenizer.pad_token_id, batch_size=forward_batch,
                                      kl_coef=kl_coef, reference=self.references[agent_index] if kl_in_loss else None)
        result = train_step([agent.optimizer], [policy], weight=len(samples), max_grad_norm=self.section.max_grad_norm,
                            sync=self.parallel.sync_of(agent.model), models=[agent.model])
        return policy_gradient_metrics(samples, policy, result, kl_coef)

    # ------------------------------------------------------------------------------------------ checkpoints
    def extra_state(self) -> dict[str, Any]:
        """Return the rollout buffer (the optimizers are saved by TeamAlgorithm)."""
        return {"buffer": self.buffer, "buffered_items": self.buffered_items}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Restore the buffer saved by `extra_state`."""
        self.buffer, self.buffered_items = state["buffer"], state["buffered_items"]


def node_batches(groups: list[NodeGroup], size: int) -> list[list[NodeGroup]]:
    """Return the optimizer batches of a full buffer (`update_schedule: nodes`): the nodes grouped by turn (turn 1
    first), each turn's nodes in a random order (torch's generator, so a resumed run draws the same), cut into
    batches of `size` nodes."""
    batches = []
    for turn in sorted({g.turn for g in groups}):
        nodes = [g for g in groups if g.turn == turn]
        nodes = [nodes[i] for i in torch.randperm(len(nodes)).tolist()]
        batches += [nodes[start:start + size] for start in range(0, len(nodes), size)]
    return batches


def merge_step_metrics(steps: list[dict[str, float]]) -> dict[str, float]:
    """Return the metrics of several optimizer steps of one agent as one: counts summed (`trained_samples`,
    `skipped_nonfinite`), `is_weight_max` the largest, the rest averaged, plus `optimizer_steps`."""
    summed = ("trained_samples", "skipped_nonfinite")
    merged = {k: _merger(k, summed)([m[k] for m in steps if k in m]) for k in steps[0]} if steps else {}
    return {**merged, "optimizer_steps": float(len(steps))}


def merge_update_metrics(updates: list[dict[str, float]]) -> dict[str, float]:
    """Return the metrics of the updates one training step took (update_schedule nodes can take 0, 1 or more):
    per key the mean, except `optimizer_steps`, `trained_samples` and `skipped_nonfinite`, which are summed, and
    `is_weight_max`, the largest."""
    summed = ("optimizer_steps", "trained_samples", "skipped_nonfinite")
    keys = dict.fromkeys(k for update in updates for k in update)
    return {k: _merger(k, summed)([u[k] for u in updates if k in u]) for k in keys}


def _merger(key: str, summed: tuple[str, ...]) -> Callable[[list[float]], float]:
    """Return how the values of metric `key` (agent-prefixed or not) over several steps merge into one."""
    if key.endswith(summed):
        return sum
    return max if key.endswith("is_weight_max") else _mean


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def build_magrpo(run: Run[MAGRPOSection], task: Task, parallel: Parallel | None = None) -> MAGRPO:
    """Return a MAGRPO algorithm (GRPO when the task has one policy) with one agent per policy of the task.

    The task, not the section, says how many policies play: a centralized task has one model for both roles.
    The task checked the section's role count when it was built.
    """
    trainer, section = run.trainer, run.section
    if section.num_generations < 2 and section.advantage_mode != "raw":
        raise ConfigError(f"{trainer}.num_generations={section.num_generations}: MAGRPO's advantages are relative to "
                          f"the group of a node's samples; with one sample every advantage is 0 and nothing trains "
                          f"(advantage_mode {section.advantage_mode}): set it to 2 or more")
    team = build_team(run, task.num_agents, task.stop_strings, parallel, lambda: all_first_prompts(task))
    return MAGRPO(run, task, team, parallel)
