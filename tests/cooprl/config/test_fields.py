"""The typed fields: a wrong key or value is a ConfigError naming the key (a did-you-mean, the trainers that have
the key, the type, the choices, the range), and an alias given with our name must agree with it."""

import pytest

from cooprl.config import ConfigError, load_config


@pytest.mark.parametrize(
    "override,message",
    [
        ("magrpo.num_turnz=3", "magrpo.num_turnz: unknown key; did you mean magrpo.num_turns?"),
        (
            "madpo.comparator_policy=copy",
            "madpo.comparator_policy: unknown key; madpo has no comparator_policy, these trainers do: "
            "madpo_iter, marlhf_iter",
        ),
        ("agent_model.temprature=0.5", "agent_model.temprature: unknown key; did you mean agent_model.temperature?"),
        ("magrpo.num_turns=two", "magrpo.num_turns: expected int, got 'two'"),
        ("magrpo.num_turns=1.5", "magrpo.num_turns: expected int, got 1.5"),
        ("magrpo.joint_mode=diagonal", "magrpo.joint_mode: 'diagonal' is not allowed; choose one of: aligned, cross"),
        ("magrpo.top_p=1.5", "magrpo.top_p: 1.5 is out of range"),
        (
            "agent_model.lora={rank: 8}",
            "agent_model.lora.rank: unknown key; valid keys here: r, alpha, dropout, target_modules",
        ),
        ("external.sandbox_slice=some", "external.sandbox_slice: expected an int, null or 'all'"),
        ("grpo.num_agents=2", "grpo.num_agents: 2 is out of range"),
        ("magrpo=3", "magrpo: expected a mapping"),
        ("magrpo.num_turns", "expected KEY.PATH=VALUE"),
    ],
)
def test_config_errors_name_the_key(override, message):
    with pytest.raises(ConfigError) as err:
        load_config(None, [override])
    assert message in str(err.value)


@pytest.mark.slow
def test_an_alias_and_our_name_with_different_values_is_an_error(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("magrpo:\n  agent_learning_rate: 1.0e-5\n  learning_rate: 3.0e-5\n")
    with pytest.raises(ConfigError, match="agent_learning_rate.*learning_rate|learning_rate.*agent_learning_rate"):
        load_config(path, [])
    path.write_text("magrpo:\n  agent_learning_rate: 1.0e-5\n  learning_rate: 1e-5\n")   # the same value: fine
    assert load_config(path, []).magrpo.learning_rate == 1e-5
    with pytest.raises(ConfigError, match="reward_shift"):
        load_config(None, ["grpo.reward_shift=-2", "reward_processor.shift=-3"])
    with pytest.raises(ConfigError, match="give one"):
        load_config(None, ["magrpo.agent_learning_rate=1e-5", "magrpo.learning_rate=2e-5"])
