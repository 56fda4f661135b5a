"""Upstream's keys we did not have (issue 14 §2): each one changes what a run does, shown here on the tiny model,
the scripted task or fakes (docs/upstream.md lists what each key maps to)."""

from __future__ import annotations

import json
import random

import pytest
import torch

from cooprl.config import Run, load_config
from cooprl.models.loading import TINY_RANDOM
from cooprl.preferences.comparators import build_comparator, generic_api_completer
from cooprl.preferences.pairs import (IterationPlan, PreferencePair, RewardDistribution, draw_weighted,
                                replay_weights, split_candidates)
from cooprl.preferences.reward_model import RewardTraining, train_reward_model
from cooprl.rollout.evaluation import evaluate_team
from cooprl.rollout.generation import SamplingParams
from cooprl.rollout.tree import Completion
from tests.scripted import scripted_task
from tests.cooprl.trainers.test_madpo import madpo_config, run_madpo, train_events
from tests.cooprl.trainers.test_marlhf import marlhf_config, run_marlhf

pytestmark = pytest.mark.slow   # end to end (trainers, command lines, subprocesses): not in `make test-fast`


# ---------------------------------------------------------------------------------------------- every trainer
def test_eval_batch_size_rolls_out_that_many_problems_at_once():
    calls = []

    def sample(agent, prompts, n):
        calls.append(len(prompts))
        return [[Completion("a", torch.tensor([1]), torch.tensor([2]), False) for _ in range(n)] for _ in prompts]

    task = scripted_task(items=6)
    items = [f"x{i}" for i in range(5)]
    for size, expected in [(None, [5, 5]), (2, [2, 2, 2, 2, 1, 1])]:
        calls.clear()
        config = load_config(None, ["magrpo.num_turns=1", f"magrpo.eval_batch_size={'null' if size is None else size}"])
        metrics = evaluate_team(items, task, sample, config.magrpo, lambda r: r)
        assert calls == expected and metrics["eval/turn_1/reward_mean"] == pytest.approx(1 / 8)


def test_trainer_top_k_overrides_the_models():
    from cooprl.trainers.team import build_team
    config = load_config(None, [f"agent_model.name={TINY_RANDOM}", "agent_model.device=cpu", "agent_model.top_k=7",
                                "grpo.top_k=3"])
    assert build_team(Run.of(config, "grpo"), 1)[0].params.top_k == 3
    assert build_team(Run.of(config, "magrpo"), 1)[0].params.top_k == 7   # null: agent_model.top_k


