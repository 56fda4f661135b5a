"""What every team algorithm shares, so that each trainer module holds only its own update.

A team algorithm (MAGRPO, the actor-critics, MADPO) trains one agent per policy of the task on the shared loop
(`cooprl.trainers.loop`). `TeamAlgorithm` gives it: the task's reward processor, the frozen start models for a
reference-KL term, sampling from the agents, evaluation on the task, the policy-gradient step of an agent under its
`objective` (MAGRPO's and the actors'), and the optimizers' part of checkpoints (`extra_state` / `load_extra_state`
add each algorithm's own: buffers, counters, RNGs).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Sequence

import torch

from cooprl.config import Config, PolicyObjectiveFields, Run, TrainerSection
from cooprl.metrics import SUM, Metrics
from cooprl.parallel.context import Parallel
from cooprl.rollout.evaluation import evaluate_team
from cooprl.rollout.generation import Completion
from cooprl.rollout.importance import importance_weights
from cooprl.rollout.tree import iter_nodes
from cooprl.samples import TrainSample
from cooprl.task import Task
from cooprl.text import safe_print
from cooprl.trainers.loop import Algorithm
from cooprl.trainers.team import Agent, AgentRunner, distinct
from cooprl.update.engine import StepResult, Term, optimizer_step
from cooprl.update.policy_gradient import (LossKL, PolicyObjective, PolicyTerm, frozen_reference,
                                           policy_gradient_metrics, policy_gradient_term, sampling_logprobs)


def reward_processor(config: Config, task: Task) -> Callable[[float], float]:
    """Return the function mapping a raw reward to the training reward: scale, then shift (default: minus the
    task's largest raw reward)."""
    cfg = config.reward_processor
    if not cfg.enabled:
        return lambda r: r
    shift = cfg.shift if cfg.shift is not None else -task.max_reward
    return lambda r: r * cfg.scale_factor + shift


def policy_objective(section: PolicyObjectiveFields) -> PolicyObjective:
    """Return the policy-gradient objective a section's TRL-named keys ask for (num_iterations above 1: clipped)."""
    return PolicyObjective(
        section.loss_type, clipped=section.num_iterations > 1, epsilon=section.epsilon,
        epsilon_high=section.epsilon if section.epsilon_high is None else section.epsilon_high,
        max_new_tokens=section.max_new_tokens, mask_truncated=section.mask_truncated_completions)


class TeamAlgorithm(Algorithm):
    """The shared part of a team algorithm: its run (config and typed section), task, agents, reward processor,
    references, parallel context (`parallel`: the one the team was built with; None: the run's section's, for a
    caller in one process)."""

    section: TrainerSection   # each algorithm names its own section class here
    objective = PolicyObjective()   # a policy-gradient algorithm sets its section's (`policy_objective`)

    def __init__(self, run: Run, task: Task, team: list[Agent], *, references: bool = False,
                 parallel: Parallel | None = None):
        self.config, self.section, self.task, self.team = run.config, run.section, task, team
        # agent_model.shared_policy: the number of agents the one model plays (checkpoints mark it; 0: one each)
        self.shared_agents = len(team) if run.config.agent_model.shared_policy else 0
        self.models = self.each_once([agent.model for agent in team])   # what checkpoints save, in agent order
        self.process_reward = reward_processor(run.config, task)
        # the frozen start model of each agent, for a KL term to it (None when the algorithm needs none)
        self.references = None
        if references:
            frozen = {id(model): frozen_reference(model) for model in self.models}
            self.references = [frozen[id(agent.model)] for agent in team]
        # reference_kl_form reward: the sampled KL lowers each reward before its advantage; loss: a term of the loss
        self.kl_in_reward = self.references is not None and run.section.reference_kl_form == "reward"
        # parallel_training mp: the agents' sampling and updates on one thread each (cooprl.trainers.team.AgentRunner)
        self.runner = AgentRunner(team, run.section.parallel_training)
        # ddp/fsdp: what this process asks of the others (gathers, broadcasts, the engine's sync of each model)
        self.parallel = parallel or Parallel.of(run.section)

    @property
    def optimizers(self) -> list[torch.optim.Optimizer]:
        """Return the agents' optimizers in agent order, each once (a shared policy's agents hold one)."""
        return self.each_once([agent.optimizer for agent in self.team])

    def each_once(self, items: list[Any]) -> list[Any]:
        """Return the agents' `items` (models, optimizers), a shared policy's one item once."""
        return distinct(items) if self.shared_agents else items

    def sample_agent(self, agent: int, prompts: list[str], n: int) -> list[list[Completion]]:
        """Return `n` completions of agent `agent` for each prompt (the rollout's and evaluation's Sampler)."""
        return self.team[agent].sample(prompts, n)

    def loss_kl(self, agent: int) -> LossKL | None:
        """Return the reference-KL term of `agent`'s policy loss (`reference_kl_form: loss`), or None."""
        if self.references is None or self.kl_in_reward:
            return None
        return LossKL(self.references[agent], self.section.reference_kl_coef)

    def train_samples(self, agent: int, completions: Sequence[Completion]) -> list[TrainSample]:
        """Return a TrainSample per completion `agent` sampled, its advantage 0 until its group's is known; with
        agent_model.vllm_importance_cap each carries its truncated importance weights against vLLM's sampler, and
        under a clipped objective its sampling policy's log-probs (every pass's ratio is taken to them), both scored
        now: call it after the rollout, before the agent's next optimizer step (cooprl.update.policy_gradient)."""
        model_cfg, member = self.config.agent_model, self.team[agent]
        weights: Sequence[Any] = [None] * len(completions)
        if model_cfg.vllm_importance_cap is not None:
            weights = importance_weights(member.model, completions, member.tokenizer.pad_token_id, member.params,
                                         model_cfg.vllm_importance_cap, mode=model_cfg.vllm_importance_mode)
        samples = [TrainSample(c.prompt_ids, c.completion_ids, 0.0, w, truncated=c.truncated)
                   for c, w in zip(completions, weights, strict=True)]
        if self.objective.clipped:
            old = sampling_logprobs(member.model, samples, member.tokenizer.pad_token_id)
            samples = [replace(x, sampling_logps=logps) for x, logps in zip(samples, old)]
        return samples

    def policy_step(self, agent: int, samples: Sequence[TrainSample], forward_batch: int | None,
                    extra: Sequence[Term] = (), weight: float | None = None) -> Metrics:
        """Take one optimizer step of `agent` on the policy loss of `samples` under `objective` (plus the
        reference-KL term of the loss form, and `extra` terms of the same step: an actor's value head); return its
        metrics (`policy_gradient_metrics`, and `truncated_masked` under mask_truncated_completions). `weight`: the
        step's (the engine's denominator; None: `objective.weight(samples)`)."""
        member, kl = self.team[agent], self.loss_kl(agent)
        policy = policy_gradient_term(member.model, samples, member.tokenizer.pad_token_id, batch_size=forward_batch,
                                      kl=kl, objective=self.agent_objective(agent))
        weight = self.objective.weight(samples) if weight is None else weight
        result = optimizer_step([member.optimizer], [policy, *extra], [member.model], weight=weight,
                                max_grad_norm=self.section.max_grad_norm, parallel=self.parallel)
        return self.step_metrics(samples, policy, result, kl)

    def agent_objective(self, agent: int) -> PolicyObjective:
        """Return `objective` as agent `agent`'s loss takes it: under dr_grpo its constant normalizer is the agent's
        own max_new_tokens (its `agents:` entry's)."""
        if self.objective.loss_type != "dr_grpo":
            return self.objective
        return replace(self.objective, max_new_tokens=self.team[agent].params.max_new_tokens)

    def step_metrics(self, samples: Sequence[TrainSample], policy: PolicyTerm, result: StepResult,
                     kl: LossKL | None) -> Metrics:
        """Return an agent's metrics of an optimizer step (`result`) of its policy loss `policy` on `samples`
        (`policy_gradient_metrics`, and `truncated_masked` under mask_truncated_completions)."""
        metrics = policy_gradient_metrics(samples, policy, result, kl)
        if self.objective.mask_truncated:
            metrics.add("truncated_masked", sum(x.truncated for x in samples), SUM)
        return metrics

    @torch.no_grad()
    def evaluate(self, items: list[Any]) -> dict[str, float]:
        """Return eval metrics per turn (the task's score metrics, success rate, pass@k) of the team on `items`."""
        with self.parallel.sampling(*self.models):   # sharded agents are gathered for the whole evaluation
            return evaluate_team(items, self.task, self.sample_agent, self.section, self.process_reward, self.parallel)

    def state_dict(self) -> dict[str, Any]:
        """Return what a checkpoint needs besides the weights: the optimizers and the algorithm's own state. The
        optimizers of sharded agents (parallel_training fsdp) are each process's own: they go in `rank_state`."""
        optimizers = "sharded" if self.sharded else [optimizer.state_dict() for optimizer in self.optimizers]
        return {"optimizers": optimizers, **self.extra_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` saved."""
        if (state["optimizers"] == "sharded") != self.sharded:
            saved = "sharded (parallel_training fsdp)" if state["optimizers"] == "sharded" else "not sharded"
            raise ValueError(
                f"the checkpoint's optimizers are {saved}; resume with the parallel_training that wrote it"
            )
        if not self.sharded:
            for optimizer, opt_state in zip(self.optimizers, state["optimizers"], strict=True):
                optimizer.load_state_dict(opt_state)
        self.load_extra_state(state)

    @property
    def sharded(self) -> bool:
        """Whether the agents are sharded over the processes (parallel_training fsdp with several processes)."""
        return self.parallel.sharded

    def extra_state(self) -> dict[str, Any]:
        """Return the algorithm's own checkpoint state (buffers, counters, RNG states); plain data."""
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Restore what `extra_state` saved."""

    def rank_state(self) -> dict[str, Any]:
        """Return what differs between the processes of a data-parallel run (the algorithm's own state: buffers,
        counters; with sharded agents, each optimizer's shard); otherwise weights and optimizers are the same on
        every rank."""
        state = self.extra_state()
        if self.sharded:
            state["optimizer_shards"] = [self.parallel.optimizer_state(optimizer) for optimizer in self.optimizers]
        return state

    def load_rank_state(self, state: dict[str, Any]) -> None:
        """Restore this rank's part saved by `rank_state`."""
        if self.sharded:
            for optimizer, shard in zip(self.optimizers, state["optimizer_shards"], strict=True):
                self.parallel.load_optimizer_state(optimizer, shard)
        self.load_extra_state(state)

    def generators(self) -> list[Any]:
        """Return the agents' samplers."""
        return [agent.generator for agent in self.team]

    def print_tree(self, root: Any) -> None:
        """Print every joint action of a rollout tree with its reward (`output.verbose`)."""
        print_tree(root, self.task)


def print_tree(root: Any, task: Task) -> None:
    """Print every joint action of the rollout tree `root`: item, turn, reward and each agent's text."""
    for node in iter_nodes(root):
        for j, score in enumerate(node.scores):
            safe_print(f"--- {task.item_id(node.item)} turn {node.turn + 1} joint {j}: reward {score.total:.3f}")
            for a, text in enumerate(node.joint_texts(j)):
                safe_print(f"[agent {a}]\n{text}")
