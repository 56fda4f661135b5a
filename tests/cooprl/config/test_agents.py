"""Each agent's own settings (cooprl/config/agents.py): an `agents:` entry that is a mapping overrides the shared
values key by key, a plain string stays a model name, and a bad entry is one error naming its index and key."""

import dataclasses

import pytest

from cooprl.config import (AgentEntry, AgentSettings, ConfigError, TrainerSection, agent_names, agent_settings,
                           load_config)

SHARED = ["agent_model.name=shared/model", "agent_model.temperature=0.6", "agent_model.top_p=0.9",
          "agent_model.top_k=50", "magrpo.learning_rate=2e-5", "magrpo.max_new_tokens=64"]


def settings(*overrides: str, num_agents: int = 2) -> list[AgentSettings]:
    config = load_config(None, [*SHARED, *overrides])
    return agent_settings(config, config.magrpo, num_agents)


def test_each_key_of_a_mapping_overrides_the_shared_value_and_the_rest_fall_back():
    planner, coder = settings("agents=[{name: planner/model, temperature: 1.2, top_p: 0.95, learning_rate: 1e-4}, "
                              "{temperature: 0.2, top_k: 5, max_new_tokens: 16}]")
    assert planner == AgentSettings(name="planner/model", learning_rate=1e-4, temperature=1.2, top_p=0.95, top_k=50,
                                    max_new_tokens=64)
    assert coder == AgentSettings(name="shared/model", learning_rate=2e-5, temperature=0.2, top_p=0.9, top_k=5,
                                  max_new_tokens=16)


def test_without_agents_or_with_plain_names_every_agent_has_the_shared_settings():
    shared = AgentSettings(name="shared/model", learning_rate=2e-5, temperature=0.6, top_p=0.9, top_k=50,
                           max_new_tokens=64)
    assert settings() == [shared, shared]
    assert settings("agents=[a/model, b/model]") == [dataclasses.replace(shared, name="a/model"),
                                                     dataclasses.replace(shared, name="b/model")]
    # the trainer's sampling keys win over agent_model's, an agent's own over both
    hot, own = settings("magrpo.temperature=0.9", "magrpo.top_p=0.5", "agents=[x, {temperature: 0.1}]")
    assert (hot.temperature, hot.top_p, own.temperature, own.top_p) == (0.9, 0.5, 0.1, 0.5)


def test_a_mixed_list_keeps_plain_strings_as_model_names():
    config = load_config(None, [*SHARED, "agents=[a/model, {top_k: 0}, {name: c/model}]"])
    assert config.agents == ["a/model", AgentEntry(top_k=0), AgentEntry(name="c/model")]
    assert agent_names(config, 3) == ["a/model", "shared/model", "c/model"]
    assert [s.top_k for s in agent_settings(config, config.magrpo, 3)] == [50, 0, 50]   # 0: top-k off for that one


def test_an_entry_of_another_trainer_section_takes_that_section_s_values():
    config = load_config(None, [*SHARED, "sft.learning_rate=1e-3", "agents=[{}, {learning_rate: 5e-4}]"])
    assert [s.learning_rate for s in agent_settings(config, config.sft, 2)] == [1e-3, 5e-4]


@pytest.mark.parametrize("entry,message", [
    ("{temprature: 1.0}", r"^agents\[1\]\.temprature: unknown key; did you mean agents\[1\]\.temperature\?$"),
    ("{seed: 3}", r"^agents\[1\]\.seed: unknown key; valid keys here: name, learning_rate, temperature, top_p, "
                  r"top_k, max_new_tokens$"),
    ("{temperature: hot}", r"^agents\[1\]\.temperature: expected float, got 'hot'$"),
    ("{max_new_tokens: 2.5}", r"^agents\[1\]\.max_new_tokens: expected int, got 2\.5$"),
    ("{name: [a, b]}", r"^agents\[1\]\.name: expected str, got \['a', 'b'\]$"),
    ("{top_p: 1.5}", r"^agents\[1\]\.top_p: 1\.5 is out of range; expected a value in \[0\.0, 1\.0\]$"),
    ("{max_new_tokens: 0}", r"^agents\[1\]\.max_new_tokens: 0 is out of range; expected a value in \[1, inf\]$"),
    ("{learning_rate: -1e-5}", r"^agents\[1\]\.learning_rate: -1e-05 is out of range"),
    ("{temperature: -0.5}", r"^agents\[1\]\.temperature: -0\.5 is out of range"),
    ("{top_k: -1}", r"^agents\[1\]\.top_k: -1 is out of range"),
    ("7", r"^agents\[1\]: expected str or a mapping, got 7$"),
])
def test_a_bad_entry_is_one_error_naming_its_index_and_key_at_load(entry, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, [f"agents=[a/model, {entry}]"])


def test_an_entry_s_bounds_are_the_shared_option_s_own():
    shared = {f.name: f.metadata for f in dataclasses.fields(TrainerSection)}
    for f in dataclasses.fields(AgentEntry):
        if f.name != "name":
            assert (f.metadata["min"], f.metadata["max"]) == (shared[f.name]["min"], shared[f.name]["max"]), f.name


def test_a_wrong_count_of_entries_is_an_error_naming_the_key():
    config = load_config(None, ["agents=[{temperature: 1.0}, {temperature: 0.2}, x/model]"])
    with pytest.raises(ConfigError, match=r"^agents: 3 model names given for 2 agents; give one per agent \(a model "
                                          r"name or a mapping of its own settings\), or agents=null"):
        agent_settings(config, config.magrpo, 2)


def test_a_config_file_and_its_printed_config_read_back_the_same_entries(tmp_path):
    path = tmp_path / "team.yaml"
    path.write_text("agents:\n  - planner/model\n  - name: coder/model\n    temperature: 0.2\n", encoding="utf-8")
    config = load_config(path)
    assert config.agents == ["planner/model", AgentEntry(name="coder/model", temperature=0.2)]
    printed = tmp_path / "printed.yaml"
    printed.write_text(config.to_yaml("magrpo"), encoding="utf-8")
    assert load_config(printed).agents == config.agents
    # an override replaces the file's list
    assert load_config(path, ["agents=[{top_p: 0.3}, b]"]).agents == [AgentEntry(top_p=0.3), "b"]
