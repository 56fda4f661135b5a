"""The config reference in docs/config.md is generated from the typed config and must match it."""

from pathlib import Path

from cooprl.config_docs import config_reference

ROOT = Path(__file__).resolve().parents[1]


def test_config_reference_is_up_to_date():
    written = (ROOT / "docs" / "config.md").read_text(encoding="utf-8")
    assert written == config_reference(), "docs/config.md is stale: run python -m cooprl.config_docs > docs/config.md"


def test_config_reference_lists_every_trainer_and_its_own_keys():
    text = config_reference()
    for key in ("magrpo.num_generations", "iac.critic_type", "madpo.dpo_beta", "madpo_iter.comparator_policy",
                "marlhf.rl_algorithm", "marlhf_iter.preference_replay_mode", "<trainer>.max_steps"):
        assert f"`{key}`" in text
