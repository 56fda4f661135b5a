"""The rules between keys: device keys and parallel_training are checked at load; one device for every model is
accepted and used."""

import pytest

from cooprl.config import ConfigError, Run, load_config


@pytest.mark.slow
@pytest.mark.parametrize("override,message", [
    ("iac.parallel_training=mp", "iac.parallel_training: mp is supported by magrpo, grpo"),
    ("maac.parallel_training=ddp", "set maac.update_schedule=episodes and maac.train_batch_size=null"),
    ("iac.parallel_training=ddp", "set iac.update_schedule=episodes and iac.train_batch_size=null"),
    ("magrpo.agent_devices=[cuda:0, cuda1]", "magrpo.agent_devices: 'cuda1' is not a device"),
    ("maac.critic_devices=[cpu, gpu]", "maac.critic_devices: 'gpu' is not a device"),
    ("madpo_iter.comparator_devices=[cuda:0, cuda:x]", "madpo_iter.comparator_devices: 'cuda:x' is not a device"),
    ("marlhf.reward_model_device=gpu0", "marlhf.reward_model_device: 'gpu0' is not a device"),
])
def test_device_and_parallel_keys_are_checked(override, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[")):
        load_config(None, [override])


@pytest.mark.slow
def test_one_device_is_accepted_and_used():
    from cooprl.trainers.team import build_team
    config = load_config(None, ["agent_model.name=offline:tiny-random", "agent_model.device=cuda:7",
                                "magrpo.agent_devices=[cpu, cpu]", "magrpo.parallel_training=none",
                                "iac.critic_devices=cpu", "madpo_iter.comparator_devices=cpu",
                                "marlhf.reward_model_device=cpu"])
    team = build_team(Run.of(config, "magrpo"), 1)   # agent_model.device (cuda:7) is overridden by agent_devices
    assert str(team[0].model.device) == "cpu"
