"""The agents' model names (cooprl/trainers/team.py): heterogeneous agents from the `agents` key."""

import pytest

from cooprl.config import ConfigError, load_config


def test_heterogeneous_agent_names():
    from cooprl.trainers.team import agent_model_names
    config = load_config(None, ["agents=[offline:tiny-random, some/hub-model]"])
    assert agent_model_names(config, 2) == ["offline:tiny-random", "some/hub-model"]
    assert agent_model_names(load_config(None, []), 2) == ["offline:smollm2-135m-instruct"] * 2
    with pytest.raises(ConfigError, match="agents: 2 model names given for 1 agents"):
        agent_model_names(config, 1)


@pytest.mark.parametrize(("trainer", "agents", "overrides", "message"), [
    ("iac", 2, [], "iac does not train a shared policy .* its actors step one after the other"),
    ("sft", 2, [], "sft does not train a shared policy"),
    ("grpo", 1, [], "grpo does not train a shared policy .* it trains one agent"),
    ("magrpo", 1, [], "this magrpo run has one agent .* no other role"),
    ("magrpo", 2, ["agent_model.share_base=true", "agent_model.lora={r: 4, alpha: 8}"], "choose one"),
    ("magrpo", 2, ["agents=[offline:tiny-random, offline:smollm2-135m-instruct]"], "names different models"),
    ("magrpo", 2, ["magrpo.parallel_training=mp"], "parallel_training: mp: mp runs each agent's calls"),
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
