"""MADPO / MADPO_ITER: the multi-agent DPO loss, training runs on the scripted task, resume, comparators, CLI smoke
runs."""

import math
from pathlib import Path

import pytest
import torch

from cooprl.checkpoint import list_checkpoints
from cooprl.config import ConfigError, Run, load_config
from cooprl.models.loading import TINY_RANDOM
from cooprl.preferences.pairs import PairStore, PreferencePair, read_pairs
from cooprl.trainers.loop import seed_everything, train_loop
from cooprl.trainers.madpo import build_madpo, madpo_losses
from tests.scripted import scripted_task
from tests.cli.test_cli_smoke import SMALL, events, run

pytestmark = pytest.mark.slow   # end to end (trainers, command lines, subprocesses): not in `make test-fast`


def test_madpo_loss_on_hand_computed_margins_and_gradients_reach_only_own_agent():
    # two agents, two pairs: Δ[agent, pair]
    d0 = torch.tensor([1.0, -2.0], requires_grad=True)
    d1 = torch.tensor([0.5, 3.0], requires_grad=True)
    beta = 0.5
    losses = madpo_losses(torch.stack([d0, d1]), beta)
    joint = [1.5, 1.0]                             # Δ0 + Δ1 per pair
    expected = -sum(math.log(1 / (1 + math.exp(-beta * j))) for j in joint) / 2
    assert losses[0].item() == pytest.approx(expected) and losses[1].item() == pytest.approx(expected)
    losses[0].backward(retain_graph=True)          # agent 0's loss: gradient only on agent 0's margins
    assert d1.grad is None or torch.all(d1.grad == 0)
    # d/dΔ0 of -log σ(β j) / P = -β (1 - σ(β j)) / P
    grad = [-beta * (1 - 1 / (1 + math.exp(-beta * j))) / 2 for j in joint]
    assert d0.grad.tolist() == pytest.approx(grad)
    d0.grad = None
    losses[1].backward()
    assert d0.grad is None or torch.all(d0.grad == 0)
    assert d1.grad.tolist() == pytest.approx(grad)


def test_madpo_loss_weights_and_single_policy():
    d = torch.tensor([[2.0, -1.0]])
    loss = madpo_losses(d, 1.0, torch.tensor([1.0, 0.25]))
    sp = lambda x: math.log(1 + math.exp(-x))      # -log σ(x)
    assert loss.item() == pytest.approx((sp(2.0) + 0.25 * sp(-1.0)) / 1.25)


def test_margins_score_texts_like_their_ids_and_accept_empty_answers(tmp_path):
    config = madpo_config(tmp_path, "x", "madpo", ["madpo.reference_model=true"])
    algorithm = build_madpo(Run.of(config, "madpo"), scripted_task())
    tokenizer = algorithm.team[0].tokenizer
    ids = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]
    texts = PreferencePair("i", ["p0", "p1"], ["abc", "def g"], ["", "xyz"], 1.0, 0.0)
    with_ids = PreferencePair("i", ["p0", "p1"], ["abc", "def g"], ["", "xyz"], 1.0, 0.0,
                              chosen_ids=[ids("abc"), ids("def g")], rejected_ids=[[tokenizer.eos_token_id],
                                                                                   ids("xyz")])
    for agent in (0, 1):
        with torch.no_grad():
            a, b = algorithm.margins_and_kl(agent, [texts])[0], algorithm.margins_and_kl(agent, [with_ids, texts])[0]
        assert torch.allclose(a, b[:1], atol=1e-5) and torch.allclose(b[0], b[1], atol=1e-5)
        assert a.abs().item() < 1e-5       # the policy is still its reference: Δ - Δ_ref = 0


