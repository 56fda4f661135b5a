"""The agents' model names (cooprl/trainers/team.py): heterogeneous agents from the `agents` key."""

import pytest

from cooprl.config import ConfigError, load_config


def test_heterogeneous_agent_names():
    from cooprl.config import agent_names
    config = load_config(None, ["agents=[offline:tiny-random, some/hub-model]"])
    assert agent_names(config, 2) == ["offline:tiny-random", "some/hub-model"]
    assert agent_names(load_config(None, []), 2) == ["offline:smollm2-135m-instruct"] * 2
    with pytest.raises(ConfigError, match="agents: 2 model names given for 1 agents; give one per agent .*, or "
                                          "agents=null for agent_model.name in every agent"):
        agent_names(config, 1)


@pytest.mark.slow
def test_each_agent_samples_and_trains_with_its_own_settings():
    import torch

    from cooprl.config import Run
    from cooprl.rollout.generation import SamplingParams
    from cooprl.trainers.team import build_team
    config = load_config(None, ["agent_model.name=offline:tiny-random", "agent_model.temperature=0.6",
                                "agent_model.top_p=0.9", "agent_model.max_length=64", "magrpo.learning_rate=2e-5",
                                "magrpo.max_new_tokens=12",
                                "agents=[{temperature: 1.5, learning_rate: 1e-3, max_new_tokens: 3}, "
                                "{top_p: 0.5, top_k: 7}]"])
    hot, shared = build_team(Run.of(config, "magrpo"), 2, stop_strings=[("\n\n",), ()])
    assert hot.params == SamplingParams(max_new_tokens=3, temperature=1.5, top_p=0.9, top_k=None,
                                               stop_strings=("\n\n",))
    assert shared.params == SamplingParams(max_new_tokens=12, temperature=0.6, top_p=0.5, top_k=7)
    assert [g["lr"] for g in hot.optimizer.param_groups] == [1e-3]
    assert [g["lr"] for g in shared.optimizer.param_groups] == [2e-5]
    # the prompt budget is what max_length leaves after the agent's own completions
    assert (hot.generator.max_prompt_tokens, shared.generator.max_prompt_tokens) == (61, 52)
    torch.manual_seed(0)
    capped, free = (agent.sample(["def add(a, b):"] * 2, 4) for agent in (hot, shared))
    capped_lengths = [len(c.completion_ids) for group in capped for c in group]
    free_lengths = [len(c.completion_ids) for group in free for c in group]
    assert max(capped_lengths) == 3 and max(free_lengths) > 3 and max(free_lengths) <= 12


@pytest.mark.parametrize(("trainer", "agents", "overrides", "message"), [
    ("iac", 2, [], "iac does not train a shared policy .* its actors step one after the other"),
    ("sft", 2, [], "sft does not train a shared policy"),
    ("grpo", 1, [], "grpo does not train a shared policy .* it trains one agent"),
    ("magrpo", 1, [], "this magrpo run has one agent .* no other role"),
    ("magrpo", 2, ["agent_model.share_base=true", "agent_model.lora={r: 4, alpha: 8}"], "choose one"),
    ("magrpo", 2, ["agents=[offline:tiny-random, offline:smollm2-135m-instruct]"], "names different models"),
    ("magrpo", 2, ["magrpo.parallel_training=mp"], "parallel_training: mp: mp runs each agent's calls"),
    ("magrpo", 2, ["agents=[{learning_rate: 0.1}, {}]"], "different learning_rates"),
    ("magrpo", 2, ["agents=[{max_new_tokens: 3}, {}]"], "different max_new_tokens"),
])
def test_a_shared_policy_refuses_what_it_cannot_train_before_any_model_loads(monkeypatch, trainer, agents, overrides,
                                                                              message):
    from cooprl.config import Run
    from cooprl.trainers import build_algorithm
    from tests.scripted import scripted_task

    def no_model(*args, **kwargs):
        raise AssertionError("a model was loaded")
    monkeypatch.setattr("cooprl.trainers.team.load_causal_lm", no_model)
    config = load_config(None, ["agent_model.shared_policy=true", *overrides])
    with pytest.raises(ConfigError, match=f"agent_model.shared_policy.*{message}"):
        build_algorithm(Run.of(config, trainer), scripted_task(num_agents=agents))
    config = load_config(None, ["agent_model.shared_policy=true", "agents=[offline:tiny-random, offline:tiny-random]"])
    with pytest.raises(AssertionError, match="a model was loaded"):   # one model named twice: built
        build_algorithm(Run.of(config, "magrpo"), scripted_task(num_agents=2))


def test_a_shared_policy_starts_from_one_model_not_a_team_of_separate_ones(tmp_path, monkeypatch):
    from cooprl import checkpoint as ckpt
    from cooprl.config import Run
    from cooprl.trainers import build_algorithm
    from tests.cooprl.test_checkpoint import TinyModel
    from tests.scripted import scripted_task
    monkeypatch.setattr("cooprl.trainers.team.load_causal_lm", lambda *a, **k: pytest.fail("a model was loaded"))
    team = ckpt.save_checkpoint(tmp_path / "team", 1, [TinyModel(), TinyModel()], {})
    config = load_config(None, ["agent_model.shared_policy=true", f"agent_model.init_from={team}"])
    with pytest.raises(ConfigError, match="holds 2 separate agents, and a shared policy starts from one model"):
        build_algorithm(Run.of(config, "magrpo"), scripted_task(num_agents=2))


@pytest.mark.slow
def test_each_role_of_a_shared_policy_samples_with_its_own_settings():
    from cooprl.config import Run
    from cooprl.trainers.team import build_team
    config = load_config(None, ["agent_model.name=offline:tiny-random", "agent_model.shared_policy=true",
                                "agent_model.device=cpu", "agents=[{temperature: 1.5, top_k: 5}, {temperature: 0.2}]"])
    hot, cold = build_team(Run.of(config, "magrpo"), 2, stop_strings=[(), ("\n\n",)])
    assert hot.model is cold.model and hot.optimizer is cold.optimizer   # one model plays both roles
    assert (hot.params.temperature, hot.params.top_k, hot.params.stop_strings) == (1.5, 5, ())
    assert (cold.params.temperature, cold.params.top_k, cold.params.stop_strings) == (0.2, None, ("\n\n",))
