"""Upstream's training semantics (issue 14, section 3): MAGRPO's normalization, cross-mode returns and node-based
update schedule; the reference-model KL term in every trainer; G >= 2; MADPO's offline pairs; comparator_reward
pairing; heterogeneous agents. Tiny models in-process, scripted rewards."""

import copy
import json
import random
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from cooprl.config import ConfigError, Run, load_config
from cooprl.models.loading import TINY_RANDOM, load_causal_lm, load_tokenizer, resolve_model_path
from cooprl.preferences.pairs import Candidate, comparator_pairs, pairs_from_candidates, read_pairs
from cooprl.rollout.tree import RolloutSettings, rollout, sample_returns
from cooprl.samples import TrainSample
from cooprl.samples import NodeGroup
from cooprl.trainers.actor_critic import build_iac
from cooprl.trainers.loop import seed_everything, train_loop
from cooprl.trainers.madpo import build_madpo, madpo_losses
from cooprl.trainers.magrpo import MAGRPO, build_magrpo, node_batches
from cooprl.update.losses import group_advantages as advantages
from tests.scripted import policy_gradient_step
from tests.scripted import scripted_task
from tests.cooprl.rollout.test_tree import fake_sampler, table_task

pytestmark = pytest.mark.slow   # end to end (trainers, command lines, subprocesses): not in `make test-fast`


def tiny(trainer: str, tmp_path: Path, name: str, *overrides: str):
    return load_config(None, [
        f"agent_model.name={TINY_RANDOM}", "agent_model.device=cpu", "agent_model.temperature=1.0",
        "agent_model.top_p=1.0", f"{trainer}.max_new_tokens=6", f"{trainer}.learning_rate=1e-2",
        f"{trainer}.eval_interval=0", f"{trainer}.eval_num_samples=1", "wandb.mode=disabled",
        f"output.base_dir={tmp_path}", f"output.run_name={name}", *overrides])


def train_events(run_dir: Path):
    events = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [e for e in events if "turn_1/reward_mean" in e]


# ---------------------------------------------------------------------------------------------- MAGRPO
def test_normalization_centers_then_scales_so_raw_and_max_advantages_change_sign():
    r = [1.0, 2.0, 3.0, 6.0]
    std = torch.tensor(r).std(unbiased=False).item()
    expected = [(x - 3.0) / std for x in r]
    for mode in ("mean", "raw", "max"):      # raw and max differ from mean by a constant: centering removes it
        assert advantages(r, mode, normalize=True) == pytest.approx(expected, rel=1e-6), mode
    assert min(advantages(r, "max", normalize=True)) < 0 < max(advantages(r, "max", normalize=True))
    assert max(advantages(r, "max")) == 0.0      # unnormalized max: one sign
    assert advantages([2.0, 2.0], "mean", normalize=True) == [0.0, 0.0]   # no spread: std floored, no NaN


def test_cross_mode_sample_return_sums_like_upstream_or_averages():
    task = table_task(2, lambda item, joint: float(joint[0][1]) * 10 + float(joint[1][1]))
    root = rollout(["x"], task, fake_sampler(None), RolloutSettings(num_turns=1, samples_per_turn=[2],
                                                                    joint_mode="cross"))[0]
    assert root.returns == [0.0, 1.0, 10.0, 11.0]
    assert sample_returns(root, 0, "sum") == [1.0, 21.0] and sample_returns(root, 0, "mean") == [0.5, 10.5]
    assert sample_returns(root, 1, "sum") == [10.0, 12.0]


def test_node_batches_go_turn_by_turn_in_chunks_of_train_batch_size():
    groups = [NodeGroup(turn, [TrainSample(torch.tensor([k]), torch.tensor([1]), 1.0)])
              for k, turn in enumerate([0, 1, 1, 1, 0])]
    torch.manual_seed(0)
    batches = node_batches(groups, 2)
    assert [[g.turn for g in b] for b in batches] == [[0, 0], [1, 1], [1]]
    assert sorted(g.samples[0].prompt_ids.item() for b in batches[1:] for g in b) == [1, 2, 3]
    torch.manual_seed(0)
    assert [[id(g) for g in b] for b in node_batches(groups, 2)] == [[id(g) for g in b] for b in batches]


