"""Config as data: a run's config.yaml holds the sections its trainer reads."""

import yaml

from cooprl.config import load_config


def test_run_config_keeps_the_rl_algorithm_section(tmp_path):
    # MARLHF with IAC reads iac's own keys: the run's config.yaml must hold them, or a resume/evaluation from it
    # silently uses IAC's defaults
    config = load_config(None, ["marlhf.rl_algorithm=iac", "iac.critic_type=q"])
    written = yaml.safe_load(config.to_yaml("marlhf"))
    assert written["iac"]["critic_type"] == "q" and "maac" not in written
    assert "iac" not in load_config(None, []).to_dict("marlhf")  # rl_algorithm magrpo reads marlhf itself
