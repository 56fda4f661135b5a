"""The one guard of every trainer's reward (`cooprl.task.SafeScore`, issue 34 item 1): a joint action whose scoring
raises scores 0 with a logged reason and the metric `reward_errors`, the run goes on, and the other joint actions
keep their scores and their group."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest
import torch

from cooprl.rollout.generation import Completion
from cooprl.rollout.tree import tree_metrics
from cooprl.rollout.tree import RolloutSettings, rollout
from cooprl.task import SafeScore, Score, Task


def group_task(raise_on: str = "boom", group_only: bool = False) -> Task:
    """A task whose reward needs a node's whole group: each score is 10 * (group size) + len(text); the text
    `raise_on` raises (alone or in a group), or with `group_only` only a group holding it raises."""
    def score(items, joints):
        texts = [joint[0] for joint in joints]
        if raise_on in texts and (not group_only or len(texts) > 1):
            raise ValueError(f"cannot score {raise_on!r}")
        return [Score(10.0 * len(texts) + len(text), {"length": float(len(text))}) for text in texts]

    def next_prompts(item, histories, joint, score_):
        return ["again"]

    return Task("group", 1, ["x"], [], lambda item: ["p"], score, next_prompts, max_reward=100.0)


def sampler(texts):
    def sample(agent, prompts, n):
        return [[Completion(texts[g], torch.tensor([1]), torch.tensor([2]), False) for g in range(n)] for _ in prompts]
    return sample


def test_a_joint_action_whose_reward_raises_scores_zero_and_the_others_keep_their_group(caplog):
    task = group_task()
    settings = RolloutSettings(num_turns=2, samples_per_turn=[3, 3])
    with caplog.at_level(logging.WARNING, logger="cooprl.task"):
        root = rollout(["x"], task, sampler(["a", "boom", "abc"]), settings)[0]
    # the others are scored in their group of three (the failing text emptied): 30 + their length
    assert [s.total for s in root.scores] == [31.0, 0.0, 33.0]
    assert [s.metrics["reward_errors"] for s in root.scores] == [0.0, 1.0, 0.0]
    assert root.scores[1].error.startswith("ValueError: cannot score 'boom' (at ")
    assert any("raised; it scores 0: ValueError: cannot score 'boom'" in r.getMessage() for r in caplog.records)
    assert root.children[1] is None and root.children[0] is not None and root.children[2] is not None
    metrics = tree_metrics([root], 2)
    assert metrics["turn_1/reward_errors"] == 1.0     # a count per turn, not a mean
    assert metrics["turn_2/reward_errors"] == 2.0     # the two children that went on met 'boom' once each
    assert metrics["turn_1/length"] == 2.0            # the others' metrics are their own


def test_a_batch_that_scores_is_scored_once_and_as_it_is():
    calls = []
    task = group_task()
    raw = task.score.raw
    task.score.raw = lambda items, joints: calls.append(len(joints)) or raw(items, joints)
    scores = task.score(["x", "x"], [["a"], ["bb"]])
    assert calls == [2] and [s.total for s in scores] == [21.0, 22.0]
    assert [s.metrics for s in scores] == [{"length": 1.0, "reward_errors": 0.0}, {"length": 2.0, "reward_errors": 0.0}]


def test_a_group_that_raises_only_as_a_group_is_wholly_zero_with_the_reason():
    task = group_task(group_only=True)
    first, second = object(), object()
    scores = task.score([first, first, second], [["a"], ["boom"], ["c"]])
    assert [s.total for s in scores] == [0.0, 0.0, 11.0]   # the other node's group is untouched
    assert all("its group's reward raised ValueError" in s.error for s in scores[:2])


def test_every_task_is_guarded_however_it_is_built():
    task = group_task()
    assert isinstance(task.score, SafeScore)
    again = replace(task, name="copy")
    assert isinstance(again.score, SafeScore) and not isinstance(again.score.raw, SafeScore)
    with pytest.raises(ValueError):
        task.score.raw(["x"], [["boom"]])     # the reward itself still raises: only the guard turns it into 0
    assert task.score(["x"], [["boom"]])[0].total == 0.0


def test_a_reward_that_raises_on_an_empty_answer_too_is_broken_and_raises():
    def down(items, joints):
        raise RuntimeError("sandbox down")
    task = replace(group_task(), score=down)
    with pytest.raises(RuntimeError, match="sandbox down"):     # no completion caused it: the run stops
        task.score(["x", "x"], [["a"], ["b"]])