def magrpo(tmp_path, *overrides, task=None):
    config = tiny("magrpo", tmp_path, "m", "magrpo.num_generations=2", "magrpo.num_turns=2",
                  "magrpo.early_termination_threshold=null", *overrides)
    seed_everything(config.seed)
    return build_magrpo(Run.of(config, "magrpo"), task or scripted_task())


def count_steps(algorithm: MAGRPO) -> list[int]:
    """Wrap every agent's optimizer.step to count the steps taken."""
    counts = [0] * len(algorithm.team)
    for a, agent in enumerate(algorithm.team):
        step = agent.optimizer.step

        def counted(*args, a=a, step=step, **kwargs):
            counts[a] += 1
            return step(*args, **kwargs)
        agent.optimizer.step = counted
    return counts


def test_nodes_schedule_counts_nodes_and_steps_per_train_batch_size(tmp_path):
    # G=2, 2 turns, no early termination: 3 nodes per item (1 root + 2 children) per agent
    algorithm = magrpo(tmp_path, "magrpo.update_schedule=nodes", "magrpo.rollout_buffer_size=4",
                       "magrpo.train_batch_size=2")
    counts = count_steps(algorithm)
    first = algorithm.train_step(algorithm.task.train_items[0], 1)
    assert counts == [0, 0] and len(algorithm.buffer[0]) == 3 and "agent_0/loss" not in first
    second = algorithm.train_step(algorithm.task.train_items[1], 2)
    # node 4 fills the buffer: turn 1 holds 2 roots (1 step of 2 nodes), turn 2 holds 2 children (1 step)
    assert counts == [2, 2] and second["agent_0/optimizer_steps"] == 2.0
    assert len(algorithm.buffer[0]) == 2 and [g.turn for g in algorithm.buffer[0]] == [1, 1]
    assert second["agent_0/trained_samples"] <= 8


def test_items_schedule_takes_one_step_per_item(tmp_path):
    algorithm = magrpo(tmp_path, "magrpo.update_schedule=items", "magrpo.rollout_buffer_size=1")
    counts = count_steps(algorithm)
    metrics = algorithm.train_step(algorithm.task.train_items[0], 1)
    assert counts == [1, 1] and metrics["agent_0/optimizer_steps"] == 1.0 and algorithm.buffer == [[], []]


def test_one_generation_is_an_error_naming_the_key(tmp_path):
    config = tiny("grpo", tmp_path, "g", "grpo.num_generations=1")
    with pytest.raises(ConfigError, match=r"grpo\.num_generations=1: .*nothing trains"):
        build_magrpo(Run.of(config, "grpo"), scripted_task(num_agents=1))
    build_magrpo(Run.of(tiny("grpo", tmp_path, "g", "grpo.num_generations=1", "grpo.advantage_mode=raw"), "grpo"),
                 scripted_task(num_agents=1))   # raw advantages need no group


# ---------------------------------------------------------------------------------------------- reference KL
@pytest.fixture(scope="module")
def tiny_pair():
    """(policy moved away from its start, the start model as reference, tokenizer)."""
    reference = load_causal_lm(TINY_RANDOM, device="cpu")
    policy = copy.deepcopy(reference)
    with torch.no_grad():
        policy.lm_head.weight.add_(0.05 * torch.randn_like(policy.lm_head.weight))
    return policy, reference, load_tokenizer(TINY_RANDOM)


def test_kl_term_is_added_to_the_policy_loss(tiny_pair):
    policy, reference, tokenizer = tiny_pair
    samples = [TrainSample(torch.tensor([5, 6, 7]), torch.tensor([8, 9]), 1.0),
               TrainSample(torch.tensor([5, 6, 7]), torch.tensor([10]), -1.0)]
    losses = {}
    for coef in (0.0, 0.5):
        model = copy.deepcopy(policy)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
        losses[coef] = policy_gradient_step(model, optimizer, samples, tokenizer.pad_token_id, kl_coef=coef,
                                            reference=reference)
    kl = losses[0.5]["kl"]
    assert kl > 0
    assert losses[0.5]["loss"] == pytest.approx(losses[0.0]["loss"] + 0.5 * kl, rel=1e-5)


