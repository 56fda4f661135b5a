"""MADPO: multi-agent DPO on preferences built from task rewards (and its iterative variant, MADPO_ITER).

One training step on one dataset item (online: the pairs come from the policies as they are now):
1. sample `preference_num_candidates` joint candidates (one rollout turn; with a comparator, up to half of
   them are the comparator's), score them with the task reward, pick (winner, loser) pairs;
2. append the pairs to `<run dir>/preferences/iteration_<k>.jsonl`;
3. add replayed pairs of the same item from earlier iterations (`preference_replay_mode`), with weights;
4. one update for all agents: with Δ_i = log π_i(winner_i) - log π_i(loser_i) (summed over completion
   tokens; minus the frozen start model's Δ when `reference_model`), agent i's loss is
   -log σ(β (Δ_i + Σ_{k≠i} sg(Δ_k))): the joint margin, where only agent i's own term carries gradient.

Iterations (MADPO_ITER): iteration k is one pass over the step plan (the training items of the epochs, cut at
`max_steps`), so a run takes `num_iterations` x that many steps; MADPO is one iteration without a comparator.
On resume, pairs of the steps already trained are read back from the files (for replay), later ones are redone.
"""

from __future__ import annotations

import random
from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.nn.functional as F

from cooprl.agents import Agent, build_team
from cooprl.comparators import Comparator, build_comparator
from cooprl.config import Config
from cooprl.evaluation import evaluate_team, tree_metrics
from cooprl.logprobs import completion_logprobs
from cooprl.text import safe_print
from cooprl.preferences import IterationPlan, PairStore, PreferencePair, collect_candidates, pairs_from_candidates, replay_weights
from cooprl.task import Task
from cooprl.trainers.magrpo import frozen_reference, reward_processor


