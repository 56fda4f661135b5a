"""MARLHF: a joint reward model learned from preference pairs, then online RL on that reward (and MARLHF_ITER).

Iteration k is one pass over the step plan (the training items of the epochs, cut at `max_steps`), as in
MADPO_ITER; MARLHF is one iteration without a comparator. Before the first step of iteration k:
1. preference pairs are collected on the pass's items with the TASK reward (`preferences.collect_pairs`: the
   policies' candidates, plus the comparator's in MARLHF_ITER) and written to
   `<run dir>/preferences/iteration_<k>.jsonl`; when that file already exists (a resumed run) it is read back;
2. the reward model is trained on them with the Bradley-Terry loss (MARLHF_ITER refines the same model on the
   pairs `preference_replay_mode` replays, with their weights); its held-out pair accuracy is logged;
3. with `normalize_reward` (default), the mean and standard deviation of its scores on the answers of the pairs
   it was trained on are measured, and the learned reward becomes (score - mean) / std.
Every step then runs `rl_algorithm` (MAGRPO by default; its REINFORCE variants mareinforce, maremax and marloo,
which are MAGRPO with advantage_mode raw, max and rloo; IAC or MAAC) on the task whose reward is the frozen
reward model's value (`LearnedReward`). Evaluation switches the learned reward off: it uses the task reward.

Under data-parallel training (`parallel_training: ddp`; IAC and MAAC as `rl_algorithm` with their own ddp keys:
`iac.update_schedule: episodes`, `iac.train_batch_size: null`) every process takes part
in the collection (its share of the seeded chunks), receives all pairs (rank 0 reads and writes the files), trains
the reward model alike (rank 0's copy is then sent to all, so they cannot drift), and runs the RL step on its own
item, as the RL algorithm does under ddp.

The reward model is saved in every checkpoint after the RL algorithm's models, and its mean and std in the
trainer state, so a resumed run continues with exactly the rewards it had. Steps 1-3 draw from their own seeded
generators, so reading saved pairs instead of sampling them leaves the RL phase's random numbers unchanged.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import random
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch

# RL_TRAINERS: rl_algorithm -> the trainer that runs it (it lives with `Run`, which derives the RL algorithm's run
# from the MARLHF section, cooprl.config.run)
from cooprl.config import (RL_TRAINERS, ConfigError, IterativeFields, MARLHFIterSection, MARLHFSection, Run,
                           check_parallel_training, trainer_device)
from cooprl.metrics import Metrics
from cooprl.models.loading import load_causal_lm, load_tokenizer
from cooprl.models.value_model import ValueModel
from cooprl.parallel.context import Parallel
from cooprl.preferences.comparators import build_comparator
from cooprl.preferences.pairs import (CandidateSources, IterationPlan, PairStore, RewardDistribution, collect_pairs,
                                      open_pair_store, plan_chunks, policy_checkpoints, read_pairs, write_pairs)
from cooprl.preferences.reward_model import (PAIRS_PER_BATCH, RewardModel, RewardTraining, score_stats,
                                             train_reward_model)
from cooprl.task import Score, Task
from cooprl.trainers.actor_critic import build_iac, build_maac
from cooprl.trainers.loop import Algorithm, as_metrics
from cooprl.trainers.magrpo import build_magrpo

log = logging.getLogger(__name__)
# the builders of the trainers RL_TRAINERS names
RL_BUILDERS = {"magrpo": build_magrpo, "iac": build_iac, "maac": build_maac}

MIN_SCORE_STD = 1e-6        # floor of the std the learned reward is divided by (all pairs' answers scored alike)


class LearnedReward:
    """The score function of the learned-reward task: the reward model's value, standardized, as `total`.

    The task's own score is still computed: its metrics and success flag are kept, its total is logged as
    `task_reward_mean` (so the logs show whether the learned reward helps), and its details feed the next
    turn's prompts. The reward model sees the item's first prompts (what its pairs were collected with).
    `total` = (value - mean) / max(std, MIN_SCORE_STD); mean 0 and std 1 (the defaults) leave the value as is.
    """

    def __init__(self, task: Task, reward_model: RewardModel):
        self.task, self.reward_model, self.enabled = task, reward_model, True
        self.mean, self.std = 0.0, 1.0

    def __call__(self, items: Sequence[Any], joints: Sequence[Sequence[str]]) -> list[Score]:
        scores = self.task.score(items, joints)
        if not self.enabled:
            return scores
        values = self.reward_model.score([(self.task.first_prompts(item), list(joint))
                                          for item, joint in zip(items, joints)])
        values = [(v - self.mean) / max(self.std, MIN_SCORE_STD) for v in values]
        return [dataclasses.replace(s, total=v, metrics={**s.metrics, "task_reward_mean": s.total}, agent_rewards=None)
                for s, v in zip(scores, values)]

    @contextlib.contextmanager
    def task_reward(self) -> Iterator[None]:
        """Within this block, scores are the task's own (evaluation)."""
        self.enabled = False
        try:
            yield
        finally:
            self.enabled = True