def test_actor_critic_takes_the_kl_term_in_the_loss_form(tmp_path):
    config = tiny(
        "iac",
        tmp_path,
        "iac",
        "iac.reference_kl_coef=0.1",
        "iac.reference_kl_form=loss",
        "iac.num_generations=2",
        "iac.num_turns=1",
        "iac.rollout_buffer_size=2",
        "iac.critic_learning_rate=1e-2",
    )
    seed_everything(0)
    algorithm = build_iac(Run.of(config, "iac"), scripted_task())
    assert algorithm.references is not None and len(algorithm.references) == 2
    first = algorithm.train_step(algorithm.task.train_items[0], 1)
    second = algorithm.train_step(algorithm.task.train_items[1], 2)
    assert first["agent_0/kl"] == pytest.approx(0.0, abs=1e-6)   # the first update: the policy is its reference
    assert second["agent_0/kl"] > 0 and second["agent_1/kl"] > 0


def test_madpo_loss_includes_the_kl_term(tmp_path):
    config = tiny("madpo", tmp_path, "d", "madpo.reference_kl_coef=0.5", "madpo.pair_collection=online")
    algorithm = build_madpo(Run.of(config, "madpo"), scripted_task())
    with torch.no_grad():   # move the policies away from their start models
        for model in algorithm.models:
            model.lm_head.weight.add_(0.05 * torch.randn_like(model.lm_head.weight))
    tokenizer = algorithm.team[0].tokenizer
    ids = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]
    from cooprl.preferences.pairs import PreferencePair
    pairs = [PreferencePair("i", ["p0", "p1"], ["aaaa", "aa"], ["bb", "b"], 1.0, 0.0,
                            chosen_ids=[ids("aaaa"), ids("aa")], rejected_ids=[ids("bb"), ids("b")])]
    with torch.no_grad():
        scored = [algorithm.margins_and_kl(a, pairs) for a in range(2)]
    base = madpo_losses(torch.stack([d for d, _ in scored]), config.madpo.dpo_beta)
    metrics = algorithm.update(pairs, [1.0])
    assert scored[0][1].item() > 0
    assert metrics["dpo/loss"] == pytest.approx(base[0].item() + 0.5 * scored[0][1].item(), rel=1e-4)
    assert metrics["dpo/kl"] == pytest.approx((scored[0][1].item() + scored[1][1].item()) / 2, rel=1e-4)


# ---------------------------------------------------------------------------------------------- preferences
def test_comparator_reward_pairs_policy_candidate_i_with_comparator_candidate_i():
    # policy 0..2 vs comparator 3..5: (0 vs 3) gap 1, comparator won; (1 vs 4) tie; (2 vs 5) gap 2, policy won;
    # equal comparator rewards: the larger gap first
    assert comparator_pairs([0.0, 0.5, 3.0], [1.0, 0.5, 1.0], None, 0.0) == [(2, 5), (3, 0)]
    # best comparator reward first, then the largest gap; pairs_per_sample cuts
    assert comparator_pairs([0.0, 3.0, 0.0], [2.0, 1.0, 1.5], 2, 0.0) == [(3, 0), (5, 2)]
    # an API comparator's one answer is compared with every policy candidate
    assert comparator_pairs([0.0, 2.0], [1.0], None, 0.0) == [(2, 0), (1, 2)]
    assert comparator_pairs([0.0, 2.0], [1.0], None, 1.0) == []            # gaps must exceed min_reward_gap


def test_comparator_reward_without_a_comparator_splits_the_policy_candidates():
    section = load_config(None, []).madpo_iter
    assert section.pair_selection == "comparator_reward"
    candidates = [Candidate([f"t{k}", f"u{k}"], [None, None], reward, "policy")
                  for k, reward in enumerate([0.0, 1.0, 2.0, 0.5])]
    pairs = pairs_from_candidates("i", ["p", "q"], candidates, section, 0, 1, random.Random(0))
    # the first half (t0, t1) plays the comparator for the second half (t2, t3): t2 vs t0, t3 vs t1
    assert [(p.chosen[0], p.rejected[0]) for p in pairs] == [("t1", "t3"), ("t2", "t0")]


def test_preference_defaults_are_upstreams():
    config = load_config(None, [])
    assert (config.madpo_iter.num_iterations, config.madpo_iter.preference_num_candidates,
            config.madpo_iter.preference_pairs_per_sample, config.madpo_iter.replay_lambda) == (4, 20, 4, 0.8)
    assert config.marlhf.reward_max_length == 2048 and config.madpo.pair_collection == "offline"