def madpo_losses(deltas: torch.Tensor, beta: float, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Return each agent's multi-agent DPO loss, shape [agents], from the log-ratio margins `deltas` [agents, pairs].

    loss_i = weighted mean over pairs of -log σ(β (Δ_i + Σ_{k≠i} sg(Δ_k))): the pair is judged on the joint
    margin, but agent i's gradient flows only through its own Δ_i (the others' terms are detached).
    """
    total = deltas.detach().sum(0, keepdim=True)
    joint = deltas + (total - deltas.detach())          # value: joint margin; gradient: own term only
    if weights is None:
        weights = torch.ones(deltas.shape[1], dtype=deltas.dtype, device=deltas.device)
    return -(F.logsigmoid(beta * joint) * weights).sum(-1) / weights.sum()


class MADPO:
    """MADPO (and MADPO_ITER) for the shared training loop (see cooprl.trainers.loop)."""

    def __init__(self, config: Config, section: Any, task: Task, team: list[Agent], comparator: Comparator | None = None):
        self.config, self.section, self.task, self.team, self.comparator = config, section, task, team, comparator
        self.models = [agent.model for agent in team]
        self.process_reward = reward_processor(config, task)
        self.references = [frozen_reference(agent.model) for agent in team] if section.reference_model else None
        plan = IterationPlan.of(section)
        self.rounds = plan.rounds          # the loop repeats its step plan this often
        self.replay_mode, self.replay_lambda = plan.replay_mode, plan.replay_lambda
        self.rng = random.Random(config.seed)                        # pair_selection=random (state is checkpointed)
        self.store: PairStore | None = None
        self.steps_per_round = 1
        self.history: dict[int, dict[str, list[PreferencePair]]] = defaultdict(lambda: defaultdict(list))

    def start_run(self, run_dir: Path, step: int, steps_per_round: int) -> None:
        """Open the run's pair files; read back the pairs of the steps up to `step` (the resumed position)."""
        self.store, self.steps_per_round = PairStore(run_dir / "preferences"), steps_per_round
        for iteration, pairs in self.store.load(up_to_step=step).items():
            for pair in pairs:
                self.history[iteration][pair.item_id].append(pair)

    def _sample(self, agent: int, prompts: list[str], n: int):
        return self.team[agent].sample(prompts, n)

    # ------------------------------------------------------------------------------------------ training
    def train_step(self, item: Any, step: int) -> dict[str, float]:
        """Sample and pair candidates for `item`, store the pairs, one DPO update with replay; return metrics."""
        s, item_id = self.section, self.task.item_id(item)
        iteration = (step - 1) // self.steps_per_round
        roots, candidates = collect_candidates([item], self.task, self._sample, s.preference_num_candidates,
                                               self.comparator, self.process_reward)
        pairs = pairs_from_candidates(item_id, self.task.first_prompts(item), candidates[0], s, iteration, step, self.rng)
        self.store.append(iteration, pairs)
        earlier = {k: by_item[item_id] for k, by_item in self.history.items() if k < iteration}
        weighted = replay_weights({**earlier, iteration: pairs}, self.replay_mode, self.replay_lambda, iteration)
        self.history[iteration][item_id].extend(pairs)

        metrics = tree_metrics(roots, 1)
        metrics.update({"dpo/new_pairs": float(len(pairs)), "dpo/iteration": float(iteration)})
        if pairs:
            metrics["dpo/reward_gap"] = sum(p.reward_gap for p in pairs) / len(pairs)
        comparator_rewards = [c.reward for c in candidates[0] if c.source == "comparator"]
        if comparator_rewards:
            metrics["dpo/comparator_reward_mean"] = sum(comparator_rewards) / len(comparator_rewards)
        metrics.update(self.update([p for p, _ in weighted], [w for _, w in weighted]))
        metrics["env_steps"] = len(candidates[0])
        if self.config.output.verbose:
            for p in pairs:
                safe_print(f"--- {item_id} step {step}: chosen {p.chosen_reward:.3f} > rejected {p.rejected_reward:.3f}"
                      f" ({p.source})\n[chosen]\n" + "\n".join(p.chosen) + "\n[rejected]\n" + "\n".join(p.rejected))
        return metrics

    def margins(self, agent: int, pairs: Sequence[PreferencePair]) -> torch.Tensor:
        """Return agent's Δ per pair: log π(winner) - log π(loser), minus the reference's Δ when there is one."""
        a = self.team[agent]
        prompts = a.generator.encode_prompts([p.prompts[agent] for p in pairs]) * 2
        sides = ([(p.chosen[agent], p.chosen_ids[agent] if p.chosen_ids else None) for p in pairs]
                 + [(p.rejected[agent], p.rejected_ids[agent] if p.rejected_ids else None) for p in pairs])
        completions = [_completion_ids(a.tokenizer, text, ids) for text, ids in sides]   # winners, then losers
        logps, _ = completion_logprobs(a.model, prompts, completions, a.tokenizer.pad_token_id)
        seq = logps.sum(-1)
        delta = seq[:len(pairs)] - seq[len(pairs):]
        if self.references is not None:
            with torch.no_grad():
                ref, _ = completion_logprobs(self.references[agent], prompts, completions, a.tokenizer.pad_token_id)
                ref_seq = ref.sum(-1)
            delta = delta - (ref_seq[:len(pairs)] - ref_seq[len(pairs):])
        return delta

    def update(self, pairs: Sequence[PreferencePair], weights: Sequence[float]) -> dict[str, float]:
        """Take one optimizer step per agent on the weighted pairs (one backward for all); return DPO metrics."""
        metrics = {"dpo/pairs": float(len(pairs)), "dpo/skipped_nonfinite": 0.0}
        if not pairs:
            return metrics
        for agent in self.team:
            agent.model.train()
            agent.optimizer.zero_grad(set_to_none=True)
        deltas = [self.margins(a, pairs) for a in range(len(self.team))]
        deltas = torch.stack([d.to(deltas[0].device) for d in deltas])
        losses = madpo_losses(deltas, self.section.dpo_beta, torch.tensor(weights, device=deltas.device, dtype=deltas.dtype))
        metrics["dpo/joint_accuracy"] = (deltas.detach().sum(0) > 0).float().mean().item()
        metrics["dpo/loss"] = losses[0].item()   # every agent's loss has the same value (the joint margin's)
        for a in range(len(self.team)):
            metrics[f"agent_{a}/reward_accuracy"] = (deltas[a].detach() > 0).float().mean().item()
            metrics[f"agent_{a}/margin_mean"] = deltas[a].detach().mean().item()
        if not torch.isfinite(losses).all():
            return {**metrics, "dpo/skipped_nonfinite": 1.0}
        losses.sum().backward()   # agent i's parameters get gradient from loss_i only (see madpo_losses)
        for a, agent in enumerate(self.team):
            params = [p for group in agent.optimizer.param_groups for p in group["params"] if p.grad is not None]
            norm = torch.nn.utils.clip_grad_norm_(params, self.section.max_grad_norm or float("inf"))
            metrics[f"agent_{a}/grad_norm"] = norm.item()
            if torch.isfinite(norm):
                agent.optimizer.step()
            else:
                metrics["dpo/skipped_nonfinite"] = 1.0
            agent.optimizer.zero_grad(set_to_none=True)
        return metrics

    # ------------------------------------------------------------------------------------------ evaluation
    @torch.no_grad()
    def evaluate(self, items: list[Any]) -> dict[str, float]:
        """Return eval metrics (task reward levels, pass rate, pass@k) of the policies on `items`."""
        return evaluate_team(items, self.task, self._sample, self.section, self.process_reward)

    # ------------------------------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """Return what a checkpoint needs besides the weights (pairs live in their own files)."""
        return {"optimizers": [agent.optimizer.state_dict() for agent in self.team], "pair_rng": self.rng.getstate()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` saved."""
        for agent, opt_state in zip(self.team, state["optimizers"]):
            agent.optimizer.load_state_dict(opt_state)
        self.rng.setstate(state["pair_rng"])


def _completion_ids(tokenizer: Any, text: str, ids: list[int] | None) -> torch.Tensor:
    # the sampled ids when the policy wrote the text; another writer's text is tokenized (no EOS appended)
    if ids is None:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if not ids:  # an empty answer (e.g. a part a joint answer lacked) is the policy stopping at once
        ids = [tokenizer.eos_token_id]
    return torch.tensor(ids, dtype=torch.long)


def build_madpo(config: Config, trainer: str, task: Task, *, joint_format: Any = None, api_client: Any = None) -> MADPO:
    """Return MADPO (or MADPO_ITER) with one agent per policy of the task and the section's comparator."""
    section = config.trainer(trainer)
    team = build_team(config, section, task.num_agents, task.stop_strings)
    comparator = None
    if hasattr(section, "comparator_policy"):
        comparator = build_comparator(config, trainer, task, team, joint_format, api_client)
    return MADPO(config, section, task, team, comparator)
