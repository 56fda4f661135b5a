"""Actor-critic trainers: IAC (one critic per agent), MAAC (one centralized critic), AC (IAC with one agent).

One training step on one dataset item:
1. roll out `num_generations` episodes with the shared rollout tree: one sample per agent per turn, the
   task's transition between turns, early termination once a turn's mean processed reward passes the threshold;
2. score every turn with the critics (no gradient). What a critic sees, its input:
   IAC: its agent's prompt (critic_type v) or the prompt and the agent's response (q);
   MAAC: every agent's prompt, labelled (v), then every agent's response (q), see `critic_input_text`;
3. TD target of a turn: y = r + discount * (the same critic's value of the episode's next turn), or y = r when
   the episode ended there (last turn or early termination). With `reference_kl_coef` > 0 in the `reward` form
   (the default), agent a's r is its shaped reward r - coef * KL(a's completion || start model), so each agent has
   its own target y_a; a centralized critic (MAAC) learns the team's mean of them in the `episodes` schedule.
   A general-sum task (`Score.agent_rewards`) gives each agent its own r as well: IAC's critic a learns agent a's;
   MAAC's one critic learns the team's mean reward, its value a baseline of each agent's own target (single-turn
   only: over turns its bootstrap would mix the agents' returns, so num_turns > 1 is refused);
4. buffer the turns and update with each agent's advantages:
   v critic: A = y - V(s), the one-step TD advantage;
   q critic: A = y - (mean Q over the group). Q(s, a) depends on the action taken, so y - Q(s, a) would be
   zero-mean for every action once Q is accurate, cancelling the policy gradient; the q critic therefore
   acts through the bootstrap Q(s', a') inside y, and the group's mean Q is an action-free baseline.
   `update_schedule` says when and over what group (`advantage_normalization` standardizes within the group):
   - `turns` (the default): `rollout_buffer_size` counts one agent's turn samples (every agent has one per turn of
     each episode); once an item's turns fill it, the whole buffer is trained turn by turn (turn 1 first), each
     turn's samples a group: advantages normalized within it, shuffled, one optimizer step per `train_batch_size`
     samples (null: rollout_buffer_size), and with each actor step its critic's step on the same samples (a
     centralized critic steps with every agent's batches, on that agent's targets);
   - `episodes`: `rollout_buffer_size` counts episodes; the whole buffer is one group, stepped in buffer order.
   What a buffer holds at the end of an epoch is trained then (`end_epoch`).
   Actor loss: MAGRPO's policy step (`TeamAlgorithm.policy_step`): by default -sum log pi(completion) * A; the
   section's TRL-named keys (`loss_type`, `num_iterations` with `epsilon`/`epsilon_high`, `mask_truncated_completions`)
   as MAGRPO's; with `agent_model.vllm_importance_cap` each token's term weighted by its truncated importance weight
   against vLLM's sampler (both scored in `episode_steps`, see cooprl.update.policy_gradient). `num_iterations` > 1
   takes the update's steps, drawn once, that many times (critic steps too, as PPO's epochs). Critic loss:
   value_loss_coef * (y - V)^2, averaged over the step's samples; a value head on the actor clips it PPO-style with
   `value_clip_range`.
Critics: `use_separate_critic: true` gives every agent (MAAC: the team) a value model of its own (`critics:`,
else `critic_model.name`, else the agent's model) with its own AdamW at `critic_learning_rate`. `false` (IAC and
AC) puts a value head on the actor: the head is a second param group of the actor's optimizer and its loss is
backpropagated with the actor's, so one step trains both and the value loss also shapes the shared trunk.
Checkpoints hold the actors, then the critics (value models, or only the heads), as agent_<i>/ folders.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Callable, Sequence

import torch

from cooprl.config import ActorCriticSection, Config, ConfigError, Run, model_devices
from cooprl.models.loading import load_causal_lm, load_tokenizer
from cooprl.metrics import STEPS, SUM, Metrics
from cooprl.models.value_model import ValueModel
from cooprl.parallel.context import Parallel
from cooprl.rollout.tree import Node, RolloutSettings, iter_nodes, rollout, tree_metrics
from cooprl.samples import CriticSample, Step, TrainSample
from cooprl.task import Task, all_first_prompts
from cooprl.text import plain_text
from cooprl.trainers.base import TeamAlgorithm, policy_objective
from cooprl.trainers.team import Agent, build_team
from cooprl.update.engine import Term, optimizer_step
from cooprl.update.losses import actor_advantages, td_target, value_errors
from cooprl.update.optim import build_adamw
from cooprl.update.policy_gradient import sampled_kls

VALUE_BATCH = 8  # sequences per critic forward (rollout-time values and the value loss)


@dataclass
class Critic:
    """A value model, the tokenizer of its inputs, and its optimizer (None: a head trained by its actor's)."""

    model: ValueModel
    tokenizer: Any
    optimizer: torch.optim.Optimizer | None
    reuses_agent_ids: bool   # reads its agent's own token ids (same tokenizer) instead of re-tokenizing text


def critic_input_text(prompts: Sequence[str], completions: Sequence[str] | None = None) -> str:
    """Return the centralized critic's input: every agent's prompt (V), then every agent's response (Q), labelled."""
    parts = [f"### Agent {a} prompt\n{prompt}" for a, prompt in enumerate(prompts)]
    if completions is not None:
        parts += [f"### Agent {a} response\n{text}" for a, text in enumerate(completions)]
    return "\n\n".join(parts)


def turn_groups(steps: Sequence[Step]) -> list[list[int]]:
    """Return the buffer's indices grouped by turn, turn 1 first, each group in buffer order (`update_schedule:
    turns` trains each agent on its samples of each group in turn)."""
    turns = sorted({step.turn for step in steps})
    return [[k for k, step in enumerate(steps) if step.turn == turn] for turn in turns]


def shuffled(indices: Sequence[int]) -> list[int]:
    """Return `indices` in a random order drawn from torch's generator (checkpointed: a resumed run draws the same)."""
    return [indices[i] for i in torch.randperm(len(indices)).tolist()]


def chunks(indices: Sequence[int], size: int) -> list[list[int]]:
    """Return `indices` cut into consecutive chunks of at most `size`."""
    return [list(indices[start:start + size]) for start in range(0, len(indices), size)]


class ActorCritic(TeamAlgorithm):
    """IAC, MAAC and AC for the shared training loop (see cooprl.trainers.loop)."""

    section: ActorCriticSection

    def __init__(self, run: Run[ActorCriticSection], task: Task, team: list[Agent], critics: list[Critic],
                 centralized: bool, parallel: Parallel | None = None):
        section = run.section
        # the actors' frozen start models: the k3 KL to them (reference_kl_coef, in reference_kl_form)
        super().__init__(run, task, team, references=section.reference_kl_coef > 0, parallel=parallel)
        self.critics = critics
        self.centralized = centralized  # MAAC: one critic for the whole team
        self.models = self.models + [critic.model for critic in critics]
        self.buffer: list[Step] = []
        self.buffered_episodes = 0
        self.objective = policy_objective(section)   # the actors' (TRL's keys)

    def critic_of(self, agent: int) -> int:
        """Return the index of the critic that scores `agent`'s turns."""
        return 0 if self.centralized else agent

    def scored_by(self, critic: int) -> list[int]:
        """Return the agents whose turns critic `critic` scores (MAAC's one critic: all of them)."""
        return list(range(len(self.team))) if self.centralized else [critic]

    # ------------------------------------------------------------------------------------------ rollout
    def rollout_settings(self) -> RolloutSettings:
        """Return the episodes' shape: `num_generations` chains per item, one sample per agent per turn."""
        s = self.section
        return RolloutSettings(num_turns=s.num_turns, samples_per_turn=[s.num_generations] + [1] * (s.num_turns - 1),
                               joint_mode="aligned", discount=s.discount,
                               early_termination_threshold=s.early_termination_threshold,
                               process_reward=self.process_reward)

    def critic_ids(self, c: int, node: Node, j: int) -> torch.Tensor:
        """Return critic c's input tokens for joint action j at `node` (its value is read at the last token)."""
        critic, q = self.critics[c], self.section.critic_type == "q"
        if self.centralized:
            return self._tokenize(critic, critic_input_text(node.prompts, node.joint_texts(j) if q else None))
        action = node.samples[c][node.joint[j][c]]
        if critic.reuses_agent_ids:
            return torch.cat([action.prompt_ids, action.completion_ids]) if q else action.prompt_ids
        return self._tokenize(critic, node.prompt_of(c, node.joint[j][c]) + (action.text if q else ""))

    def _tokenize(self, critic: Critic, text: str) -> torch.Tensor:
        # keep the end of a long text: the value is read at its last token (critic_model.max_length tokens at most)
        # prompts and completions are model- and program-derived: no special token is parsed out of them
        ids = critic.tokenizer(plain_text(text, critic.tokenizer))["input_ids"][-critic_max_length(self.config):]
        return torch.tensor(ids, dtype=torch.long)

    @torch.no_grad()
    def episode_steps(self, root: Node) -> list[Step]:
        """Return one Step per joint action of the tree, with every critic's value and TD target and every agent's
        own TD target (its reward less coef x its sampled KL in the reward form)."""
        turns = [(node, j) for node in iter_nodes(root) for j in range(len(node.joint))]
        row = {(id(node), j): k for k, (node, j) in enumerate(turns)}
        # an episode's next turn is the child node's only joint action (one sample per agent after the first turn)
        following = [None if node.children[j] is None else row[(id(node.children[j]), 0)] for node, j in turns]
        # each agent's completions of the whole tree as TrainSamples at once (one scoring pass for importance weights)
        actions = []
        for a in range(len(self.team)):
            completions = [c for node in iter_nodes(root) for c in node.samples[a]]
            actions.append(dict(zip(map(id, completions), self.train_samples(a, completions))))
        joint_actions = [[actions[a][id(node.samples[a][g])] for a, g in enumerate(node.joint[j])] for node, j in turns]
        kls = self.reward_kls(joint_actions)
        coef, agents = self.section.reference_kl_coef, len(self.team)
        penalties = [[0.0] * agents if kl is None else [coef * x for x in kl] for kl in kls]
        steps = [Step(acts, [], turn=node.turn, targets=[0.0] * agents, kls=kl)
                 for (node, _), acts, kl in zip(turns, joint_actions, kls)]
        for c, critic in enumerate(self.critics):
            ids = [self.critic_ids(c, node, j) for node, j in turns]
            values = _values(critic, ids).tolist()
            agents = self.scored_by(c)
            for k, ((node, j), step) in enumerate(zip(turns, steps)):
                next_value = None if following[k] is None else values[following[k]]
                own = node.agent_rewards[j] if node.agent_rewards else [node.rewards[j]] * len(self.team)
                # the critic's own target: its agents' mean shaped reward (IAC: its one agent's); each agent's own
                # reward (a general-sum task's differ; a shared one is the same for all, taken as is)
                rewards = [own[a] for a in agents]
                reward = rewards[0] if len(set(rewards)) == 1 else sum(rewards) / len(rewards)
                shared = reward - sum(penalties[k][a] for a in agents) / len(agents)
                step.critics.append(CriticSample(ids[k], values[k], td_target(shared, next_value,
                                                                              self.section.discount)))
                for a in agents:
                    step.targets[a] = td_target(own[a] - penalties[k][a], next_value, self.section.discount)
        return steps

    def reward_kls(self, joint_actions: list[list[TrainSample]]) -> list[list[float] | None]:
        """Return each agent's sampled KL to its start model at each turn (`joint_actions[k][a]`: agent a's action at
        turn k), what the reward form lowers its reward by, times coef; None at every turn unless the KL is in the
        reward."""
        if not self.kl_in_reward:
            return [None] * len(joint_actions)
        per_agent = [sampled_kls(agent.model, self.references[a], [acts[a] for acts in joint_actions],
                                 agent.tokenizer.pad_token_id) for a, agent in enumerate(self.team)]
        return [list(turn) for turn in zip(*per_agent)]

    # ------------------------------------------------------------------------------------------ training
    def train_step(self, item: Any, step: int) -> Metrics:
        """Roll out one item's episodes, buffer their turns, update when the buffer is full; return metrics."""
        with self.parallel.sampling(*self.models):   # sharded actors are gathered for the rollout and its scoring
            root = rollout([item], self.task, self.sample_agent, self.rollout_settings())[0]
            steps = self.episode_steps(root)
        self.buffer.extend(steps)
        self.buffered_episodes += len(root.joint)
        metrics = Metrics(tree_metrics([root], self.section.num_turns))
        for c in range(len(self.critics)):
            metrics.add(f"critic_{c}/value_mean", sum(s.critics[c].value for s in steps) / len(steps))
        if self.kl_in_reward:   # the sampled KL the rewards were penalized by (loss form: the update reports it)
            for a in range(len(self.team)):
                metrics.add(f"agent_{a}/kl", sum(s.kls[a] for s in steps) / len(steps))
        if self.buffer_full():
            metrics.merge(self.update())
        metrics.add("env_steps", len(steps), SUM)
        if self.config.output.verbose:
            self.print_tree(root)
        return metrics

    def buffer_full(self) -> bool:
        """Return whether the buffer holds `rollout_buffer_size` turn samples per agent (update_schedule turns) or
        episodes (episodes)."""
        held = len(self.buffer) if self.section.update_schedule == "turns" else self.buffered_episodes
        return held >= self.section.rollout_buffer_size

    def end_epoch(self) -> Metrics:
        """At an epoch's end, train on what the buffer still holds (no epoch's samples wait for the next); return
        the update's metrics."""
        return self.update() if self.buffer else Metrics()

    def update(self) -> Metrics:
        """Train every actor (and its value head) and every separate critic on the buffer, empty it; return each
        model's metrics of its optimizer steps and `update/actor_optimizer_steps`. With `num_iterations` above 1
        the update's optimizer steps, drawn once, are all taken that many times over (this rollout's samples, never
        a later one's), the actors' under the clipped objective (`policy_objective`)."""
        plan = self.turn_plan() if self.section.update_schedule == "turns" else self.buffer_plan()
        metrics = Metrics()
        for _ in range(self.section.num_iterations):
            for prefix, step in plan:
                metrics.merge(step(), prefix=prefix)
        metrics.merge(self.target_means())
        actor_steps = sum(prefix.startswith("agent_") for prefix, _ in plan) * self.section.num_iterations
        metrics.add("update/actor_optimizer_steps", actor_steps, STEPS)
        self.buffer, self.buffered_episodes = [], 0
        return metrics

    def target_means(self) -> Metrics:
        """Return each critic's mean target over the buffer: its agents' own targets (turns), or, for a separate
        critic, its samples' (episodes)."""
        metrics = Metrics()
        for c, critic in enumerate(self.critics):
            if self.section.update_schedule == "turns":
                seen = [step.targets[a] for step in self.buffer for a in self.scored_by(c)]
            elif critic.optimizer is not None:
                seen = [step.critics[c].target for step in self.buffer]
            else:
                continue
            metrics.add(f"critic_{c}/target_mean", sum(seen) / len(seen))
        return metrics

    def buffer_plan(self) -> list[tuple[str, Callable[[], Metrics]]]:
        """update_schedule episodes: the update's optimizer steps (each with its metrics' prefix). Advantages over the
        whole buffer; each actor, then each separate critic, takes one step per `train_batch_size` buffered turns in
        buffer order (null: one step on the whole buffer)."""
        s, plan = self.section, []
        for a in range(len(self.team)):
            indices = list(range(len(self.buffer)))
            adv = self.advantages_of(a, indices)
            for chunk in chunks(indices, s.train_batch_size or len(indices)):
                plan.append((f"agent_{a}/", partial(self.actor_step, a, chunk, adv, None)))
        for c, critic in enumerate(self.critics):
            if critic.optimizer is None:
                continue  # a head on its actor: trained in the actor's steps above
            seen = [step.critics[c] for step in self.buffer]
            for chunk in chunks(range(len(seen)), s.train_batch_size or len(seen)):
                plan.append((f"critic_{c}/", partial(self.critic_step, c, [seen[k] for k in chunk])))
        return plan

    def turn_plan(self) -> list[tuple[str, Callable[[], Metrics]]]:
        """update_schedule turns (the default): the update's optimizer steps (each with its metrics' prefix). Per
        agent, the buffer's samples of each turn (turn 1 first) are a group whose advantages are normalized together;
        the group is shuffled and cut into `train_batch_size` samples (null: rollout_buffer_size); each batch is one
        actor step, then one step of the agent's separate critic on the same samples with the agent's own targets (a
        centralized critic steps with every agent's batches). A group that fits one step is not shuffled: the order
        within a step changes nothing, and drawing would move the RNG."""
        s, plan = self.section, []
        size = s.train_batch_size or s.rollout_buffer_size
        for a in range(len(self.team)):
            c = self.critic_of(a)
            for group in turn_groups(self.buffer):
                adv = self.advantages_of(a, group)
                order = shuffled(group) if len(group) > size else group   # one step: its order changes nothing
                for chunk in chunks(order, size):
                    targets = [self.buffer[k].targets[a] for k in chunk]
                    plan.append((f"agent_{a}/", partial(self.actor_step, a, chunk, adv, targets)))
                    if self.critics[c].optimizer is not None:
                        part = [replace(self.buffer[k].critics[c], target=t) for k, t in zip(chunk, targets)]
                        plan.append((f"critic_{c}/", partial(self.critic_step, c, part)))
        return plan

    def advantages_of(self, agent: int, indices: Sequence[int]) -> dict[int, float]:
        """Return `agent`'s advantage of each buffered turn of `indices` (one group: normalized together), by index."""
        seen = [self.buffer[k].critics[self.critic_of(agent)] for k in indices]
        targets = [self.buffer[k].targets[agent] for k in indices]
        adv = actor_advantages(targets, [x.value for x in seen], self.section.critic_type,
                               self.section.advantage_normalization)
        return dict(zip(indices, adv))

    def actor_step(self, agent: int, chunk: Sequence[int], adv: dict[int, float],
                   value_targets: Sequence[float] | None) -> Metrics:
        """Take one optimizer step of `agent`'s actor on the buffered turns `chunk` (advantages `adv[k]`; the policy
        step MAGRPO takes, `TeamAlgorithm.policy_step`); a value head on the actor is trained in the same step on
        `value_targets` (None: its critic samples' targets). Return the step's metrics."""
        samples = [replace(self.buffer[k].actions[agent], advantage=adv[k]) for k in chunk]
        head = self.critics[agent] if not self.centralized and self.critics[agent].optimizer is None else None
        weight = self.objective.weight(samples)
        extra = []
        if head is not None:
            part = [self.buffer[k].critics[agent] for k in chunk]
            if value_targets is not None:
                part = [replace(x, target=t) for x, t in zip(part, value_targets)]
            # the step's denominator is the policy loss's (dapo: its tokens); the value loss stays a mean over samples,
            # and with no token left to train (dapo, every completion masked) the step is the head's alone
            weight = weight or float(len(part))
            extra = [self.value_term(head, part, per_weight=len(part) / weight)]
        return self.policy_step(agent, samples, self.section.rollout_buffer_size, extra, weight)

    def critic_step(self, c: int, part: Sequence[CriticSample]) -> Metrics:
        """Take one optimizer step of separate critic `c` on its value loss over `part`; return its metrics."""
        critic = self.critics[c]
        result = optimizer_step([critic.optimizer], [self.value_term(critic, part)], [critic.model], weight=len(part),
                                max_grad_norm=self.section.max_grad_norm, parallel=self.parallel)
        metrics = Metrics({"value_loss": result.losses["value_loss"]})
        norm = result.grad_norms[0] if result.grad_norms and not result.skipped else None
        metrics.add("grad_norm", norm if norm is not None else 0.0)
        metrics.add("skipped_nonfinite", float(result.skipped), STEPS)
        return metrics

    def value_term(self, critic: Critic, samples: Sequence[CriticSample], per_weight: float = 1.0) -> Term:
        """Return the value loss of `critic` on `samples` for the update engine: value_loss_coef x the squared TD
        errors, in forward batches of VALUE_BATCH (the engine divides by the step's weight: its sample count, which
        is `per_weight` x the step's weight when the step's weight counts something else, a dapo actor's tokens)."""
        clip = self.section.value_clip_range if critic.optimizer is None else None  # clipping: shared-head mode only
        coef = self.section.value_loss_coef / per_weight

        def loss(batch: Sequence[CriticSample], denominator: float) -> tuple[torch.Tensor, dict[str, float]]:
            values = critic.model.values([x.ids for x in batch], None, critic.tokenizer.pad_token_id)
            targets = torch.tensor([x.target for x in batch], device=values.device)
            old = torch.tensor([x.value for x in batch], device=values.device)
            return coef * value_errors(values, targets, old, clip).sum() / denominator, {}
        batches = [samples[start:start + VALUE_BATCH] for start in range(0, len(samples), VALUE_BATCH)]
        return Term(batches, loss, name="value_loss")

    # ------------------------------------------------------------------------------------------ checkpoints
    def extra_state(self) -> dict[str, Any]:
        """Return the critics' optimizers and the rollout buffer (the actors' optimizers: TeamAlgorithm)."""
        return {"critic_optimizers": [c.optimizer.state_dict() if c.optimizer else None for c in self.critics],
                "buffer": self.buffer, "buffered_episodes": self.buffered_episodes}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Restore what `extra_state` saved."""
        for critic, opt_state in zip(self.critics, state["critic_optimizers"]):
            if critic.optimizer is not None:
                critic.optimizer.load_state_dict(opt_state)
        self.buffer, self.buffered_episodes = state["buffer"], state["buffered_episodes"]


def _values(critic: Critic, ids: Sequence[torch.Tensor]) -> torch.Tensor:
    """Return the critic's value of each input (value read at its last token), on the CPU."""
    pad = critic.tokenizer.pad_token_id
    return torch.cat([critic.model.values(ids[i:i + VALUE_BATCH], None, pad).float().cpu()
                      for i in range(0, len(ids), VALUE_BATCH)])


# ---------------------------------------------------------------------------------------------- building
def critic_model_names(config: Config, team: list[Agent], count: int) -> list[str]:
    """Return each critic's backbone: the `critics:` list, else critic_model.name, else its agent's model."""
    if config.critics is not None:
        if len(config.critics) != count:
            raise ConfigError(f"critics: {len(config.critics)} model names given for {count} critic(s); give one "
                              f"per critic, or critics=null for critic_model.name (else its agent's model)")
        return list(config.critics)
    return [config.critic_model.name or team[i].name for i in range(count)]


def separate_critic(run: Run[ActorCriticSection], name: str, reuses_agent_ids: bool,
                    device: str | None = None) -> Critic:
    """Return a value model on backbone `name` with its own tokenizer and AdamW optimizer, on `device` (null =
    agent_model.device)."""
    config, section = run.config, run.section
    device = device or config.agent_model.device
    lm = load_causal_lm(name, torch_dtype=config.critic_model.torch_dtype, device=device, lora=config.critic_model.lora)
    model = ValueModel(lm)
    optimizer = build_adamw(model.head_parameters() + model.trunk_parameters(), lr=section.critic_learning_rate,
                            weight_decay=section.weight_decay, bf16_optimizer=config.agent_model.bf16_optimizer)
    return Critic(model, load_tokenizer(name, config.agent_model.special_tokens), optimizer, reuses_agent_ids)


def critic_max_length(config: Config) -> int:
    """Return the longest critic input in tokens: critic_model.max_length, else agent_model.max_length."""
    return config.critic_model.max_length or config.agent_model.max_length


def head_on_actor(section: ActorCriticSection, agent: Agent) -> Critic:
    """Return a value head on `agent`'s model; the head joins the agent's optimizer at critic_learning_rate."""
    model = ValueModel(agent.model, owns_lm=False)
    agent.optimizer.add_param_group({"params": model.head_parameters(), "lr": section.critic_learning_rate})
    return Critic(model, agent.tokenizer, None, reuses_agent_ids=True)


def _build(run: Run[ActorCriticSection], task: Task, centralized: bool, parallel: Parallel | None) -> ActorCritic:
    config, trainer, section = run.config, run.trainer, run.section
    if centralized and task.agent_rewards and section.num_turns > 1:
        raise ConfigError(f"{trainer}.num_turns={section.num_turns}: the task gives each agent its own reward and "
                          f"MAAC's one critic learns the team's mean; its bootstrap would mix the agents' returns "
                          f"over turns. Use num_turns 1, IAC (a critic per agent) or the task's shared reward")
    if centralized and not section.use_separate_critic:
        raise ConfigError(f"{trainer}.use_separate_critic=false: the centralized critic is a model of its own; "
                          "set it true")
    # the task says how many policies play
    team = build_team(run, task.num_agents, task.stop_strings, parallel, lambda: all_first_prompts(task))
    if not section.use_separate_critic:
        return ActorCritic(run, task, team, [head_on_actor(section, agent) for agent in team], centralized, parallel)
    names = critic_model_names(config, team, 1 if centralized else len(team))
    # one per critic; under ddp each process's own GPU
    devices = Parallel.devices(model_devices(section.critic_devices, "critic_devices", len(names),
                                             config.agent_model.device))
    critics = [separate_critic(run, name, reuses_agent_ids=not centralized and name == team[i].name,
                               device=devices[i]) for i, name in enumerate(names)]
    return ActorCritic(run, task, team, critics, centralized, parallel)


def build_iac(run: Run[ActorCriticSection], task: Task, parallel: Parallel | None = None) -> ActorCritic:
    """Return IAC (AC when the task has one policy): each agent with its own critic."""
    return _build(run, task, centralized=False, parallel=parallel)


def build_maac(run: Run[ActorCriticSection], task: Task, parallel: Parallel | None = None) -> ActorCritic:
    """Return MAAC: the agents and one centralized critic over the joint prompt (v) or joint prompt and answer (q)."""
    return _build(run, task, centralized=True, parallel=parallel)