def madpo_run(tmp_path, name, *overrides, trainer="madpo_iter"):
    config = tiny(trainer, tmp_path, name, f"{trainer}.preference_num_candidates=3",
                  f"{trainer}.pair_selection=reward_gap", *overrides)
    seed_everything(config.seed)
    task = scripted_task(items=3)
    algorithm = build_madpo(Run.of(config, trainer), task)
    train_loop(Run.of(config, trainer), task, algorithm, tmp_path / name)
    return algorithm


def test_offline_pairs_are_collected_once_per_iteration_then_trained_on(tmp_path):
    madpo_run(tmp_path, "offline", "madpo.num_train_epochs=2", trainer="madpo")
    events = train_events(tmp_path / "offline")
    pairs = read_pairs(tmp_path / "offline" / "preferences" / "iteration_0.jsonl")
    assert [e["step"] for e in events] == [1, 2, 3, 4, 5, 6]          # 3 problems x 2 epochs
    assert {p.step for p in pairs} == {1} and len({p.item_id for p in pairs}) >= 2
    # collected once, at step 1, for the 3 problems of the plan
    assert "dpo/collected_pairs" in events[0] and not any("dpo/collected_pairs" in e for e in events[1:])
    assert events[0]["dpo/collected_pairs"] == len(pairs)
    # each problem's pairs are trained on in both epochs
    by_item = {}
    for p in pairs:
        by_item[p.item_id] = by_item.get(p.item_id, 0) + 1
    assert sorted(e["dpo/new_pairs"] for e in events) == sorted(2 * [float(by_item.get(f"item {i}:", 0))
                                                                     for i in range(3)])


def test_offline_resume_matches_uninterrupted_run(tmp_path):
    common = ["madpo_iter.max_steps=2", "madpo_iter.num_iterations=2", "madpo_iter.preference_replay_mode=lambda_decay"]
    straight = madpo_run(tmp_path, "straight", *common)
    madpo_run(tmp_path, "resumed", *common[:-2], "madpo_iter.num_iterations=1", common[-1])
    resumed = madpo_run(tmp_path, "resumed", *common, "checkpoint.resume_from_checkpoint=latest")
    a, b = train_events(tmp_path / "straight"), train_events(tmp_path / "resumed")
    assert [e["dpo/iteration"] for e in b] == [0, 0, 1, 1]
    for key in ("turn_1/reward_mean", "dpo/loss", "dpo/pairs", "dpo/new_pairs", "env_step"):
        assert [e.get(key) for e in a] == [e.get(key) for e in b], key
    for k in (0, 1):
        path = Path("preferences") / f"iteration_{k}.jsonl"
        assert read_pairs(tmp_path / "straight" / path) == read_pairs(tmp_path / "resumed" / path)
    for m1, m2 in zip(straight.models, resumed.models):
        for p1, p2 in zip(m1.parameters(), m2.parameters()):
            assert torch.equal(p1, p2)


# ---------------------------------------------------------------------------------------------- heterogeneous agents
def other_tiny_model(folder: Path) -> str:
    """Save a second, different tiny model (Qwen2 architecture, hidden size 32, 1 layer) with the same tokenizer."""
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(TINY_RANDOM))
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=True)
    torch.manual_seed(1)
    Qwen2ForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.mark.parametrize("trainer", ["magrpo", "iac"])
def test_heterogeneous_agents_train_their_own_models(tmp_path, trainer):
    other = other_tiny_model(tmp_path / "qwen2-tiny")
    overrides = [f"agents=[{TINY_RANDOM}, {other}]", f"{trainer}.max_steps=2", f"{trainer}.num_generations=2",
                 f"{trainer}.num_turns=1", f"{trainer}.rollout_buffer_size=1"]
    if trainer == "iac":
        overrides.append("iac.critic_learning_rate=1e-2")
    config = tiny(trainer, tmp_path, "hetero", *overrides)
    seed_everything(config.seed)
    task = scripted_task()
    algorithm = (build_magrpo if trainer == "magrpo" else build_iac)(Run.of(config, trainer), task)
    kinds = [type(agent.model).__name__ for agent in algorithm.team]
    assert kinds == ["LlamaForCausalLM", "Qwen2ForCausalLM"]
    if trainer == "iac":   # each agent's critic defaults to its own backbone
        assert [type(c.model.lm).__name__ for c in algorithm.critics] == kinds
    start = [copy.deepcopy(agent.model.lm_head.weight) for agent in algorithm.team]
    train_loop(Run.of(config, trainer), task, algorithm, tmp_path / "hetero")
    assert [e["step"] for e in train_events(tmp_path / "hetero")] == [1, 2]
    for agent, before in zip(algorithm.team, start):
        assert not torch.equal(agent.model.lm_head.weight, before)