def test_a_losers_own_prompts_score_its_completions(tmp_path):
    # a sequential team's pair: the loser's follower answered another prompt than the winner's, and its margin says so
    from cooprl.models.logprobs import completion_logprobs
    algorithm = build_madpo(Run.of(madpo_config(tmp_path, "x", "madpo", []), "madpo"), scripted_task())
    pair = PreferencePair("i", ["p0", "p1 after abc"], ["abc", "def"], ["uvw", "xyz"], 1.0, 0.0,
                          rejected_prompts=["p0", "p1 after uvw"])
    agent = algorithm.team[1]

    def logp(prompt: str, text: str) -> float:
        encoded = agent.generator.encode_prompts([prompt])
        completion = torch.tensor(agent.tokenizer(text, add_special_tokens=False)["input_ids"])
        with torch.no_grad():
            values, _ = completion_logprobs(agent.model, encoded, [completion], agent.tokenizer.pad_token_id)
        return values.sum().item()

    with torch.no_grad():
        margin = algorithm.margins_and_kl(1, [pair])[0].item()
    assert margin == pytest.approx(logp("p1 after abc", "def") - logp("p1 after uvw", "xyz"), abs=1e-4)
    assert margin != pytest.approx(logp("p1 after abc", "def") - logp("p1 after abc", "xyz"), abs=1e-4)


def madpo_config(tmp_path: Path, name: str, trainer: str, overrides: list[str]):
    return load_config(None, [
        f"agent_model.name={TINY_RANDOM}", "agent_model.device=cpu", "agent_model.temperature=1.0",
        "agent_model.top_p=1.0", f"{trainer}.max_new_tokens=6", f"{trainer}.preference_num_candidates=3",
        f"{trainer}.learning_rate=1e-2", f"{trainer}.eval_interval=0", f"{trainer}.eval_num_samples=1",
        # these tests sample new pairs every step (the offline default: test_upstream_semantics.py)
        f"{trainer}.pair_collection=online",
        "wandb.mode=disabled", f"output.base_dir={tmp_path}", f"output.run_name={name}", *overrides])


def run_madpo(tmp_path: Path, name: str, overrides: list[str], trainer: str = "madpo", task=None):
    config = madpo_config(tmp_path, name, trainer, overrides)
    seed_everything(config.seed)
    task = task or scripted_task()
    algorithm = build_madpo(Run.of(config, trainer), task)
    summary = train_loop(Run.of(config, trainer), task, algorithm, tmp_path / name)
    return algorithm, summary


def train_events(run_dir: Path):
    return [e for e in events(run_dir) if "turn_1/reward_mean" in e]


def test_madpo_trains_logs_and_writes_pairs(tmp_path):
    algorithm, _ = run_madpo(tmp_path, "m", ["madpo.max_steps=3", "madpo.pair_selection=all"])
    logged = train_events(tmp_path / "m")
    assert [e["step"] for e in logged] == [1, 2, 3]
    for key in ("dpo/loss", "agent_1/reward_accuracy", "dpo/pairs", "dpo/reward_gap", "dpo/joint_accuracy"):
        assert any(key in e for e in logged), key
    pairs = read_pairs(tmp_path / "m" / "preferences" / "iteration_0.jsonl")
    assert [p.step for p in pairs] == sorted(p.step for p in pairs) and len(pairs) == sum(
        e["dpo/new_pairs"] for e in logged
    )
    assert all(p.chosen_reward > p.rejected_reward and p.source == "policy" and len(p.chosen) == 2 for p in pairs)
    assert all(p.chosen_ids[0] is not None for p in pairs)  # policy samples keep their token ids


