"""Metrics of rollout trees, per turn: rewards, returns, the task's reward parts, early terminations, pass@k.

Training and evaluation use the same function. Evaluation rolls out `n` independent chains per problem
(n samples at the first turn, one per chain after it) so that pass@k is the unbiased estimator over n.
A chain that stopped early keeps its last score for the later turns (a solved problem stays solved).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from math import comb
from typing import Any, Callable, Sequence

import torch
from tqdm.auto import tqdm

from cooprl.config import TrainerSection
from cooprl.parallel.context import SINGLE, Parallel
from cooprl.rollout.tree import Node, RolloutSettings, Sampler, rollout, tree_metrics
from cooprl.task import Task


def pass_at_k(n: int, c: int, k: int) -> float:
    """Return the unbiased pass@k estimate from n samples of which c are correct (Chen et al., 2021)."""
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def chain_pass_at_k(roots: Sequence[Node], num_turns: int, ks: Sequence[int], prefix: str = "eval/") -> dict[str,
                                                                                                             float]:
    """Return pass@k per turn over evaluation chains (root joint action j -> its single-sample descendants)."""
    per_turn: dict[int, list[float]] = defaultdict(list)
    for root in roots:
        n = len(root.joint)
        successes = [0] * num_turns
        for j in range(n):
            node, index, solved = root, j, False
            for t in range(num_turns):
                if node is not None:
                    solved = node.scores[index].success
                    node, index = node.children[index], 0
                successes[t] += int(solved)
        for t in range(num_turns):
            for k in ks:
                per_turn[(t, k)].append(pass_at_k(n, successes[t], k))
    return {f"{prefix}turn_{t + 1}/pass@{k}": sum(v) / len(v) for (t, k), v in per_turn.items()}


def evaluation_settings(section: TrainerSection, process_reward: Callable[[float], float]) -> RolloutSettings:
    """Return the evaluation tree shape of every trainer: n = eval_num_generations chains of single samples."""
    samples = [section.eval_num_generations] + [1] * (section.num_turns - 1)
    return RolloutSettings(num_turns=section.num_turns, samples_per_turn=samples, joint_mode="aligned",
                           discount=section.discount, early_termination_threshold=section.early_termination_threshold,
                           process_reward=process_reward)


def evaluate_team(items: Sequence[Any], task: Task, sample: Sampler, section: TrainerSection,
                  process_reward: Callable[[float], float], parallel: Parallel = SINGLE) -> dict[str, float]:
    """Return eval metrics per turn (the task's score metrics, success rate, pass@k) of the team's sampler on `items`.

    The items are rolled out in batches of `eval_batch_size`. Batch 0 draws from torch's generator as the caller
    seeded it; batch b > 0 from a seed derived from that one and b, so a batch's samples do not depend on which
    process rolls it out. Under data-parallel training (`parallel`) every rank calls this with the same items and
    seed, rolls out batches rank, rank + W, ... and receives the metrics of all of them: W processes evaluate in 1/W
    of the time and report the numbers of one process (tests/cooprl/parallel/test_scale_out.py)."""
    settings = evaluation_settings(section, process_reward)
    size = section.eval_batch_size or max(len(items), 1)   # problems rolled out together
    batches = [items[start:start + size] for start in range(0, len(items), size)]
    bar = answers_bar(len(items), section, task.num_agents, parallel.is_main)
    counted = counting_sampler(sample, bar)

    def roll_out(batch: Sequence[Any], rng: Any) -> list[Node]:
        # the metrics read scores and tree shapes only: keep (and send between processes) the trees without samples
        return [_scores_only(root) for root in rollout(batch, task, counted, settings)]

    # the caller's evaluation seed (cooprl.trainers.loop, evaluate.py) seeds batch 0, derived seeds the others
    with bar:
        roots = [root for batch_roots in parallel.run_seeded(batches, torch.initial_seed(), roll_out)
                 for root in batch_roots]
        bar.total = bar.n   # chains that ended early sampled fewer answers than the bar's estimate
    metrics = tree_metrics(roots, section.num_turns, prefix="eval/")
    metrics.update(chain_pass_at_k(roots, section.num_turns, section.eval_pass_k))
    return metrics


def answers_bar(num_items: int, section: TrainerSection, num_agents: int, drawn: bool = True) -> tqdm:
    """Return the evaluation's progress bar: answers sampled, with their rate. Its total counts every chain to its
    last turn (eval_num_generations per problem and agent, each turn); `drawn` by the main process only, and removed
    once done (the summary's numbers stay)."""
    total = num_items * section.eval_num_generations * num_agents * section.num_turns
    return tqdm(total=total, desc="evaluating", unit="answer", dynamic_ncols=True, leave=False,
                disable=not drawn)


def counting_sampler(sample: Sampler, bar: tqdm) -> Sampler:
    """Return `sample`, moving `bar` on by the answers each call returns (it draws nothing itself: the samples are
    the same as without it)."""
    def counted(agent: int, prompts: Sequence[str], n: int) -> Any:
        answers = sample(agent, prompts, n)
        bar.update(len(prompts) * n)
        return answers
    return counted


def _scores_only(node: Node) -> Node:
    """Return a copy of `node`'s tree with what the metrics read (scores, rewards, returns, shapes), no texts or ids."""
    return dataclasses.replace(node, item=None, prompts=[], histories=[], samples=[], sample_prompts=[],
                               children=[None if child is None else _scores_only(child) for child in node.children])