# ---------------------------------------------------------------------------------------------- shipped configs
@pytest.mark.parametrize("name,trainer,expected", [
    ("magrpo_che", "magrpo", {"num_train_epochs": 8, "discount": 1.0, "rollout_buffer_size": 4, "train_batch_size": 4,
                              "advantage_normalization": True, "update_schedule": "nodes"}),
    ("magrpo_he", "magrpo", {"num_train_epochs": 6, "discount": 1.0, "rollout_buffer_size": 2, "train_batch_size": 2}),
    ("iac_he", "iac", {"learning_rate": 5e-6, "critic_learning_rate": 5e-6, "value_loss_coef": 0.6,
                       "num_train_epochs": 80, "discount": 1.0}),
    ("maac_che", "maac", {"learning_rate": 5e-6, "critic_learning_rate": 5e-6, "value_loss_coef": 0.6,
                          "num_train_epochs": 80}),
    ("madpo_che", "madpo", {"pair_collection": "offline", "preference_num_candidates": 80,
                            "preference_pairs_per_sample": 16, "num_train_epochs": 2}),
    ("madpo_iter_che", "madpo_iter", {"pair_selection": "comparator_reward", "num_iterations": 4,
                                      "preference_replay_mode": "lambda_decay", "preference_num_candidates": 20}),
    ("marlhf_iter_che", "marlhf_iter", {"pair_selection": "comparator_reward", "replay_lambda": 0.8,
                                        "reward_max_length": 2048, "reward_model_epochs": 2}),
])
def test_shipped_reference_configs_carry_upstreams_training_settings(name, trainer, expected):
    section = load_config(Path(__file__).resolve().parents[3] / "configs" / f"{name}_config.yaml").trainer(trainer)
    assert {k: getattr(section, k) for k in expected} == expected
    assert section.weight_decay == 0.01 and section.max_grad_norm is None


# ---------------------------------------------------------------------------------------------- IAC/MAAC buffer
def recording_update(monkeypatch, algorithm):
    """Fake the actor-critic's optimizer steps: return the list that records, per step, (agent, {prompt id: advantage},
    turns of the step's samples)."""
    import cooprl.trainers.actor_critic as ac
    import cooprl.trainers.base as base
    from cooprl.update.engine import StepResult, Term
    taken = []
    agent_of = {id(agent.model): a for a, agent in enumerate(algorithm.team)}
    for a, agent in enumerate(algorithm.team):   # scripted agents: a model to tell them apart, a tokenizer's pad id
        agent.model, agent.optimizer = torch.nn.Linear(1, 1), None
        agent_of[id(agent.model)] = a
        agent.tokenizer = type("T", (), {"pad_token_id": 0})()

    def fake_term(model, samples, *args, **kwargs):   # the policy term of a step: record its samples
        if samples:
            taken.append((agent_of[id(model)], {int(x.prompt_ids[0]): x.advantage for x in samples}))
        return Term([], lambda batch, denominator: (torch.zeros(()), {}))

    def fake_step(optimizers, terms, models=(), **kwargs):   # the engine's step: nothing to train
        return StepResult({term.name: 0.0 for term in terms}, grad_norms=[0.0])
    monkeypatch.setattr(base, "policy_gradient_term", fake_term)   # the actors' step: TeamAlgorithm.policy_step
    monkeypatch.setattr(base, "optimizer_step", fake_step)
    monkeypatch.setattr(ac, "optimizer_step", fake_step)           # the critics'
    return taken


