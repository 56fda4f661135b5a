"""MADPO: multi-agent DPO on preferences built from task rewards (and its iterative variant, MADPO_ITER).

Where the pairs come from (`pair_collection`):
- `offline` (the default): at the first step of iteration k, sample `preference_num_candidates` joint candidates
  (one rollout turn; a comparator adds its own set, see `comparator_candidate_budget`) for every problem of the step
  plan from the policies as they are then (iteration 0: the start policies), score them with the task reward,
  pick (winner, loser) pairs and write them to `<run dir>/preferences/iteration_<k>.jsonl`; every step of the
  iteration then trains on its problem's pairs (epochs > 1 train on them again);
- `online`: every step samples and pairs new candidates for its own problem and appends them to that file.
One training step on one dataset item, then:
1. take the item's pairs of this iteration, add replayed pairs of the same item from earlier iterations
   (`preference_replay_mode`), with weights;
2. one update for all agents: with Δ_i = log π_i(winner_i) - log π_i(loser_i) (summed over completion
   tokens; minus the frozen start model's Δ when `reference_model`), agent i's loss is
   -log σ(β (Δ_i + Σ_{k≠i} sg(Δ_k))): the joint margin, where only agent i's own term carries gradient;
   with `reference_kl_coef` > 0 plus that coefficient times the k3 KL to the start model on both answers.

Under data-parallel training (`parallel_training: ddp`) a step takes one item per process: each process collects
its item's pairs (offline: its share of the collection's batches, each seeded by its index), every process receives
all of them (replay needs every item's history; rank 0 writes the files), and the one DPO step per agent averages
the processes' gradients weighted by their pairs' weights: the gradient of the weighted mean loss over all the
step's pairs, as one process training on them at once (tests/cooprl/parallel/test_scale_out.py).

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

from cooprl.config import ConfigError, IterativeFields, MADPOSection, Run, is_data_parallel
from cooprl.metrics import STEPS, SUM, Metrics
from cooprl.models.logprobs import completion_logprobs
from cooprl.parallel.context import Parallel
from cooprl.preferences.comparators import Comparator, build_comparator
from cooprl.preferences.pairs import (IterationPlan, PairStore, PreferencePair, RewardDistribution, collect_candidates,
                                      open_pair_store, pairs_from_candidates, plan_chunks, policy_checkpoints,
                                      write_pairs)
from cooprl.rollout.tree import tree_metrics
from cooprl.task import Task, all_first_prompts
from cooprl.text import plain_text, safe_print
from cooprl.trainers.base import TeamAlgorithm
from cooprl.trainers.team import Agent, build_team
from cooprl.update.engine import Term, optimizer_step
from cooprl.update.losses import madpo_losses
from cooprl.update.policy_gradient import k3_kl


class MADPO(TeamAlgorithm):
    """MADPO (and MADPO_ITER) for the shared training loop (see cooprl.trainers.loop)."""

    section: MADPOSection

    def __init__(self, run: Run[MADPOSection], task: Task, team: list[Agent], comparator: Comparator | None = None,
                 parallel: Parallel | None = None):
        section = run.section
        super().__init__(run, task, team, references=section.reference_model or section.reference_kl_coef > 0,
                         parallel=parallel)
        self.comparator = comparator
        self.plan = plan = IterationPlan.of(section)
        self.rounds = plan.rounds          # the loop repeats its step plan this often
        self.rng = random.Random(run.config.seed)                        # pair_selection=random (state is checkpointed)
        self.store: PairStore | None = None
        self.steps_per_round = 1
        self.reward_dist: RewardDistribution | None = None   # log_reward_distribution (opened in start_run)
        self.history: dict[int, dict[str, list[PreferencePair]]] = defaultdict(lambda: defaultdict(list))
        # offline collection: the iterations collected so far, and each item's metrics of its collection rollout
        self.collected: list[int] = []
        self.collection_metrics: dict[int, dict[str, dict[str, float]]] = {}

    def start_run(self, run_dir: Path, step: int, steps_per_round: int) -> None:
        """Open the run's pair files; read back the pairs of the steps up to `step` (the resumed position). Under
        data-parallel training rank 0 alone opens and writes them, and sends every rank what it read."""
        self.steps_per_round = steps_per_round
        main = self.parallel.is_main
        if main:
            self.store = open_pair_store(run_dir, step)
            if isinstance(self.section, IterativeFields) and self.section.log_reward_distribution:
                self.reward_dist = RewardDistribution(run_dir / "reward_distributions", self.task.max_reward)
        stored = self.parallel.broadcast(self.store.load(up_to_step=step) if main else None)
        for iteration, pairs in stored.items():
            for pair in pairs:
                self.history[iteration][pair.item_id].append(pair)

    @property
    def data_parallel(self) -> bool:
        """Whether this run trains data-parallel (`parallel_training: ddp` or `fsdp`, even with one process)."""
        return is_data_parallel(self.section)

    # ------------------------------------------------------------------------------------------ training
    def train_step(self, item: Any, step: int) -> Metrics:
        """Get `item`'s pairs of this iteration (offline: collected at its first step; online: sampled now), one DPO
        update on them and the replayed ones; return metrics."""
        item_id = self.task.item_id(item)
        iteration = (step - 1) // self.steps_per_round
        policy_checkpoints(self.section, self.models, step, self.steps_per_round, before=True,
                           parallel=self.parallel)   # rank 0 writes
        if hasattr(self.comparator, "start_iteration"):   # comparator_policy history
            self.comparator.start_iteration(iteration)
        if self.section.pair_collection == "online":
            pairs, found = self.sample_pairs(item, iteration, step)
        else:
            found = self.collect_iteration(iteration, step) if iteration not in self.collected else {"env_steps": 0}
            pairs = list(self.history[iteration][item_id])
            found = {**found, **self.collection_metrics[iteration].get(item_id, {})}
        env_steps = found.pop("env_steps", 0)
        metrics = Metrics(found)
        earlier = {k: by_item[item_id] for k, by_item in self.history.items() if k < iteration}
        # replay (preference_replay_sample_size: the iteration's draws spread evenly over its steps)
        draws = -(-(self.plan.replay_sample_size or 0) // self.steps_per_round)
        weighted = self.plan.replayed({**earlier, iteration: pairs}, iteration,
                                      random.Random(self.config.seed * 7919 + 1 + step), draws)
        metrics.update({"dpo/new_pairs": float(len(pairs)), "dpo/iteration": float(iteration)})
        if pairs:
            metrics.add("dpo/reward_gap", sum(p.reward_gap for p in pairs) / len(pairs))
        metrics.merge(self.train_pairs([p for p, _ in weighted], [w for _, w in weighted], step))
        if self.section.use_environment_step:   # env_step (W&B's x axis): environment_steps_per_pair per trained pair
            env_steps = self.section.environment_steps_per_pair * len(weighted)
        metrics.add("env_steps", env_steps, SUM)
        if self.reward_dist is not None:
            metrics.update(self.reward_dist.metrics(iteration))
        policy_checkpoints(self.section, self.models, step, self.steps_per_round, before=False,
                           parallel=self.parallel)
        return metrics

    def train_pairs(self, pairs: Sequence[PreferencePair], weights: Sequence[float], step: int) -> Metrics:
        """Train on the step's weighted pairs: one `update` (optimizer step) per `train_batch_size` pairs (null:
        `rollout_buffer_size`; both null: all in one step), the pairs shuffled first (with a generator seeded by the
        step, so runs and resumes repeat it); return the updates' metrics and `dpo/optimizer_steps`."""
        size = self.section.train_batch_size or self.section.rollout_buffer_size
        chunks = [list(range(len(pairs)))]
        if size and size < len(pairs):
            order = list(range(len(pairs)))
            random.Random(self.config.seed * 7919 + step).shuffle(order)
            chunks = [order[start:start + size] for start in range(0, len(order), size)]
        metrics = Metrics()
        for chunk in chunks:
            metrics.merge(self.update([pairs[k] for k in chunk], [weights[k] for k in chunk]))
        metrics.add("dpo/optimizer_steps", len(chunks) if pairs else 0, STEPS)
        return metrics

    def sample_pairs(self, item: Any, iteration: int, step: int) -> tuple[list[PreferencePair], dict[str, float]]:
        """Online: sample, score and pair `item`'s candidates now, store the pairs; return them and the rollout's
        metrics."""
        with self.parallel.sampling(*self.models):   # sharded policies are gathered while they sample
            roots, candidates = collect_candidates([item], self.task, self.sample_agent,
                                                   self.section.preference_num_candidates, self.comparator,
                                                   self.process_reward)
        # under ddp the pair choice draws from the item's own seeded generator (the loop seeds torch per item), so
        # which process pairs an item changes nothing
        rng = random.Random(int(torch.randint(0, 2**62, ()))) if self.data_parallel else self.rng
        pairs = self._pairs(item, candidates[0], iteration, step, rng)
        everyone = [p for rank_pairs in self.parallel.gather(pairs) for p in rank_pairs]   # the step's items in order
        if self.store is not None:
            self.store.append(iteration, everyone)
        for pair in everyone:
            self.history[iteration][pair.item_id].append(pair)
        return pairs, {**candidate_metrics(roots[0], candidates[0]), "env_steps": len(candidates[0])}

    def collect_iteration(self, iteration: int, step: int) -> dict[str, float]:
        """Offline: sample, score and pair candidates for every problem of the step plan with the policies as they are
        now, write the pairs to the iteration's file and keep them; return {"env_steps": candidates sampled}.

        Sampling runs on its own seeded generators (like MARLHF's collection), so the training steps' random numbers
        do not depend on how many candidates the collection drew."""
        chunks = plan_chunks(self.task, self.section, self.config.seed, self.steps_per_round, self.parallel)

        def collect(chunk: list[Any], rng: random.Random) -> list[tuple[Any, list[PreferencePair], dict, int]]:
            roots, candidates = collect_candidates(chunk, self.task, self.sample_agent,
                                                   self.section.preference_num_candidates,
                                                   self.comparator, self.process_reward)
            return [(self.task.item_id(item), self._pairs(item, cands, iteration, step, rng),
                     candidate_metrics(root, cands), len(cands)) for item, root, cands in zip(chunk, roots, candidates)]

        # each chunk on one process, seeded by its index: the pairs do not depend on the number of processes
        with self.parallel.sampling(*self.models):   # (the processes sample different numbers of chunks)
            results = self.parallel.run_seeded(chunks, self.config.seed * 1000 + 777 + iteration, collect)
        # sampled by this process
        sampled = sum(count for c in self.parallel.own_shares(len(results)) for *_, count in results[c])
        pairs_of_iteration, metrics_by_item = [], {}
        for rows in results:
            for item_id, pairs, item_metrics, _ in rows:
                self.history[iteration][item_id] = pairs
                metrics_by_item[item_id] = item_metrics
                pairs_of_iteration += pairs
        if self.store is not None:
            write_pairs(self.store.path(iteration), pairs_of_iteration)
        self.collection_metrics[iteration] = metrics_by_item
        self.collected.append(iteration)
        return {"env_steps": sampled, "dpo/collected_pairs": float(len(pairs_of_iteration))}

    def _pairs(self, item: Any, candidates: Sequence[Any], iteration: int, step: int,
               rng: random.Random) -> list[PreferencePair]:
        item_id = self.task.item_id(item)
        if self.reward_dist is not None:
            self.reward_dist.add(iteration, candidates)
        pairs = pairs_from_candidates(item_id, self.task.first_prompts(item), candidates, self.section, iteration,
                                      step, rng)
        if self.config.output.verbose:
            for p in pairs:
                safe_print(
                    f"--- {item_id} step {step}: chosen {p.chosen_reward:.3f} > rejected {p.rejected_reward:.3f}"
                    f" ({p.source})\n[chosen]\n" + "\n".join(p.chosen) + "\n[rejected]\n" + "\n".join(p.rejected)
                )
        return pairs

    def margins_and_kl(self, agent: int, pairs: Sequence[PreferencePair]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Return (agent's Δ per pair: log π(winner) - log π(loser), minus the reference's Δ with `reference_model`;
        with reference_kl_coef > 0 the k3 KL to the start model per pair, summed over the winner's and the loser's
        completion, else None)."""
        a = self.team[agent]
        prompts = a.generator.encode_prompts(
            [p.prompts[agent] for p in pairs] + [p.loser_prompts[agent] for p in pairs]
        )
        sides = ([(p.chosen[agent], p.chosen_ids[agent] if p.chosen_ids else None) for p in pairs]
                 + [(p.rejected[agent], p.rejected_ids[agent] if p.rejected_ids else None) for p in pairs])
        completions = [_completion_ids(a.tokenizer, text, ids) for text, ids in sides]   # winners, then losers
        logps, mask = completion_logprobs(a.model, prompts, completions, a.tokenizer.pad_token_id)
        seq = logps.sum(-1)
        delta = seq[:len(pairs)] - seq[len(pairs):]
        kl = None
        if self.section.reference_kl_coef > 0:
            both = k3_kl(logps, mask, self.references[agent], prompts, completions, a.tokenizer.pad_token_id)
            kl = both[:len(pairs)] + both[len(pairs):]
        if self.section.reference_model:
            with torch.no_grad():
                ref, _ = completion_logprobs(self.references[agent], prompts, completions, a.tokenizer.pad_token_id)
                ref_seq = ref.sum(-1)
            delta = delta - (ref_seq[:len(pairs)] - ref_seq[len(pairs):])
        return delta, kl

    def update(self, pairs: Sequence[PreferencePair], weights: Sequence[float]) -> Metrics:
        """Take one optimizer step per agent on the weighted pairs (one forward and backward for all, through the
        update engine); return DPO metrics. The loss is the weighted mean over pairs of every agent's `madpo_losses`,
        each process weighed by its pairs' summed weight (cooprl.update.engine)."""
        weight = float(sum(weights))
        s = self.section

        def loss(batch: tuple[Sequence[PreferencePair], Sequence[float]],
                 denominator: float) -> tuple[torch.Tensor, dict[str, float]]:
            batch_pairs, batch_weights = batch
            scored = [self.margins_and_kl(a, batch_pairs) for a in range(len(self.team))]
            deltas = torch.stack([d.to(scored[0][0].device) for d, _ in scored])
            w = torch.tensor(batch_weights, device=deltas.device, dtype=deltas.dtype)
            losses = madpo_losses(deltas, s.dpo_beta, w)
            out = {"dpo/joint_accuracy": (deltas.detach().sum(0) > 0).float().mean().item()}
            if s.reference_kl_coef > 0:   # each agent's own KL (its own parameters only), weighted like the pairs
                kls = torch.stack([kl.to(deltas.device) for _, kl in scored])
                losses = losses + s.reference_kl_coef * (kls * w).sum(-1) / w.sum()
                out["dpo/kl"] = ((kls.detach() * w).sum(-1) / w.sum()).mean().item()
            out["dpo/loss"] = losses[0].item()   # the joint margin's loss (the same for every agent, KL aside)
            for a in range(len(self.team)):
                out[f"agent_{a}/reward_accuracy"] = (deltas[a].detach() > 0).float().mean().item()
                out[f"agent_{a}/margin_mean"] = deltas[a].detach().mean().item()
            # agent i's parameters get gradient from loss_i only (see madpo_losses); this process's share of the
            # processes' summed weight (1 unsharded, where the engine averages the processes' gradients)
            return losses.sum() * (weight / denominator if denominator else 0.0), out

        dpo = Term([(pairs, weights)] if pairs else [], loss, padding=([self._padding_pair()], [1.0]))
        # a shared policy (agent_model.shared_policy): its one optimizer steps once on the sum of the agents' losses
        result = optimizer_step(self.optimizers, [dpo], self.models, weight=weight, max_grad_norm=s.max_grad_norm,
                                parallel=self.parallel)
        metrics = Metrics(result.metrics)
        metrics.add("dpo/pairs", len(pairs), SUM)
        metrics.add("dpo/skipped_nonfinite", float(result.skipped), STEPS)
        norms = result.grad_norms * len(self.team) if self.shared_agents else result.grad_norms   # one step for all
        for a, norm in enumerate(norms):
            if norm is not None:
                metrics.add(f"agent_{a}/grad_norm", norm)
        return metrics

    def _padding_pair(self) -> PreferencePair:
        """Return a pair of one-token answers to a one-character prompt: a sharded update's padding (weight 0)."""
        roles = len(self.team)
        return PreferencePair("padding", ["."] * roles, ["a"] * roles, ["b"] * roles, 0.0, 0.0)

    # ------------------------------------------------------------------------------------------ checkpoints
    def extra_state(self) -> dict[str, Any]:
        """Return the pair selection's RNG and the offline collections (pairs live in their own files), with the
        comparator's policy snapshots (history, current_copy) when it keeps some."""
        state = {"pair_rng": self.rng.getstate(), "collected": list(self.collected),
                 "collection_metrics": self.collection_metrics}
        if hasattr(self.comparator, "state_dict"):
            state["comparator"] = self.comparator.state_dict()
        return state

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Restore what `extra_state` saved."""
        self.rng.setstate(state["pair_rng"])
        # offline collection: iterations collected before the checkpoint are read back from their files (start_run)
        self.collected = list(state.get("collected", []))
        self.collection_metrics = dict(state.get("collection_metrics", {}))
        if "comparator" in state and hasattr(self.comparator, "load_state_dict"):
            self.comparator.load_state_dict(state["comparator"])


def candidate_metrics(root: Any, candidates: Sequence[Any]) -> dict[str, float]:
    """Return the metrics of one item's candidates: the policies' rollout (`tree_metrics`: reward, pass rate...) and
    the comparator's mean task reward when it wrote some."""
    metrics = tree_metrics([root], 1)
    comparator_rewards = [c.reward for c in candidates if c.source == "comparator"]
    if comparator_rewards:
        metrics["dpo/comparator_reward_mean"] = sum(comparator_rewards) / len(comparator_rewards)
    return metrics


def _completion_ids(tokenizer: Any, text: str, ids: list[int] | None) -> torch.Tensor:
    # the sampled ids when the policy wrote the text; another writer's text is tokenized (no EOS appended)
    if ids is None:
        ids = tokenizer(plain_text(text, tokenizer), add_special_tokens=False)["input_ids"]
    if not ids:  # an empty answer (e.g. a part a joint answer lacked) is the policy stopping at once
        ids = [tokenizer.eos_token_id]
    return torch.tensor(ids, dtype=torch.long)


def build_madpo(run: Run[MADPOSection], task: Task, parallel: Parallel | None = None) -> MADPO:
    """Return MADPO (or MADPO_ITER) with one agent per policy of the task and the section's comparator."""
    config, trainer, section = run.config, run.trainer, run.section
    if config.agent_model.vllm_importance_cap is not None:
        # the correction weights the per-token policy-gradient term; a DPO loss on preference pairs has none
        raise ConfigError(f"agent_model.vllm_importance_cap: {trainer} trains a DPO loss on preference pairs, which "
                          f"has "
                          "no per-token policy-gradient term to weight; set it to null (it is for magrpo, grpo, the "
                          "actor-critics and marlhf)")
    if task.agent_rewards:
        # a preference pair ranks two joint answers by one reward: agents rewarded apart would rank them differently
        raise ConfigError(f"{trainer}: MADPO ranks joint answers by the team's one reward, and this task gives each "
                          f"agent its own (a general-sum team); use the task's shared reward, or MAGRPO/IAC")
    team = build_team(run, task.num_agents, task.stop_strings, parallel, lambda: all_first_prompts(task))
    comparator = None
    if isinstance(section, IterativeFields):   # MADPO_ITER: the comparator_* keys
        comparator = build_comparator(run, task, team)
    if comparator is not None and task.follow_prompt is not None:
        # a sequential team's follower answers its predecessors' texts; a comparator writes every agent's text at
        # once from the first prompts, so its candidates would not be the team's kind of joint answer
        raise ConfigError(f"{trainer}: this task is a sequential team (a later agent reads the earlier agents' "
                          f"answers) and a comparator writes joint answers without that; compare the policies' own "
                          f"candidates: {trainer}.comparator_policy=current "
                          f"{trainer}.comparator_candidate_budget=shared")
    return MADPO(run, task, team, comparator, parallel)