def test_madpo_resume_matches_uninterrupted_run_and_reuses_pairs(tmp_path):
    common = ["madpo_iter.max_steps=2", "madpo_iter.num_iterations=2", "madpo_iter.preference_replay_mode=all_history",
              "madpo_iter.pair_selection=random", "madpo_iter.reference_model=true"]
    straight, _ = run_madpo(tmp_path, "straight", common, "madpo_iter")
    run_madpo(tmp_path, "resumed", common + ["madpo_iter.num_iterations=1"], "madpo_iter")
    first_iteration = read_pairs(tmp_path / "resumed" / "preferences" / "iteration_0.jsonl")
    resumed, _ = run_madpo(tmp_path, "resumed", common + ["checkpoint.resume_from_checkpoint=latest"], "madpo_iter")
    a, b = train_events(tmp_path / "straight"), train_events(tmp_path / "resumed")
    assert [e["step"] for e in b] == [1, 2, 3, 4] and [e["dpo/iteration"] for e in b] == [0, 0, 1, 1]
    for key in ("turn_1/reward_mean", "dpo/loss", "agent_0/margin_mean", "agent_1/margin_mean", "dpo/pairs",
                "env_step"):
        assert [e.get(key) for e in a] == [e.get(key) for e in b], key
    # all_history: iteration 1 also trains on iteration 0's pairs of the same items
    assert sum(e["dpo/pairs"] for e in b[2:]) > sum(e["dpo/new_pairs"] for e in b[2:])
    # the first iteration's file was read back, not regenerated; both runs' pair files agree
    assert read_pairs(tmp_path / "resumed" / "preferences" / "iteration_0.jsonl") == first_iteration
    assert (
        PairStore(tmp_path / "straight" / "preferences").load()
        == PairStore(tmp_path / "resumed" / "preferences").load()
    )
    for m1, m2 in zip(straight.models, resumed.models):
        for p1, p2 in zip(m1.parameters(), m2.parameters()):
            assert torch.equal(p1, p2)


def test_copy_comparator_writes_half_the_candidates(tmp_path):
    # the shared budget (ours; upstream's `separate` is test_upstream_preference.py's); env_step = answers sampled
    run_madpo(tmp_path, "c", ["madpo_iter.max_steps=2", "madpo_iter.num_iterations=1",
                              "madpo_iter.comparator_policy=copy",
                              "madpo_iter.preference_num_candidates=4", "madpo_iter.pair_selection=all",
                              "madpo_iter.comparator_candidate_budget=shared", "madpo_iter.use_environment_step=false"],
              "madpo_iter")
    logged = train_events(tmp_path / "c")
    assert all(e["env_step"] in (4, 8) for e in logged) and all(e["turn_1/nodes"] == 1 for e in logged)
    assert all("dpo/comparator_reward_mean" in e for e in logged)
    sources = {p.source for p in read_pairs(tmp_path / "c" / "preferences" / "iteration_0.jsonl")}
    assert sources <= {"policy", "comparator", "policy>comparator", "comparator>policy"}


def test_model_comparator_texts_are_tokenized_for_the_update(tmp_path):
    algorithm, _ = run_madpo(tmp_path, "model", [
        "madpo_iter.max_steps=2", "madpo_iter.num_iterations=1", "madpo_iter.comparator_policy=model",
        f"madpo_iter.comparator_model={TINY_RANDOM}", "madpo_iter.preference_num_candidates=4",
        "madpo_iter.pair_selection=all"], "madpo_iter")
    assert algorithm.comparator.generators[0] is algorithm.comparator.generators[1]   # one model plays both roles
    pairs = read_pairs(tmp_path / "model" / "preferences" / "iteration_0.jsonl")
    with_comparator = [p for p in pairs if "comparator" in p.source]
    assert with_comparator and all(None in (p.chosen_ids + p.rejected_ids) for p in with_comparator)
    assert all(e["dpo/pairs"] == e["dpo/new_pairs"] for e in train_events(tmp_path / "model"))


def test_lora_reference_and_copy_comparator_use_the_adapter_off_model(tmp_path):
    algorithm, _ = run_madpo(tmp_path, "lora", [
        "madpo_iter.max_steps=2", "madpo_iter.num_iterations=1", "madpo_iter.comparator_policy=copy",
        "madpo_iter.reference_model=true", "agent_model.lora={r: 4, alpha: 8, dropout: 0.0}"], "madpo_iter")
    assert type(algorithm.comparator.generators[0]).__name__ == "_AdapterOffGenerator"
    assert type(algorithm.references[0]).__name__ == "_AdapterOffView"
    logged = train_events(tmp_path / "lora")
    assert len(logged) == 2 and all(math.isfinite(e.get("dpo/loss", 0.0)) for e in logged)