def hand_built_buffer(turns_targets):
    """Return Steps (two agents, two critics valuing 0) with the given (turn, target); step k's prompt id is k."""
    from cooprl.samples import CriticSample, Step
    return [Step([TrainSample(torch.tensor([k]), torch.tensor([1]), 0.0) for _ in range(2)],
                 [CriticSample(torch.tensor([k]), 0.0, target) for _ in range(2)], turn=turn, targets=[target, target])
            for k, (turn, target) in enumerate(turns_targets)]


def test_turns_schedule_normalizes_per_turn_group_and_steps_per_train_batch_size(monkeypatch):
    from tests.cooprl.trainers.test_actor_critic import scripted_actor_critic
    algorithm = scripted_actor_critic("iac", "iac.update_schedule=turns", "iac.rollout_buffer_size=2")
    taken = recording_update(monkeypatch, algorithm)
    # turn 1: targets 1, 3 (values 0): advantages 1, 3 -> normalized -1, 1; turn 2: 0, 0, 6 -> mean 2, std sqrt(8)
    algorithm.buffer = hand_built_buffer([(0, 1.0), (1, 0.0), (0, 3.0), (1, 0.0), (1, 6.0)])
    metrics = algorithm.update()
    s8 = 8 ** 0.5
    expected = {0: -1.0, 2: 1.0, 1: -2 / s8, 3: -2 / s8, 4: 4 / s8}
    # per agent: turn 1's 2 samples in one step, then turn 2's 3 in steps of 2 and 1 (train_batch_size null: 2)
    assert [a for a, _ in taken] == [0, 0, 0, 1, 1, 1] and metrics["update/actor_optimizer_steps"] == 6
    assert [len(adv) for _, adv in taken] == [2, 2, 1, 2, 2, 1]
    assert set(taken[0][1]) == {0, 2} and set(taken[1][1]) | set(taken[2][1]) == {1, 3, 4}   # turn 1 first
    for a in (0, 1):
        got = {k: v for agent, adv in taken if agent == a for k, v in adv.items()}
        assert got == pytest.approx(expected)
    assert algorithm.buffer == []


def test_episodes_schedule_normalizes_over_the_whole_buffer(monkeypatch):
    from tests.cooprl.trainers.test_actor_critic import scripted_actor_critic
    algorithm = scripted_actor_critic("iac", "iac.update_schedule=episodes", "iac.rollout_buffer_size=2")
    taken = recording_update(monkeypatch, algorithm)
    algorithm.buffer = hand_built_buffer([(0, 1.0), (1, 0.0), (0, 3.0), (1, 0.0), (1, 6.0)])
    algorithm.update()
    std = 5.2 ** 0.5   # targets 1, 0, 3, 0, 6: mean 2
    assert [(a, len(adv)) for a, adv in taken] == [(0, 5), (1, 5)]   # one step on the whole buffer, buffer order
    assert taken[0][1] == pytest.approx({0: -1 / std, 1: -2 / std, 2: 1 / std, 3: -2 / std, 4: 4 / std})


@pytest.mark.parametrize("schedule,updates", [("turns", [False, True, False, True]),
                                              ("episodes", [False, False, True, False])])
def test_buffer_fills_at_rollout_buffer_size_turn_samples_or_episodes(monkeypatch, schedule, updates):
    from tests.cooprl.trainers.test_actor_critic import scripted_actor_critic
    # one episode of 2 turns per item: 2 turn samples per agent. rollout_buffer_size 3: turns fills at the second item
    # (4 turn samples, all trained, as upstream drains its whole buffer), episodes at the third (3 episodes)
    algorithm = scripted_actor_critic("iac", f"iac.update_schedule={schedule}", "iac.rollout_buffer_size=3",
                                      "iac.early_termination_threshold=null")
    taken = recording_update(monkeypatch, algorithm)
    seen = []
    for step in range(1, 5):
        before = len(taken)
        algorithm.train_step(f"item {step}:", step)
        seen.append(len(taken) > before)
    assert seen == updates
    assert len(algorithm.buffer) == (0 if schedule == "turns" else 2)
    metrics = algorithm.end_epoch()   # the epoch's end trains what is left
    assert algorithm.buffer == [] and (metrics.get("update/actor_optimizer_steps", 0) > 0) == (schedule == "episodes")