def learned_reward_task(task: Task, reward_model: RewardModel) -> tuple[Task, LearnedReward]:
    """Return (a copy of `task` scored by the reward model, its LearnedReward switch).

    `max_reward` stays the task's, so the default reward shift (and evaluation's processed rewards) match the
    plain RL algorithm's.
    """
    learned = LearnedReward(task, reward_model)
    return dataclasses.replace(task, name=f"{task.name}+reward_model", score=learned), learned


class MARLHF(Algorithm):
    """MARLHF (and MARLHF_ITER) for the shared training loop: wraps the RL algorithm built on the learned reward."""

    task_reward_key = "turn_1/task_reward_mean"   # it trains on the learned reward: the summary judges the task's

    def __init__(self, run: Run[MARLHFSection], task: Task, rl: Any, reward_model: RewardModel,
                 learned: LearnedReward, comparator: Any = None, parallel: Parallel | None = None):
        section = run.section
        self.config, self.section, self.task, self.rl = run.config, section, task, rl
        self.reward_model, self.learned, self.comparator = reward_model, learned, comparator
        self.models = [*rl.models, reward_model.model]
        self.plan = plan = IterationPlan.of(section)
        self.rounds = plan.rounds          # the loop repeats its step plan this often
        self.trained_iteration = -1                                # last iteration whose reward model is trained
        self.reward_metrics: dict[str, float] = {}
        self.store: PairStore | None = None
        self.steps_per_round = 1
        self.reward_dist: RewardDistribution | None = None   # log_reward_distribution (opened in start_run)
        self.parallel = parallel or Parallel.of(section)   # the run's one context, the RL algorithm's too

    def start_run(self, run_dir: Path, step: int, steps_per_round: int) -> None:
        """Open the run's pair files (the loop calls this on every rank once the run folder and the resumed step are
        known; rank 0 alone reads and writes them)."""
        self.steps_per_round = steps_per_round
        if self.parallel.is_main:
            self.store = open_pair_store(run_dir, step)
            if isinstance(self.section, IterativeFields) and self.section.log_reward_distribution:
                self.reward_dist = RewardDistribution(run_dir / "reward_distributions", self.task.max_reward)

    # ------------------------------------------------------------------------------------------ training
    def train_step(self, item: Any, step: int) -> Metrics:
        """Learn the iteration's reward model first if needed, then one RL step on the learned reward; return
        metrics."""
        iteration = (step - 1) // self.steps_per_round
        policies = self.rl.models[:len(self.rl.team)]
        policy_checkpoints(self.section, policies, step, self.steps_per_round, before=True,
                           parallel=self.parallel)   # rank 0 writes
        if hasattr(self.comparator, "start_iteration"):   # comparator_policy history
            self.comparator.start_iteration(iteration)
        if iteration > self.trained_iteration:
            with torch.random.fork_rng():
                torch.manual_seed(self._seed(iteration))
                self.reward_metrics = self.learn_reward(iteration, step)
                if self.reward_dist is not None:
                    self.reward_metrics.update(self.reward_dist.metrics(iteration))
            self.trained_iteration = iteration
        metrics = as_metrics(self.rl.train_step(item, step))
        metrics.update(self.reward_metrics)
        policy_checkpoints(self.section, policies, step, self.steps_per_round, before=False,
                           parallel=self.parallel)
        return metrics

    def end_epoch(self) -> Metrics:
        """At an epoch's end the RL algorithm trains what its buffer still holds; return its metrics."""
        return self.rl.end_epoch()

    def _seed(self, iteration: int) -> int:
        return self.config.seed * 1000 + 777 + iteration

    def learn_reward(self, iteration: int, step: int) -> dict[str, float]:
        """Get iteration's pairs (read back, or collected and written), train the reward model; return its metrics."""
        main = self.store is not None   # rank 0 (every rank of a single process run)
        path = self.store.path(iteration) if main else None
        saved = self.parallel.broadcast(read_pairs(path) if main and path.is_file() else None)
        if saved is not None:
            pairs = saved
            log.info("iteration %d: %d preference pairs read from %s", iteration, len(pairs), path)
        else:
            pairs = self.collect(iteration, step)
            if main:
                write_pairs(path, pairs)
                log.info("iteration %d: %d preference pairs written to %s", iteration, len(pairs), path)
        history = self.parallel.from_main(lambda: {k: read_pairs(self.store.path(k)) for k in range(iteration)})
        weighted = self.plan.replayed({**history, iteration: pairs}, iteration, random.Random(self._seed(iteration)))
        metrics = {"reward_model/iteration": float(iteration), "preferences/new_pairs": float(len(pairs))}
        if pairs:
            metrics["preferences/reward_gap"] = sum(p.reward_gap for p in pairs) / len(pairs)
        if not weighted:
            log.warning("iteration %d: no preference pairs (every candidate tied): the reward model is not trained",
                        iteration)
            return metrics
        s = self.section
        training = RewardTraining(s.reward_model_learning_rate, s.reward_model_epochs, s.reward_eval_fraction,
                                  self._seed(iteration), s.max_grad_norm, s.reward_train_batch_size or PAIRS_PER_BATCH,
                                  self.config.agent_model.bf16_optimizer)
        metrics.update(train_reward_model(self.reward_model, [p for p, _ in weighted], training,
                                          weights=[w for _, w in weighted]))
        self.parallel.broadcast_parameters(self.reward_model.model)   # every rank trained it alike: keep rank 0's
        if s.normalize_reward:
            # A fresh head scores about +-0.01: next to the reward processor's shift (-4 by default) such a reward
            # is nearly invisible, and IAC's critic would learn targets on the shift's scale, not the reward's.
            self.learned.mean, self.learned.std = self.parallel.broadcast(
                score_stats(self.reward_model, [p for p, _ in weighted]))
            metrics.update({"reward_model/score_mean": self.learned.mean, "reward_model/score_std": self.learned.std})
        log.info("iteration %d reward model: %s", iteration,
                 ", ".join(f"{k.split('/')[-1]} {v:.3f}" for k, v in metrics.items()))
        return metrics

    def collect(self, iteration: int, step: int) -> list[Any]:
        """Return preference pairs on the items of the step plan, scored with the task reward."""
        chunks = plan_chunks(self.task, self.section, self.config.seed, self.steps_per_round, self.parallel)
        # before the first RL step of the iteration: the bar does not move meanwhile, so say what takes the time
        log.info("iteration %d: sampling %d candidates on each of %d problems for preference pairs", iteration,
                 self.section.preference_num_candidates, sum(map(len, chunks)))

        def sample(agent: int, prompts: Sequence[str], n: int):
            return self.rl.team[agent].sample(prompts, n)

        task = self.scoring_task(iteration)

        def collect_chunk(chunk: list[Any], rng: random.Random) -> list[Any]:
            return collect_pairs(chunk, CandidateSources(task, sample, self.comparator), self.section, iteration, rng,
                                 step=step,
                                 record=(lambda c: self.reward_dist.add(iteration, c)) if self.reward_dist else None)

        # each chunk on one process, seeded by its index: the pairs do not depend on the number of processes;
        # sharded policies are gathered for the whole collection (processes sample different numbers of chunks)
        with self.parallel.sampling(*self.rl.models):
            chunk_pairs = self.parallel.run_seeded(chunks, self._seed(iteration), collect_chunk)
        return [pair for pairs in chunk_pairs for pair in pairs]

    def scoring_task(self, iteration: int) -> Task:
        """Return the task whose reward scores iteration's candidates: the task reward, or with
        `preference_scoring_reward: reward_model` the reward model learned so far (from the second iteration on;
        the first has no trained model yet)."""
        if (isinstance(self.section, MARLHFIterSection) and self.section.preference_scoring_reward == "reward_model"
                and iteration > 0):
            return dataclasses.replace(self.task, name=f"{self.task.name}+reward_model", score=self.learned)
        return self.task

    # ------------------------------------------------------------------------------------------ evaluation
    @torch.no_grad()
    def evaluate(self, items: list[Any]) -> dict[str, float]:
        """Return the RL algorithm's eval metrics on `items`, scored with the task reward (never the learned one)."""
        with self.learned.task_reward():
            return self.rl.evaluate(items)

    # ------------------------------------------------------------------------------------------ checkpoints
    def generators(self) -> list[Any]:
        """Return the RL algorithm's samplers."""
        return self.rl.generators()

    def rank_state(self) -> dict[str, Any]:
        """Return what differs between the processes of a data-parallel run: the RL algorithm's buffers."""
        return self.rl.rank_state()

    def load_rank_state(self, state: dict[str, Any]) -> None:
        """Restore what `rank_state` saved."""
        self.rl.load_rank_state(state)

    def state_dict(self) -> dict[str, Any]:
        """Return the RL algorithm's state, which iteration's reward model the checkpoint holds and its mean/std, and
        the comparator's policy snapshots (history, current_copy) when it keeps some."""
        state = {"rl": self.rl.state_dict(), "trained_iteration": self.trained_iteration,
                 "reward_metrics": self.reward_metrics, "reward_normalization": (self.learned.mean, self.learned.std)}
        if hasattr(self.comparator, "state_dict"):
            state["comparator"] = self.comparator.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` saved."""
        self.rl.load_state_dict(state["rl"])
        self.trained_iteration, self.reward_metrics = state["trained_iteration"], state["reward_metrics"]
        # checkpoints written before the learned reward was normalized: raw scores
        self.learned.mean, self.learned.std = state.get("reward_normalization", (0.0, 1.0))
        if "comparator" in state and hasattr(self.comparator, "load_state_dict"):
            self.comparator.load_state_dict(state["comparator"])


# ---------------------------------------------------------------------------------------------- building
def build_reward_model(run: Run[MARLHFSection]) -> RewardModel:
    """Return a fresh reward model on `reward_model_name` (null = the agents' model), on `reward_model_device` (null =
    agent_model.device)."""
    config, section = run.config, run.section
    name = section.reward_model_name or config.agent_model.name
    device, = Parallel.devices([trainer_device(section.reward_model_device, "reward_model_device",
                                               config.agent_model.device)])
    lm = load_causal_lm(name, torch_dtype=config.agent_model.torch_dtype, device=device)
    model = ValueModel(lm)
    if section.reward_freeze_backbone:  # only the linear head learns
        for p in model.trunk_parameters():
            p.requires_grad_(False)
    return RewardModel(model, load_tokenizer(name), section.reward_max_length)


def build_marlhf(run: Run[MARLHFSection], task: Task, parallel: Parallel | None = None) -> MARLHF:
    """Return MARLHF (or MARLHF_ITER): the reward model, the RL algorithm on the learned reward (built with `run.rl`,
    see cooprl.config.run), the comparator."""
    trainer, section = run.trainer, run.section
    if task.agent_rewards:   # its pairs rank joint answers by one reward, as MADPO's
        raise ConfigError(f"{trainer}: MARLHF's preference pairs rank joint answers by the team's one reward, and "
                          f"this task gives each agent its own (a general-sum team); use the task's shared reward")
    if section.rl_algorithm not in RL_TRAINERS:
        raise ConfigError(f"{trainer}.rl_algorithm={section.rl_algorithm!r}: choose one of {', '.join(RL_TRAINERS)}")
    # the RL algorithm's section (IAC's or MAAC's own keys, with MARLHF's shared ones) meets the ddp rules too
    check_parallel_training(run.rl)
    reward_model = build_reward_model(run)
    learned_task, learned = learned_reward_task(task, reward_model)
    rl = RL_BUILDERS[RL_TRAINERS[section.rl_algorithm]](run.rl, learned_task, parallel)
    comparator = None
    if isinstance(section, IterativeFields):   # MARLHF_ITER: the comparator_* keys
        comparator = build_comparator(run, task, rl.team)
    if comparator is not None and task.follow_prompt is not None:   # as MADPO_ITER (cooprl.trainers.madpo)
        raise ConfigError(f"{trainer}: this task is a sequential team (a later agent reads the earlier agents' "
                          f"answers) and a comparator writes joint answers without that; compare the policies' own "
                          f"candidates: {trainer}.comparator_policy=current "
                          f"{trainer}.comparator_candidate_budget=shared")
    return MARLHF(run, task, rl, reward_model, learned, comparator, parallel)
