"""The metrics of a training step (cooprl.metrics): each key merged by the rule it was recorded with, over one
process's records and then over the processes."""

import pytest

from cooprl.metrics import MAX, STEPS, SUM, Metrics


def test_each_rule_merges_one_processes_records():
    metrics = Metrics({"reward": 1.0})
    for loss, samples, largest in [(1.0, 4, 2.0), (3.0, 2, 5.0)]:
        metrics.add("loss", loss)
        metrics.add("trained_samples", samples, SUM)
        metrics.add("is_weight_max", largest, MAX)
        metrics.add("optimizer_steps", 1, STEPS)
    assert dict(metrics) == {"reward": 1.0, "loss": 2.0, "trained_samples": 6.0, "is_weight_max": 5.0,
                             "optimizer_steps": 2.0}


def test_merge_prefixes_keys_and_keeps_their_rules():
    step = Metrics({"loss": 4.0})
    step.add("trained_samples", 3, SUM)
    update = Metrics()
    update.merge(step, prefix="agent_0/")
    update.merge(step, prefix="agent_0/")
    assert dict(update) == {"agent_0/loss": 4.0, "agent_0/trained_samples": 6.0}
    assert update.rule("agent_0/trained_samples") == SUM


def test_a_key_has_one_rule():
    metrics = Metrics({"loss": 1.0})
    with pytest.raises(ValueError, match="recorded as mean and as max"):
        metrics.add("loss", 2.0, MAX)
    with pytest.raises(ValueError, match="rule 'median'"):
        metrics.add("x", 2.0, "median")


def test_the_processes_merge_by_each_keys_rule():
    # two processes that took the same 2 optimizer steps: counts of their own samples add up, a shared count of
    # steps does not; a maximum stays the maximum; a key only rank 1 recorded is its own
    ranks = []
    for loss, samples, largest in [(1.0, 4, 1.5), (3.0, 2, 2.5)]:
        metrics = Metrics({"agent_0/loss": loss})
        metrics.add("agent_0/trained_samples", samples, SUM)
        metrics.add("agent_0/is_weight_max", largest, MAX)
        metrics.add("agent_0/optimizer_steps", 2, STEPS)
        ranks.append(metrics)
    ranks[1].add("turn_2/reward_mean", 0.5)
    gathered = [{key: (metrics.rule(key), metrics[key]) for key in metrics} for metrics in ranks]
    merged = ranks[0].reduce(gather=lambda mine: gathered)
    assert merged == {"agent_0/loss": 2.0, "agent_0/trained_samples": 6.0, "agent_0/is_weight_max": 2.5,
                      "agent_0/optimizer_steps": 2.0, "turn_2/reward_mean": 0.5}
    assert ranks[0].reduce() == {"agent_0/loss": 1.0, "agent_0/trained_samples": 4.0, "agent_0/is_weight_max": 1.5,
                                 "agent_0/optimizer_steps": 2.0}
