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
With `agent_model.shared_policy` one model plays every agent: an update's k-th optimizer step trains it on the sum of
every agent's k-th step's loss (`shared_update`; docs/algorithms.md).
With `agent_model.vllm_importance_cap` each sample's tokens carry truncated importance weights against vLLM's sampler,
scored when its group is built (before any update of the step): `cooprl.update.policy_gradient`.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

import torch

from cooprl.config import ConfigError, MAGRPOSection, Run
from cooprl.metrics import STEPS, SUM, Metrics
from cooprl.parallel.context import Parallel
from cooprl.rollout.evaluation import evaluation_settings
from cooprl.rollout.tree import RolloutSettings, iter_nodes, pipeline_settings, rollout, sample_returns, tree_metrics
from cooprl.samples import NodeGroup
from cooprl.task import Task, all_first_prompts
from cooprl.trainers.base import TeamAlgorithm, policy_objective
from cooprl.trainers.team import Agent, build_team
from cooprl.update.engine import shared_policy_step
from cooprl.update.losses import group_advantages, kl_penalized
from cooprl.update.policy_gradient import policy_gradient_term, sampled_kls

log = logging.getLogger(__name__)


class MAGRPO(TeamAlgorithm):
    """The MAGRPO algorithm for the shared training loop (see cooprl.trainers.loop)."""

    section: MAGRPOSection

    def __init__(self, run: Run[MAGRPOSection], task: Task, team: list[Agent], parallel: Parallel | None = None):
        section = run.section
        super().__init__(run, task, team, references=section.reference_kl_coef > 0, parallel=parallel)
        self.buffer: list[list[NodeGroup]] = [[] for _ in team]   # per agent, in tree order (breadth-first)
        self.buffered_items = 0                                   # items of the buffer (update_schedule items)
        self.objective = policy_objective(section)

    # ------------------------------------------------------------------------------------------ rollout
    def rollout_settings(self, evaluation: bool = False) -> RolloutSettings:
        """Return the tree shape: G samples per node in training; n chains of single samples in evaluation."""
        s = self.section
        if evaluation:
            return evaluation_settings(s, self.process_reward)
        return RolloutSettings(num_turns=s.num_turns, samples_per_turn=[s.num_generations] * s.num_turns,
                               joint_mode=s.joint_mode, discount=s.discount,
                               early_termination_threshold=s.early_termination_threshold,
                               process_reward=self.process_reward, run_agents=self.runner.run_sampling,
                               **pipeline_settings(self.config))

    # ------------------------------------------------------------------------------------------ training
    def train_step(self, item: Any, step: int) -> Metrics:
        """Roll out one item, buffer its sibling groups with advantages, update when the buffer is full (see the
        module docstring for the two schedules); return the step's metrics."""
        # every node's groups first: their advantages (and reward-form KLs) come from the policy that sampled them,
        # before any update of this step trains on them; sharded agents are gathered meanwhile
        root, per_node, metrics = self.rolled_out(item)
        if self.kl_in_reward:
            for a in range(len(self.team)):
                kls = [kl for _, node_kls in per_node for kl in node_kls[a]]
                metrics.add(f"agent_{a}/kl", sum(kls) / len(kls))
        for groups, _ in per_node:
            for a, group in enumerate(groups):
                if group is not None:
                    self.buffer[a].append(group)
            if (self.section.update_schedule == "nodes"
                    and max(map(len, self.buffer)) >= self.section.rollout_buffer_size):
                metrics.merge(self.update())
        self.buffered_items += 1
        if self.section.update_schedule == "items" and self.buffered_items >= self.section.rollout_buffer_size:
            metrics.merge(self.update())
        metrics.add("env_steps", sum(len(node.joint) for node in iter_nodes(root)), SUM)
        if self.config.output.verbose:
            self.print_tree(root)
        return metrics

    def rolled_out(self, item: Any) -> tuple[Any, list[tuple[list[NodeGroup | None], list[list[float]]]], Metrics]:
        """Return `item`'s rollout tree, each node's sibling groups and sampled KLs (`sibling_groups`; a tied group
        None where `tied_groups` drops it), and the rollout's metrics. `tied_groups: resample` rolls the item out
        again while a turn-1 group is tied, at most `max_resamples` times: a node's children grow from its samples,
        so a new turn-1 node means a new tree; a tied later node is dropped, as re-sampling it alone would change
        its parent's return under its siblings' advantages."""
        s, resamples = self.section, 0
        with self.parallel.sampling(*self.models):
            while True:
                root = rollout([item], self.task, self.sample_agent, self.rollout_settings())[0]
                nodes = list(iter_nodes(root))
                tied = [[_tied(sample_returns(node, a, s.cross_return)) for a in range(len(self.team))]
                        for node in nodes]
                if s.tied_groups != "resample" or resamples >= s.max_resamples or not any(tied[0]):
                    break
                resamples += 1
            per_node = [self.sibling_groups(node) for node in nodes]
        metrics = Metrics(tree_metrics([root], s.num_turns))
        for turn in range(s.num_turns):
            at_turn = [t for node, node_tied in zip(nodes, tied) if node.turn == turn for t in node_tied]
            if at_turn:
                metrics.add(f"tied_groups/turn_{turn + 1}", sum(at_turn) / len(at_turn))
        if s.tied_groups != "train":
            per_node = [([None if t else g for g, t in zip(groups, node_tied)], kls)
                        for (groups, kls), node_tied in zip(per_node, tied)]
            metrics.add("tied_groups/dropped", sum(map(sum, tied)), SUM)
            metrics.add("tied_groups/resamples", resamples, SUM)
        return root, per_node, metrics

    def sibling_groups(self, node: Any) -> tuple[list[NodeGroup], list[list[float]]]:
        """Return each agent's sibling group at `node` (its G samples with their advantages) and each sample's
        sampled KL (empty lists unless the reference KL is in the reward, where it lowers each return first)."""
        section, groups, kls = self.section, [], []
        for a, agent in enumerate(self.team):
            samples = self.train_samples(a, node.samples[a])
            returns = sample_returns(node, a, section.cross_return)
            kl = []
            if self.kl_in_reward:
                kl = sampled_kls(agent.model, self.references[a], samples, agent.tokenizer.pad_token_id)
                returns = kl_penalized(returns, kl, section.reference_kl_coef)
            advantages = group_advantages(returns, section.advantage_mode, section.advantage_normalization)
            groups.append(NodeGroup(node.turn, [replace(x, advantage=adv) for x, adv in zip(samples, advantages)]))
            kls.append(kl)
        return groups, kls

    def end_epoch(self) -> Metrics:
        """At an epoch's end, train on what the buffers still hold (nodes short of `rollout_buffer_size` would
        otherwise never be trained); return that update's metrics."""
        return self.update() if any(self.buffer) else Metrics()

    def update(self) -> Metrics:
        """Train every agent on its buffer and empty it; return each agent's metrics of its optimizer steps. The
        agents' optimizer batches are drawn first, in agent order; their steps then run one agent after the other,
        or concurrently under parallel_training mp (a shared policy's: `shared_update`)."""
        plans = [optimizer_batches(self.buffer[a], self.section, self.buffered_items) for a in range(len(self.team))]
        if self.shared_agents:
            return self.shared_update(plans)

        def train_agent(a: int) -> list[Metrics]:
            # num_iterations passes over the same steps: this rollout's samples, never a later one's
            passes = range(self.section.num_iterations)
            return [self.policy_step(a, [x for g in groups for x in g.samples], size)
                    for _ in passes for groups, size in plans[a]]

        metrics = Metrics()
        for a, steps in enumerate(self.runner.run_updates(train_agent, len(self.team))):
            for step in steps:
                metrics.merge(step, prefix=f"agent_{a}/")
            metrics.add(f"agent_{a}/optimizer_steps", len(steps), STEPS)
        self.buffer = [[] for _ in self.team]
        self.buffered_items = 0
        return metrics

    def shared_update(self, plans: list[list[tuple[list[NodeGroup], int]]]) -> Metrics:
        """Train a shared policy (agent_model.shared_policy) on every agent's buffer and empty them; return each
        agent's metrics. Its k-th optimizer step trains the one model on the k-th step of every agent's plan that
        has one (the agents' plans are alike but where a tied group was dropped), each agent's loss as its own step
        would take it (cooprl.update.engine.shared_policy_step)."""
        metrics, steps = Metrics(), max(map(len, plans))
        for _ in range(self.section.num_iterations):
            for k in range(steps):
                for a, step in self._shared_step({a: plan[k] for a, plan in enumerate(plans) if k < len(plan)}):
                    metrics.merge(step, prefix=f"agent_{a}/")
        for a, plan in enumerate(plans):
            metrics.add(f"agent_{a}/optimizer_steps", len(plan) * self.section.num_iterations, STEPS)
        metrics.add("shared_policy/optimizer_steps", steps * self.section.num_iterations, STEPS)
        self.buffer = [[] for _ in self.team]
        self.buffered_items = 0
        return metrics

    def _shared_step(self, batches: dict[int, tuple[list[NodeGroup], int]]) -> list[tuple[int, Metrics]]:
        """Take one optimizer step of the shared policy on agent a's `batches[a]` (its node groups and forward batch),
        for every a; return each agent's metrics of it."""
        parts = []
        for a, (groups, forward_batch) in batches.items():
            agent, samples, kl = self.team[a], [x for group in groups for x in group.samples], self.loss_kl(a)
            policy = policy_gradient_term(agent.model, samples, agent.tokenizer.pad_token_id,
                                          batch_size=forward_batch, kl=kl, objective=self.agent_objective(a))
            parts.append((a, samples, kl, policy))
        agent = self.team[0]
        results = shared_policy_step(agent.optimizer, agent.model,
                                     [(policy, self.objective.weight(samples)) for _, samples, _, policy in parts],
                                     max_grad_norm=self.section.max_grad_norm)
        return [(a, self.step_metrics(samples, policy, result, kl))
                for (a, samples, kl, policy), result in zip(parts, results, strict=True)]

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


def _tied(returns: list[float]) -> bool:
    """Return whether a sibling group's returns are all equal (a group of one carries its raw return: not tied)."""
    return len(returns) > 1 and len(set(returns)) == 1


def optimizer_batches(buffer: list[NodeGroup], section: MAGRPOSection,
                      buffered_items: int) -> list[tuple[list[NodeGroup], int]]:
    """Return one agent's optimizer steps on its `buffer`: (the node groups of each step, its forward batch)."""
    if section.update_schedule == "nodes":
        # all of a step's samples in one forward: the token trie runs each shared prefix once (a node's prompt for its
        # G samples, the turn-1 prompt that turn-2 prompts start with). What still separates it from `items`: a step
        # per turn, so the turn-1 prompt runs in each and the optimizer steps twice.
        return [(batch, sum(len(g.samples) for g in batch))
                for batch in node_batches(buffer, section.train_batch_size or section.rollout_buffer_size)]
    # one step on everything; default forward batch: all of an agent's samples of one item (its whole tree), so the
    # token trie runs the prefixes shared across the tree (the turn-1 prompt) once
    samples = sum(len(group.samples) for group in buffer)
    per_item = -(-samples // max(buffered_items, 1))
    return [(buffer, section.train_batch_size or per_item)]


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
