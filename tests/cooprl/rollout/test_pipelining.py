"""Pipelined rollouts (issue 16 §3): a chunk of a turn's nodes is scored while the next chunk generates, and the
results are those of the sequential path, to the last bit (same seeds)."""

import threading

import pytest
import torch

from cooprl.config import ConfigError, Run, load_config
from cooprl.rollout.generation import Completion
from cooprl.rollout.tree import RolloutSettings, iter_nodes, rollout
from cooprl.task import Score, Task
from cooprl.trainers.loop import seed_everything
from cooprl.trainers.magrpo import build_magrpo

pytestmark = pytest.mark.slow   # end to end (trainers, command lines, subprocesses): not in `make test-fast`


def random_sampler(calls):
    """A sampler whose texts come from torch's generator (as a model's samples do); records each call's prompts."""
    def sample(agent, prompts, n):
        calls.append((agent, list(prompts)))
        return [[Completion(f"{p}|{torch.randint(0, 10, (1,)).item()}", torch.tensor([1]), torch.tensor([2]), False)
                 for _ in range(n)] for p in prompts]
    return sample


def digit_task(score_hook=lambda items, joints: None):
    """A 2-agent task: reward = the sum of the sampled digits / 18; the next prompt quotes the reward."""
    def score(items, joints):
        score_hook(items, joints)
        return [Score(sum(int(t.rsplit("|", 1)[1]) for t in joint) / 18, {"grad": float(torch.is_grad_enabled())})
                for joint in joints]

    def next_prompts(item, histories, joint, score_):
        return [f"{item}/r{score_.total:.3f}"] * 2

    return Task("digits", 2, ["a", "b"], [], lambda item: [item, item], score, next_prompts, max_reward=1.0)


def tree_record(roots):
    return [(node.turn, node.prompts, [[c.text for c in s] for s in node.samples], node.rewards, node.returns,
             node.terminated_early) for root in roots for node in iter_nodes(root)]


@pytest.mark.parametrize("chunk", [1, 2])
def test_pipelined_rollout_equals_the_sequential_one(chunk):
    results, calls = [], []
    for pipeline in (False, True):
        calls.append([])
        settings = RolloutSettings(num_turns=3, samples_per_turn=[3, 2, 2], discount=0.9, nodes_per_generation=chunk,
                                   pipeline=pipeline, early_termination_threshold=0.8)
        torch.manual_seed(5)
        with torch.no_grad():
            results.append(tree_record(rollout(["p", "q"], digit_task(), random_sampler(calls[-1]), settings)))
    assert results[0] == results[1]
    assert calls[0] == calls[1]                                      # the same sampling calls in the same order
    assert max(len(prompts) for _, prompts in calls[0]) == chunk     # chunked: at most `chunk` nodes per call


def test_a_chunk_is_scored_while_the_next_one_generates():
    """The second chunk's sampling waits until the first chunk's scoring has started: only overlap lets it go on."""
    first_scored, scoring_threads = threading.Event(), []

    def score_hook(items, joints):
        scoring_threads.append(threading.current_thread().name)
        first_scored.set()

    calls = []
    inner = random_sampler(calls)

    def sample(agent, prompts, n):
        if len(calls) == 2:   # the second node's first agent: the first node (2 calls) is being scored meanwhile
            assert first_scored.wait(timeout=30), "the first chunk was not scored while the second one generated"
        return inner(agent, prompts, n)

    settings = RolloutSettings(num_turns=1, samples_per_turn=[2], nodes_per_generation=1, pipeline=True)
    roots = rollout(["p", "q", "r"], digit_task(score_hook), sample, settings)
    assert [len(root.rewards) for root in roots] == [2, 2, 2]
    assert all(name.startswith("cooprl-scoring") for name in scoring_threads) and len(scoring_threads) == 3


def test_the_scorer_keeps_the_callers_grad_mode_and_raises_its_errors():
    settings = RolloutSettings(num_turns=1, samples_per_turn=[2], nodes_per_generation=1, pipeline=True)
    for grad in (False, True):
        with torch.set_grad_enabled(grad):
            roots = rollout(["p", "q"], digit_task(), random_sampler([]), settings)
        assert {s.metrics["grad"] for root in roots for s in root.scores} == {float(grad)}

    def failing(items, joints):
        raise RuntimeError("sandbox down")
    with pytest.raises(RuntimeError, match="sandbox down"):
        rollout(["p", "q"], digit_task(failing), random_sampler([]), settings)


def test_config_keys_and_bad_values():
    config = load_config(None, ["reward.pipeline_nodes=1", "reward.pipeline=false"])
    assert (config.reward.pipeline_nodes, config.reward.pipeline) == (1, False)
    default = load_config(None, [])
    assert (default.reward.pipeline_nodes, default.reward.pipeline) == (None, True)
    with pytest.raises(ConfigError, match="reward.pipeline_nodes"):
        load_config(None, ["reward.pipeline_nodes=0"])


def magrpo_run(pipeline, steps=2):
    """Return (per-step metrics, final weights of agent 0) of a short MAGRPO run on the code task with real
    sandbox scoring, node by node."""
    from envs.code_generation.task import build_code_task
    config = load_config(
        None,
        [
            "agent_model.name=offline:tiny-random",
            "agent_model.device=cpu",
            "agent_model.torch_dtype=float32",
            "dataset.name=coop",
            "dataset.train_split=train[16:18]",
            "dataset.eval_split=test[:1]",
            "magrpo.num_generations=2",
            "magrpo.max_new_tokens=6",
            "magrpo.num_turns=2",
            "magrpo.learning_rate=0.01",
            "magrpo.early_termination_threshold=null",
            "magrpo.rollout_buffer_size=1",
            "reward.pipeline_nodes=1",
            f"reward.pipeline={str(pipeline).lower()}",
        ],
    )
    seed_everything(config.seed)
    task = build_code_task(Run.of(config, "magrpo"))
    algorithm = build_magrpo(Run.of(config, "magrpo"), task)
    metrics = [algorithm.train_step(task.train_items[i % len(task.train_items)], i + 1) for i in range(steps)]
    return metrics, {n: p.detach().clone() for n, p in algorithm.models[0].named_parameters()}


def test_pipelined_magrpo_run_equals_the_sequential_one():
    torch.set_num_threads(1)
    sequential, weights = magrpo_run(False)
    pipelined, pipelined_weights = magrpo_run(True)
    assert sequential == pipelined    # every reward level, return and loss of both steps
    assert sequential[0]["turn_2/nodes"] == 2.0 and "turn_2/reward_mean" in sequential[1]
    assert all(torch.equal(weights[n], pipelined_weights[n]) for n in weights)