# ---------------------------------------------------------------------------------------------- actor-critic
def test_actor_critic_train_batch_size_splits_the_update_into_optimizer_steps(monkeypatch):
    import cooprl.trainers.base as base
    from cooprl.update.engine import StepResult, Term
    from tests.cooprl.trainers.test_actor_critic import roll_out_one_item, scripted_actor_critic
    for size, steps in [("null", 1), (1, 2)]:
        algorithm = scripted_actor_critic("iac", f"iac.train_batch_size={size}", "iac.num_generations=1",
                                          "iac.early_termination_threshold=null", "iac.update_schedule=episodes")
        # scripted agents: what the update passes on (the policy term and the engine's step of the actors' policy
        # step, TeamAlgorithm.policy_step, are faked)
        for agent in algorithm.team:
            agent.optimizer, agent.tokenizer = None, type("T", (), {"pad_token_id": 0})()
        taken = []
        monkeypatch.setattr(base, "policy_gradient_term", lambda model, samples, *a, taken=taken, **k: taken.append(
            len(samples)) or Term([], lambda batch, denominator: (torch.zeros(()), {})))
        monkeypatch.setattr(base, "optimizer_step", lambda optimizers, terms, models=(), **k: StepResult(
            {term.name: 0.0 for term in terms}, grad_norms=[0.0]))
        algorithm.buffer = algorithm.episode_steps(roll_out_one_item(algorithm))   # 2 turns of one episode
        metrics = algorithm.update()
        assert metrics["update/actor_optimizer_steps"] == 2 * steps      # two agents
        assert taken == [2 // steps] * (2 * steps)                        # each step on its share of the buffer


def test_critic_model_max_length_cuts_the_critic_input_from_the_left():
    from tests.cooprl.trainers.test_actor_critic import scripted_actor_critic
    from cooprl.models.loading import load_tokenizer
    from cooprl.trainers.actor_critic import Critic
    algorithm = scripted_actor_critic("maac", "critic_model.max_length=16")
    critic = Critic(None, load_tokenizer(TINY_RANDOM), None, reuses_agent_ids=False)
    long_text = "word " * 100
    ids = algorithm._tokenize(critic, long_text)
    full = critic.tokenizer(long_text)["input_ids"]
    assert len(ids) == 16 and ids.tolist() == full[-16:]
    algorithm.config = load_config(None, ["agent_model.max_length=32"])   # null: agent_model.max_length
    assert len(algorithm._tokenize(critic, long_text)) == 32


# ---------------------------------------------------------------------------------------------- MADPO
def test_madpo_train_batch_size_takes_one_optimizer_step_per_chunk_of_pairs(tmp_path):
    _, _ = run_madpo(tmp_path, "b", ["madpo.max_steps=2", "madpo.pair_selection=all",
                                     "madpo.preference_num_candidates=4",
                                     "madpo.preference_pairs_per_sample=null", "madpo.train_batch_size=2"])
    logged = train_events(tmp_path / "b")
    for e in logged:
        assert e["dpo/optimizer_steps"] == -(-e["dpo/pairs"] // 2)
    _, _ = run_madpo(tmp_path, "r", ["madpo.max_steps=1", "madpo.pair_selection=all",
                                     "madpo.preference_num_candidates=4", "madpo.rollout_buffer_size=1"])
    e = train_events(tmp_path / "r")[0]
    assert e["dpo/optimizer_steps"] == e["dpo/pairs"]            # rollout_buffer_size: the fallback


def test_madpo_env_step_counts_environment_steps_per_pair(tmp_path):
    run_madpo(tmp_path, "e", ["madpo.max_steps=2", "madpo.pair_selection=all", "madpo.environment_steps_per_pair=3",
                              "madpo.use_environment_step=true"])
    logged = train_events(tmp_path / "e")
    assert logged[1]["env_step"] == 3 * (logged[0]["dpo/pairs"] + logged[1]["dpo/pairs"])
    run_madpo(tmp_path, "n", ["madpo.max_steps=1", "madpo.use_environment_step=false",
                              "madpo.preference_num_candidates=3"])
    assert train_events(tmp_path / "n")[0]["env_step"] == 3          # off: the joint answers sampled


# ---------------------------------------------------------------------------------------------- replay
def pair(item, iteration, tag=""):
    return PreferencePair(item, ["p"], [f"w{tag}"], [f"l{tag}"], 1.0, 0.0, iteration)


def test_nearest_k_replays_the_k_newest_iterations():
    by_iteration = {k: [pair("i", k, str(k))] for k in range(4)}
    kept = [p.iteration for p, w in replay_weights(by_iteration, "nearest_k", 0.0, 3, nearest=2)]
    assert kept == [2, 3]
    assert [p.iteration for p, _ in replay_weights(by_iteration, "nearest_k", 0.0, 3)] == [3]   # k = 1: current only


def test_replay_sample_size_draws_that_many_earlier_pairs_by_weight():
    by_iteration = {0: [pair("i", 0, f"0{j}") for j in range(50)], 1: [pair("i", 1, f"1{j}") for j in range(50)],
                    2: [pair("i", 2, "new")]}
    plan = IterationPlan(3, "lambda_decay", 0.2, 1, 40)
    chosen = plan.replayed(by_iteration, 2, random.Random(0))
    assert chosen[0][0].iteration == 2 and len(chosen) == 1 + 40 and all(w == 1.0 for _, w in chosen)
    ages = [p.iteration for p, _ in chosen[1:]]
    assert ages.count(1) > ages.count(0)       # the newer iteration (weight 0.2^1 vs 0.2^2) is drawn more
    assert len(draw_weighted([("a", 1.0), ("b", 1.0)], 5, random.Random(0))) == 5   # repeats once all are drawn
    # MADPO spreads the iteration's draws over its steps
    config = load_config(None, ["madpo_iter.preference_replay_mode=all_history",
                                "madpo_iter.preference_replay_sample_size=10"])
    assert IterationPlan.of(config.madpo_iter).replay_sample_size == 10


def test_madpo_iter_replay_sample_size_limits_the_replayed_pairs(tmp_path):
    run_madpo(tmp_path, "s", ["madpo_iter.max_steps=1", "madpo_iter.num_iterations=3", "madpo_iter.pair_selection=all",
                              "madpo_iter.preference_num_candidates=4", "madpo_iter.preference_pairs_per_sample=null",
                              "madpo_iter.preference_replay_mode=all_history",
                              "madpo_iter.preference_replay_sample_size=1"], "madpo_iter")
    logged = train_events(tmp_path / "s")
    assert [e["dpo/pairs"] - e["dpo/new_pairs"] for e in logged] == [0, 1, 1]   # one earlier pair per step


# ---------------------------------------------------------------------------------------------- logs and snapshots
def test_log_reward_distribution_and_policy_checkpoint_dir(tmp_path):
    snapshots = tmp_path / "snapshots"
    run_madpo(
        tmp_path,
        "d",
        [
            "madpo_iter.max_steps=2",
            "madpo_iter.num_iterations=2",
            "madpo_iter.comparator_policy=copy",
            "madpo_iter.log_reward_distribution=true",
            f"madpo_iter.policy_checkpoint_dir={snapshots}",
        ],
        "madpo_iter",
    )
    files = sorted((tmp_path / "d" / "reward_distributions").glob("*.json"))
    assert [f.name for f in files] == ["iteration_0.json", "iteration_1.json"]
    dist = json.loads(files[0].read_text())
    assert dist["policy"]["count"] + dist["comparator"]["count"] == 2 * (3 + 3)    # 2 steps x 3 + the comparator's 3
    assert sum(dist["policy"]["histogram"]) == dist["policy"]["count"] and dist["bins"] == 16
    assert all("reward_dist/policy_mean" in e for e in train_events(tmp_path / "d"))
    assert sorted(p.name for p in snapshots.iterdir()) == ["initial", "iteration_0", "iteration_1"]
    assert all((snapshots / "initial" / f"agent_{i}" / "config.json").is_file() for i in (0, 1))
    initial = torch.load  # noqa: F841 - the snapshots are loadable HF folders:
    from transformers import AutoModelForCausalLM
    start = AutoModelForCausalLM.from_pretrained(snapshots / "initial" / "agent_0")
    end = AutoModelForCausalLM.from_pretrained(snapshots / "iteration_1" / "agent_0")
    assert any(not torch.equal(a, b) for a, b in zip(start.parameters(), end.parameters()))   # it trained between


def test_reward_distribution_histogram():
    dist = RewardDistribution("/nonexistent", 4.0)
    assert dist.histogram([0.0, 0.1, 3.99, 4.0, 9.0, -1.0]) == [3] + [0] * 14 + [3]


# ---------------------------------------------------------------------------------------------- comparators
def test_comparator_num_candidates_gives_the_comparator_its_own_candidate_set(tmp_path):
    team_config = madpo_config(tmp_path, "c", "madpo_iter", ["madpo_iter.comparator_num_candidates=5"])
    from cooprl.trainers.madpo import build_madpo
    algorithm = build_madpo(Run.of(team_config, "madpo_iter"), scripted_task())
    # `current` with its own count: the live policies write a second candidate set
    assert algorithm.comparator is not None and algorithm.comparator.generators[0] is algorithm.team[0].generator
    assert split_candidates(3, algorithm.comparator) == (3, 5)
    config = madpo_config(tmp_path, "c2", "madpo_iter", ["madpo_iter.comparator_candidate_budget=shared"])
    assert build_madpo(Run.of(config, "madpo_iter"), scripted_task()).comparator is None   # shared budget, null: none



def with_api(task, factory):
    """Return `task` with the API client factory `factory` (what the code task gives its comparators)."""
    task.api_client = factory
    return task

def test_centralized_comparator_of_the_current_policy_is_agent_index_s_live_model(tmp_path):
    from cooprl.task import JointFormat
    from cooprl.trainers.team import build_team
    config = madpo_config(tmp_path, "x", "madpo_iter", ["madpo_iter.comparator_generation_mode=centralized",
                                                        "madpo_iter.comparator_centralized_agent_index=1"])
    task = scripted_task()
    team = build_team(Run.of(config, "madpo_iter"), 2)
    fmt = JointFormat(prompt=lambda item: f"{item} both", split=lambda item, text: [text[:3], text[3:]])
    task.joint_format = fmt   # what the task gives its comparators
    comparator = build_comparator(Run.of(config, "madpo_iter"), task, team)
    assert comparator.generators == [team[1].generator] and comparator.joint_format is fmt
    [[cand]] = comparator.sample(["item 0:"], 1)
    assert len(cand.texts) == 2 and cand.ids == [None, None]
    config = madpo_config(tmp_path, "y", "madpo_iter", ["madpo_iter.comparator_generation_mode=centralized",
                                                        "madpo_iter.comparator_centralized_agent_index=2"])
    with pytest.raises(Exception, match="comparator_centralized_agent_index=2"):
        build_comparator(Run.of(config, "madpo_iter"), task, team)


def test_comparator_agents_load_one_model_per_role_on_comparator_devices(tmp_path):
    from cooprl.trainers.team import build_team
    config = madpo_config(tmp_path, "x", "madpo_iter", [
        "madpo_iter.comparator_policy=model", f"madpo_iter.comparator_agents=[{TINY_RANDOM}, {TINY_RANDOM}]",
        "madpo_iter.comparator_devices=cpu"])
    team = build_team(Run.of(config, "madpo_iter"), 2)
    comparator = build_comparator(Run.of(config, "madpo_iter"), scripted_task(), team)
    assert len(comparator.generators) == 2 and comparator.generators[0] is comparator.generators[1]   # loaded once
    assert str(comparator.generators[0].model.device) == "cpu"
    bad = madpo_config(tmp_path, "y", "madpo_iter", ["madpo_iter.comparator_policy=model",
                                                     f"madpo_iter.comparator_agents=[{TINY_RANDOM}]"])
    with pytest.raises(Exception, match="comparator_agents: 1 model names given for 2"):
        build_comparator(Run.of(bad, "madpo_iter"), scripted_task(), team)


def test_generic_api_splits_requests_by_max_n_and_sends_upstreams_payload():
    sent = []

    def post(url, payload, headers):
        sent.append((url, payload, headers))
        return {"completions": [f"c{len(sent)}-{i}" for i in range(payload["n"])]}

    complete = generic_api_completer("http://x/gen", "m", "key", 32, 2, SamplingParams(temperature=0.5, top_p=0.9),
                                     post=post)
    assert complete("prompt", 5) == ["c1-0", "c1-1", "c2-0", "c2-1", "c3-0"]
    assert [p["n"] for _, p, _ in sent] == [2, 2, 1]
    url, payload, headers = sent[0]
    assert url == "http://x/gen" and headers == {"Authorization": "Bearer key"}
    assert payload == {"prompt": "prompt", "n": 2, "max_tokens": 32, "temperature": 0.5, "top_p": 0.9, "model": "m"}


def test_api_comparator_keys_build_the_client(tmp_path, monkeypatch):
    from cooprl.trainers.team import build_team
    seen = {}

    def factory(model, max_tokens, base_url=None, api_key=None):
        seen.update(model=model, base_url=base_url, api_key=api_key)
        return lambda messages: "answer"

    monkeypatch.setenv("MY_KEY", "secret")
    config = madpo_config(tmp_path, "x", "madpo_iter", [
        "madpo_iter.comparator_policy=api", "madpo_iter.comparator_api_format=openai",
        "madpo_iter.comparator_api_url=http://h/v1", "madpo_iter.comparator_api_model=gpt-x",
        "madpo_iter.comparator_api_key_env=MY_KEY"])
    team = build_team(Run.of(config, "madpo_iter"), 2)
    comparator = build_comparator(Run.of(config, "madpo_iter"), with_api(scripted_task(), factory), team)
    assert seen == {"model": "gpt-x", "base_url": "http://h/v1", "api_key": "secret"}
    assert comparator.sample(["item 0:"], 1)[0][0].texts == ["answer", "answer"]
    monkeypatch.delenv("MY_KEY")
    with pytest.raises(Exception, match="MY_KEY"):
        build_comparator(Run.of(config, "madpo_iter"), with_api(scripted_task(), factory), team)
    generic = madpo_config(tmp_path, "y", "madpo_iter", [
        "madpo_iter.comparator_policy=api", "madpo_iter.comparator_api_url=http://h/gen",
        "madpo_iter.comparator_model=m"])
    comparator = build_comparator(Run.of(generic, "madpo_iter"), with_api(scripted_task(), factory), team)
    assert comparator.max_candidates is None and type(comparator.generators[0]).__name__ == "_CompletionApiGenerator"


# ---------------------------------------------------------------------------------------------- MARLHF
def test_reward_train_batch_size_and_freeze_backbone(tmp_path):
    from cooprl.trainers.marlhf import build_reward_model
    pairs = [PreferencePair(f"i{k}", ["p"], [f"good {k}"], [f"bad {k}"], 1.0, 0.0) for k in range(6)]
    config = marlhf_config(tmp_path, "r", "marlhf", ["marlhf.reward_train_batch_size=2",
                                                      "marlhf.reward_freeze_backbone=true"])
    rm = build_reward_model(Run.of(config, "marlhf"))
    trunk_before = [p.detach().clone() for p in rm.model.lm.parameters()]
    head_before = [p.detach().clone() for p in rm.model.head_parameters()]
    metrics = train_reward_model(rm, pairs, RewardTraining(learning_rate=1e-2, epochs=1, eval_fraction=0.0, seed=0,
                                                           batch_size=2))
    assert metrics["reward_model/optimizer_steps"] == 3                      # 6 pairs, 2 per step
    assert all(torch.equal(a, b) for a, b in zip(trunk_before, rm.model.lm.parameters()))   # frozen backbone
    assert any(not torch.equal(a, b) for a, b in zip(head_before, rm.model.head_parameters()))


def test_preference_scoring_reward_scores_later_iterations_with_the_reward_model(tmp_path):
    algorithm = run_marlhf(tmp_path, "s", ["marlhf_iter.max_steps=1", "marlhf_iter.num_iterations=2",
                                           "marlhf_iter.preference_scoring_reward=reward_model",
                                           "marlhf_iter.pair_selection=all"], "marlhf_iter")
    assert algorithm.scoring_task(0) is algorithm.task                       # no trained model yet: the task reward
    learned = algorithm.scoring_task(1)
    assert learned.score.raw is algorithm.learned and learned.name.endswith("+reward_model")   # under SafeScore
    from cooprl.preferences.pairs import read_pairs
    task_rewards = {r for p in read_pairs(tmp_path / "s" / "preferences" / "iteration_0.jsonl")
                    for r in (p.chosen_reward, p.rejected_reward)}
    later = [r for p in read_pairs(tmp_path / "s" / "preferences" / "iteration_1.jsonl")
             for r in (p.chosen_reward, p.rejected_reward)]
    assert all(r in {k / 8 for k in range(9)} or r == pytest.approx(r) for r in task_rewards)
    assert later and not all(8 * r == int(8 * r) for r in later)             # learned scores, not multiples of 1/8


def test_history_comparator_plays_the_policies_of_comparator_history_k_iterations_ago(tmp_path):
    from cooprl.trainers.team import build_team
    from cooprl.preferences.comparators import HistoryComparator
    config = madpo_config(tmp_path, "h", "madpo_iter", ["madpo_iter.comparator_policy=history",
                                                        "madpo_iter.comparator_history_k=2"])
    team = build_team(Run.of(config, "madpo_iter"), 2)
    comparator = build_comparator(Run.of(config, "madpo_iter"), scripted_task(), team)
    assert isinstance(comparator, HistoryComparator) and comparator.history_k == 2
    weight = lambda model: next(p for p in model.parameters()).detach().clone()
    starts = []
    for iteration in range(4):
        played = comparator.start_iteration(iteration)
        starts.append(weight(team[0].model))
        assert played == max(iteration - 1, 0)                         # upstream: checkpoint of iteration i - k
        assert torch.equal(weight(comparator.copies[0]), starts[played])
        with torch.no_grad():                                           # "training" during the iteration
            next(team[0].model.parameters()).add_(1.0)
    assert not any(p.requires_grad for p in comparator.copies[0].parameters())


def test_madpo_iter_runs_with_a_history_comparator(tmp_path):
    algorithm, _ = run_madpo(tmp_path, "hr", ["madpo_iter.max_steps=1", "madpo_iter.num_iterations=2",
                                              "madpo_iter.comparator_policy=history"], "madpo_iter")
    # k = 1: iteration 1 plays its own start; iteration 0's snapshot no iteration plays again is dropped
    assert sorted(algorithm.comparator.snapshots) == [1] and algorithm.comparator.loaded == 1
    assert all(
        e["dpo/comparator_reward_mean"] >= 0 for e in train_events(tmp_path / "hr") if "dpo/comparator_reward_mean" in e
    )