def test_reference_actor_critic_configs_use_the_turns_schedule_and_cpu_ones_ours():
    root = Path(__file__).resolve().parents[3] / "configs"
    for name, trainer in [("iac_che_config", "iac"), ("iac_he_config", "iac"), ("maac_che_config", "maac"),
                          ("maac_he_config", "maac"), ("ac_che_config", "ac"), ("ac_he_config", "ac")]:
        assert load_config(root / f"{name}.yaml").trainer(trainer).update_schedule == "turns", name
    assert load_config(None, []).iac.update_schedule == "turns"
    for name, trainer in [("iac_che_cpu", "iac"), ("maac_che_cpu", "maac")]:
        assert load_config(root / f"{name}.yaml").trainer(trainer).update_schedule == "episodes", name


# ---------------------------------------------------------------------------------------------- reward-form KL
def manual_kl(policy, reference, sample) -> float:
    """The k3 KL of one completion, summed over its tokens, from each model's own log-probs (no shared code path)."""
    ids = torch.cat([sample.prompt_ids, sample.completion_ids]).unsqueeze(0)
    n = len(sample.completion_ids)
    with torch.no_grad():
        logps = [torch.log_softmax(m(input_ids=ids).logits[0, -n - 1:-1].float(), -1)
                 .gather(1, sample.completion_ids.unsqueeze(1)).squeeze(1) for m in (policy, reference)]
    d = logps[1] - logps[0]
    return (torch.exp(d) - d - 1).sum().item()


def moved(models):
    with torch.no_grad():   # move the policies away from their start (reference) models
        for model in models:
            model.lm_head.weight.add_(0.05 * torch.randn_like(model.lm_head.weight))


def test_reward_form_lowers_each_return_by_coef_times_its_kl_without_gradient(tmp_path):
    algorithm = magrpo(tmp_path, "magrpo.reference_kl_coef=0.5", "magrpo.num_turns=1", "magrpo.advantage_mode=raw",
                       "magrpo.advantage_normalization=false")
    assert algorithm.section.reference_kl_form == "reward" and algorithm.kl_in_reward
    moved(algorithm.models)
    root = rollout(["item 0:"], algorithm.task, algorithm.sample_agent, algorithm.rollout_settings())[0]
    groups, kls = algorithm.sibling_groups(root)
    for a, group in enumerate(groups):
        expected_kls = [manual_kl(algorithm.team[a].model, algorithm.references[a], x) for x in group.samples]
        assert kls[a] == pytest.approx(expected_kls, rel=1e-4, abs=1e-6) and min(expected_kls) > 0
        returns = sample_returns(root, a)
        assert [x.advantage for x in group.samples] == pytest.approx(
            [r - 0.5 * kl for r, kl in zip(returns, expected_kls)], rel=1e-4)
    # the update's gradient is that of -sum log pi x A with A a constant: SGD(lr=1) moves the weights by -grad
    agent, group = algorithm.team[0], groups[0]
    start = copy.deepcopy(agent.model)
    loss = -sum(start(input_ids=torch.cat([x.prompt_ids, x.completion_ids]).unsqueeze(0)).logits[0].log_softmax(-1)
                [len(x.prompt_ids) - 1:-1].gather(1, x.completion_ids.unsqueeze(1)).sum() * x.advantage
                for x in group.samples) / len(group.samples)
    loss.backward()
    agent.optimizer = torch.optim.SGD(agent.model.parameters(), lr=1.0)
    result = algorithm.policy_step(0, group.samples, 2)
    assert "kl" not in result    # no KL term in the loss
    for (name, after), before in zip(agent.model.named_parameters(), start.parameters()):
        grad = before.grad if before.grad is not None else torch.zeros_like(before)
        assert torch.allclose(after.detach() - before.detach(), -grad, atol=1e-5), name


def test_reward_form_lowers_the_actor_critic_td_target_by_coef_times_its_kl(tmp_path):
    config = tiny("iac", tmp_path, "iac", "iac.reference_kl_coef=0.5", "iac.num_generations=2", "iac.num_turns=1",
                  "iac.critic_learning_rate=1e-2")
    seed_everything(0)
    algorithm = build_iac(Run.of(config, "iac"), scripted_task())
    assert algorithm.kl_in_reward
    moved(algorithm.models[:2])
    root = rollout(["item 0:"], algorithm.task, algorithm.sample_agent, algorithm.rollout_settings())[0]
    steps = algorithm.episode_steps(root)
    for j, step in enumerate(steps):          # one turn: the TD target is the shaped reward itself
        for a in range(2):
            kl = manual_kl(algorithm.team[a].model, algorithm.references[a], step.actions[a])
            assert step.kls[a] == pytest.approx(kl, rel=1e-4, abs=1e-6) and kl > 0
            assert step.targets[a] == pytest.approx(root.rewards[j] - 0.5 * kl, rel=1e-4)
            assert step.critics[a].target == pytest.approx(step.targets[a])   # IAC: each critic learns its agent's
    metrics = algorithm.train_step("item 1:", 1)
    assert metrics["agent_0/kl"] > 0 and metrics["agent_1/kl"] > 0          # the sampled KL, logged at rollout


