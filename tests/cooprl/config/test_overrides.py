"""`--override key.path=value`: values parsed as YAML, merged into nested sections, and winning over the file's
value under the key's other name."""

import pytest

from cooprl.config import apply_overrides, load_config, parse_override
from tests.cooprl.config.test_upstream import ROOT, upstream


@pytest.mark.parametrize("text,value", [
    ("a.b=3", 3), ("a.b=2.5", 2.5), ("a.b=1e-5", "1e-5"), ("a.b=true", True), ("a.b=null", None),
    ("a.b=[1, 2]", [1, 2]), ("a.b={r: 8}", {"r": 8}), ("a.b=hello", "hello"), ("a.b='7'", "7")])
def test_parse_override_values_as_yaml(text, value):
    assert parse_override(text) == (["a", "b"], value)


def test_overrides_merge_into_nested_sections():
    merged = apply_overrides({"magrpo": {"num_turns": 2}}, ["magrpo.num_turns=1", "agent_model.lora.r=4"])
    assert merged == {"magrpo": {"num_turns": 1}, "agent_model": {"lora": {"r": 4}}}


@pytest.mark.slow
def test_an_override_wins_over_the_files_value_under_the_other_name():
    config = load_config(upstream("magrpo", "che"), ["magrpo.learning_rate=7e-6", "reward_processor.shift=-2"])
    assert config.magrpo.learning_rate == 7e-6 and config.reward_processor.shift == -2.0
    config = load_config(ROOT / "configs/magrpo_che_config.yaml", ["magrpo.agent_learning_rate=7e-6",
                                                                   "magrpo.reward_shift=-1"])
    assert config.magrpo.learning_rate == 7e-6 and config.reward_processor.shift == -1.0
    assert load_config(None, ["critic_model=null"]).critic_model.name is None   # null = the defaults
