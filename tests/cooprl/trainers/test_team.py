"""The agents' model names (cooprl/trainers/team.py): heterogeneous agents from the `agents` key."""

import pytest

from cooprl.config import ConfigError, load_config


def test_heterogeneous_agent_names():
    from cooprl.trainers.team import agent_model_names
    config = load_config(None, ["agents=[offline:tiny-random, some/hub-model]"])
    assert agent_model_names(config, 2) == ["offline:tiny-random", "some/hub-model"]
    assert agent_model_names(load_config(None, []), 2) == ["offline:smollm2-135m-instruct"] * 2
    with pytest.raises(ConfigError, match="agents: 2 model names given for 1 agents; give one per agent, or "
                                          "agents=null for agent_model.name in every agent"):
        agent_model_names(config, 1)