def test_maac_critic_learns_the_teams_mean_shaped_target():
    from tests.cooprl.trainers.test_actor_critic import roll_out_one_item, scripted_actor_critic
    algorithm = scripted_actor_critic("maac", "maac.num_turns=1")   # scripted agents: the KLs are given
    algorithm.kl_in_reward = True
    algorithm.section = replace(algorithm.section, reference_kl_coef=0.5)
    algorithm.reward_kls = lambda joint_actions: [[0.2, 0.6] for _ in joint_actions]
    step = algorithm.episode_steps(roll_out_one_item(algorithm))[0]
    assert step.targets == pytest.approx([-0.625 - 0.1, -0.625 - 0.3])
    assert step.critics[0].target == pytest.approx(-0.625 - 0.2)


def test_madpo_keeps_the_loss_form():
    config = load_config(None, [])
    assert (config.magrpo.reference_kl_form, config.iac.reference_kl_form, config.madpo.reference_kl_form) == (
        "reward", "reward", "loss")
    with pytest.raises(ConfigError, match="reference_kl_form"):
        load_config(None, ["madpo.reference_kl_form=reward"])


# ---------------------------------------------------------------------------------------------- env_step
def test_use_environment_step_defaults_to_upstreams_true():
    config = load_config(None, [])
    assert config.madpo.use_environment_step and config.madpo_iter.use_environment_step


# ---------------------------------------------------------------------------------------------- epoch ends
def test_loop_calls_end_epoch_at_each_epochs_end(tmp_path):
    from cooprl.trainers.loop import Algorithm

    class Recorder(Algorithm):
        models: list = []

        def __init__(self):
            self.ends = []
            self.step = 0

        def train_step(self, item, step):
            self.step = step
            return {"turn_1/reward_mean": 0.0}

        def end_epoch(self):
            self.ends.append(self.step)
            return {"flushed": 1.0}

        def evaluate(self, items):
            return {}

        def state_dict(self):
            return {}

        def load_state_dict(self, state):
            pass

    config = tiny("magrpo", tmp_path, "e", "magrpo.num_train_epochs=2", "magrpo.max_steps=5")
    algorithm = Recorder()
    train_loop(Run.of(config, "magrpo"), scripted_task(items=3), algorithm, tmp_path / "e")
    assert algorithm.ends == [3]   # step 5 is the max_steps cut of the second epoch, not its end
    assert [e["step"] for e in train_events(tmp_path / "e") if "flushed" in e] == [3]


def test_magrpo_nodes_left_in_the_buffer_are_trained_at_the_epochs_end(tmp_path):
    # G=2, 2 turns: 3 nodes per item. Buffer 4: item 2's fourth node fills it (2 steps: 2 roots, 2 children); its
    # last 2 children stay; the epoch's end trains them (1 step of 2 nodes), as upstream's flush
    algorithm = magrpo(tmp_path, "magrpo.update_schedule=nodes", "magrpo.rollout_buffer_size=4",
                       "magrpo.train_batch_size=2")
    counts = count_steps(algorithm)
    algorithm.train_step(algorithm.task.train_items[0], 1)
    metrics = algorithm.train_step(algorithm.task.train_items[1], 2)
    assert counts == [2, 2] and len(algorithm.buffer[0]) == 2
    metrics.merge(algorithm.end_epoch())
    assert counts == [3, 3] and algorithm.buffer == [[], []]
    assert metrics["agent_0/optimizer_steps"] == 3.0    # the step's update and the flush, merged
    assert dict(algorithm.end_epoch()) == {}            # nothing left: no step
    assert counts == [3, 3]