def test_comparator_config_errors(tmp_path):
    task = scripted_task()
    for overrides, message in [(["madpo_iter.comparator_policy=model"], "comparator_model"),
                               # current + centralized: the live policy writes joint answers; this task has no format
                               (["madpo_iter.comparator_generation_mode=centralized"], "no joint answer format"),
                               (["madpo_iter.comparator_policy=copy",
                                 "madpo_iter.comparator_generation_mode=centralized"],
                                "no joint answer format"),
                               (["madpo_iter.comparator_policy=api", "madpo_iter.comparator_model=x"], "API client")]:
        with pytest.raises(ConfigError, match=message):
            build_madpo(Run.of(madpo_config(tmp_path, "e", "madpo_iter", overrides), "madpo_iter"), task)


def test_an_api_comparator_without_its_url_names_the_keys_and_variables_that_give_one(monkeypatch):
    # it said "needs an OpenAI-compatible API: expert_edits needs an API URL", though no expert_edits was asked for
    from types import SimpleNamespace

    from cooprl.preferences.comparators import build_comparator
    from cooprl.rollout.generation import SamplingParams
    from envs.code_generation.comparator import api_client
    for var in ("COOPRL_EXPERT_BASE_URL", "OPENAI_BASE_URL", "COOPRL_EXPERT_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    task = SimpleNamespace(name="code", num_agents=2, stop_strings=((), ()), joint_format=None, api_client=api_client)
    team = [SimpleNamespace(params=SamplingParams(max_new_tokens=8))] * 2
    run = Run.of(load_config(None, ["madpo_iter.comparator_policy=api", "madpo_iter.comparator_model=coder"]),
                 "madpo_iter")
    with pytest.raises(ConfigError) as err:
        build_comparator(run, task, team)
    assert str(err.value) == ("madpo_iter.comparator_policy=api: the comparator model 'coder' (an OpenAI-compatible "
                              "chat API) has no API URL: set COOPRL_EXPERT_BASE_URL (or OPENAI_BASE_URL), or give "
                              "madpo_iter.comparator_api_url and madpo_iter.comparator_api_key_env (the variable "
                              "holding its key)")


def cli_overrides(trainer, tmp_path, name):
    return [f"{trainer}.max_steps=2", f"{trainer}.preference_num_candidates=2", f"{trainer}.max_new_tokens=8",
            f"{trainer}.eval_num_samples=1", f"{trainer}.eval_interval=1", f"output.base_dir={tmp_path}",
            f"output.run_name={name}", "checkpoint.checkpoint_interval=1"]


def test_train_madpo_cli_two_steps(tmp_path):
    result = run(["train_madpo.py", "--config", "configs/madpo_che_config.yaml", "--override", *SMALL,
                  *cli_overrides("madpo", tmp_path, "d")], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = tmp_path / "d"
    assert [e["step"] for e in train_events(run_dir)] == [1, 2]
    assert any("eval/turn_1/pass@1" in e for e in events(run_dir))
    assert (run_dir / "preferences" / "iteration_0.jsonl").is_file() and "Summary of" in result.stdout


def test_train_madpo_iter_cli_one_iteration_with_a_centralized_copy_comparator(tmp_path):
    result = run(
        [
            "train_madpo_iter.py",
            "--config",
            "configs/madpo_iter_che_config.yaml",
            "--override",
            *SMALL,
            *cli_overrides("madpo_iter", tmp_path, "i"),
            "madpo_iter.num_iterations=1",
            "madpo_iter.comparator_policy=copy",
            "madpo_iter.comparator_generation_mode=centralized",
            "madpo_iter.comparator_centralized_max_new_tokens=12",
            "madpo_iter.centralized_answer=bounded",
        ],
        tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    logged = train_events(tmp_path / "i")
    assert [e["step"] for e in logged] == [1, 2] and all("dpo/comparator_reward_mean" in e for e in logged)


def test_train_madpo_cli_centralized_collaboration(tmp_path):
    result = run(["train_madpo.py", "--config", "configs/madpo_che_config.yaml", "--override", *SMALL,
                  *cli_overrides("madpo", tmp_path, "z"), "madpo.collaboration_mode=centralized"], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    logged = train_events(tmp_path / "z")
    assert len(logged) == 2 and "turn_1/parse_fallback" in logged[0] and "agent_1/margin_mean" not in logged[-1]
    pairs = read_pairs(tmp_path / "z" / "preferences" / "iteration_0.jsonl")
    assert all(len(p.prompts) == 1 and "<auxiliary>" in p.prompts[0] for p in pairs)


def test_api_comparator_without_environment_fails_at_start(tmp_path):
    result = run(["train_madpo_iter.py", "--config", "configs/madpo_iter_che_config.yaml", "--override", *SMALL,
                  *cli_overrides("madpo_iter", tmp_path, "a"), "madpo_iter.comparator_policy=api",
                  "madpo_iter.comparator_model=deepseek-coder"], tmp_path)
    assert (
        result.returncode == 2
        and "comparator_policy=api" in result.stderr
        and "COOPRL_EXPERT_BASE_URL" in result.stderr
    )


def test_code_joint_format_splits_a_joint_answer_into_agent_texts():
    from envs.code_generation.comparator import code_joint_format
    from envs.code_generation.data import Problem
    from envs.code_generation.prompts import completion_to_code

    class Section:
        centralized_prompt, centralized_answer = "native", "bounded"

    problem = Problem("t/0", "def f(x):\n    \"\"\"Double x.\"\"\"\n", "def check(candidate):\n    assert candidate(1) "
                                                                       "== 2\n", "f")
    fmt = code_joint_format(Section)
    assert fmt.prompt(problem).endswith("<auxiliary>") and fmt.stop_strings == ("</main>",)
    aux, main = fmt.split(problem, "\ndef aux(x):\n    return 2 * x\n</auxiliary>\n<main>\ndef f(x):\n    return "
                                   "aux(x)\n</main>")
    assert aux == "x):\n    return 2 * x"
    assert completion_to_code("aux", problem, aux) == "def aux(x):\n    return 2 * x"
    assert "return aux(x)" in completion_to_code("main", problem, main)


def test_a_shared_policy_takes_one_dpo_step_for_every_agent(tmp_path):
    config = madpo_config(tmp_path, "shared", "madpo", ["madpo.max_steps=2", "madpo.pair_selection=all",
                                                        "agent_model.shared_policy=true"])
    seed_everything(config.seed)
    task = scripted_task()
    algorithm = build_madpo(Run.of(config, "madpo"), task)
    [model], [optimizer] = algorithm.models, algorithm.optimizers
    assert all(agent.model is model for agent in algorithm.team)
    steps = []
    step = optimizer.step
    optimizer.step = lambda *args, **kwargs: (steps.append(1), step(*args, **kwargs))[1]
    train_loop(Run.of(config, "madpo"), task, algorithm, tmp_path / "shared")
    logged = train_events(tmp_path / "shared")
    assert len(steps) == sum(e["dpo/optimizer_steps"] for e in logged) > 0   # once per update, not once per agent
    updated = [e for e in logged if "agent_0/grad_norm" in e]
    assert updated and all(e["agent_0/grad_norm"] == e["agent_1/grad_norm"] for e in updated)
    assert all("agent_1/reward_accuracy" in e for e in updated)
    checkpoint = list_checkpoints(tmp_path / "shared" / "checkpoints")[-1]
    assert sorted(p.name for p in checkpoint.glob("agent_*")) == ["agent_0"]
    assert (checkpoint / "shared_policy.json").is_file()
