"""Rollout tree shapes, returns, early termination and advantage modes on scripted rewards (no models)."""

import pytest
import torch

from cooprl.rollout.generation import Completion
from cooprl.rollout.tree import (RolloutSettings, iter_nodes, joint_actions, rollout,
                            sample_returns)
from cooprl.task import Score, Task
from cooprl.update.losses import group_advantages as advantages


def fake_sampler(texts_per_call):
    """Sampler returning completions 's0', 's1', ... so the reward can be scripted on them."""
    def sample(agent, prompts, n):
        return [[Completion(f"s{g}", torch.tensor([1]), torch.tensor([2]), False) for g in range(n)] for _ in prompts]
    return sample


def table_task(num_agents, reward_of):
    """A task whose reward is reward_of(turn, joint texts); the turn is read from the prompt."""
    def score(items, joints):
        return [Score(reward_of(item, joint)) for item, joint in zip(items, joints)]

    def next_prompts(item, histories, joint, score_):
        return [f"turn{len(h)}" for h in histories]

    return Task("table", num_agents, ["x"], [], lambda item: ["turn0"] * num_agents, score, next_prompts,
                max_reward=1.0)


def count_leaves(root):
    return sum(1 for node in iter_nodes(root) for child in node.children if child is None)


@pytest.mark.parametrize("mode,agents,G,T,leaves", [
    ("aligned", 2, 3, 2, 9), ("aligned", 2, 2, 3, 8), ("cross", 2, 2, 2, 16), ("cross", 3, 2, 1, 8),
    ("aligned", 1, 4, 2, 16)])
def test_tree_shapes(mode, agents, G, T, leaves):
    task = table_task(agents, lambda item, joint: 0.0)
    settings = RolloutSettings(num_turns=T, samples_per_turn=[G] * T, joint_mode=mode)
    root = rollout(["x"], task, fake_sampler(None), settings)[0]
    assert count_leaves(root) == leaves  # aligned: G^T; cross: G^(N*T)
    assert len(root.joint) == (G if mode == "aligned" else G ** agents)


def test_returns_with_discount_on_scripted_rewards():
    # reward = index of agent 0's sample (s0 -> 0, s1 -> 1); two turns, G=2, aligned
    task = table_task(2, lambda item, joint: float(joint[0][1]))
    root = rollout(["x"], task, fake_sampler(None),
                   RolloutSettings(num_turns=2, samples_per_turn=[2, 2], discount=0.5))[0]
    # each child node has rewards [0, 1] -> mean 0.5; root returns = r + 0.5 * 0.5
    assert root.rewards == [0.0, 1.0]
    assert root.returns == [0.25, 1.25]
    assert [c.returns for c in root.children] == [[0.0, 1.0], [0.0, 1.0]]


def test_cross_mode_sample_returns_average_the_joint_actions_containing_the_sample():
    task = table_task(2, lambda item, joint: float(joint[0][1]) * 10 + float(joint[1][1]))
    root = rollout(["x"], task, fake_sampler(None), RolloutSettings(num_turns=1, samples_per_turn=[2],
                                                                    joint_mode="cross"))[0]
    assert root.joint == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert root.returns == [0.0, 1.0, 10.0, 11.0]
    assert sample_returns(root, 0) == [0.5, 10.5]
    assert sample_returns(root, 1) == [5.0, 6.0]


def test_early_termination_stops_expansion_of_good_nodes():
    task = table_task(2, lambda item, joint: 1.0)
    settings = RolloutSettings(num_turns=3, samples_per_turn=[2, 2, 2], early_termination_threshold=0.5)
    root = rollout(["x"], task, fake_sampler(None), settings)[0]
    assert root.terminated_early and root.children == [None, None]
    settings = RolloutSettings(num_turns=3, samples_per_turn=[2, 2, 2], early_termination_threshold=1.0)
    root = rollout(["x"], task, fake_sampler(None), settings)[0]
    assert not root.terminated_early and count_leaves(root) == 8


def test_advantage_modes_on_hand_computed_numbers():
    r = [1.0, 2.0, 3.0, 6.0]
    assert advantages(r, "mean") == pytest.approx([-2.0, -1.0, 0.0, 3.0])
    assert advantages(r, "raw") == pytest.approx(r)
    assert advantages(r, "max") == pytest.approx([-5.0, -4.0, -3.0, 0.0])
    # leave-one-out: 1 - (2+3+6)/3, 2 - (1+3+6)/3, ...
    assert advantages(r, "rloo") == pytest.approx([1 - 11 / 3, 2 - 10 / 3, 3 - 3.0, 6 - 2.0])
    std = torch.tensor(r).std(unbiased=False).item()
    assert advantages(r, "mean", normalize=True) == pytest.approx([-2 / std, -1 / std, 0.0, 3 / std], rel=1e-5)
    with pytest.raises(ValueError, match="advantage_mode"):
        advantages(r, "median")


def test_joint_actions():
    assert joint_actions(2, 2, "aligned") == [(0, 0), (1, 1)]
    assert len(joint_actions(3, 2, "cross")) == 9
    with pytest.raises(ValueError):
        joint_actions(2, 2, "diagonal")
