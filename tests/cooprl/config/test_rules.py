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


# ------------------------------------------------------------------------------------------------ greedy training
@pytest.mark.parametrize("trainer,overrides,message", [
    ("magrpo", ["agent_model.temperature=0"], "agent_model.temperature=0.0 with magrpo.num_generations=4: greedy"),
    ("grpo", ["grpo.temperature=0"], "grpo.temperature=0.0 with grpo.num_generations=4"),   # the section's own
    ("magrpo", ["magrpo.top_k=1"], "magrpo.top_k=1 with magrpo.num_generations=4"),
    ("magrpo", ["agent_model.top_p=0", "magrpo.advantage_mode=rloo"],
     r"agent_model.top_p=0.0 .*\(advantage_mode rloo\)"),
    ("madpo", ["agent_model.temperature=0"], "madpo.preference_num_candidates=20: greedy sampling makes a problem's "
                                             "candidates one answer .*so every pair ties"),
    ("marlhf", ["agent_model.temperature=0", "marlhf.rl_algorithm=mareinforce"], "marlhf.preference_num_candidates"),
    ("marlhf_iter", ["agent_model.temperature=0", "marlhf_iter.comparator_policy=api"],
     r"marlhf_iter.num_generations=4: .*\(advantage_mode mean\)"),   # the RL phase's groups are still alike
    ("madpo_iter", ["agent_model.temperature=0"], "madpo_iter.preference_num_candidates=20: greedy .*a comparator "
                                                  "that copies the policies writes it too"),   # current
    ("marlhf_iter", ["agent_model.temperature=0", "marlhf_iter.comparator_policy=history"], "every pair ties"),
])
def test_training_on_groups_that_greedy_sampling_makes_alike_is_refused(trainer, overrides, message):
    from cooprl.config import check_training_samples_differ
    run = Run.of(load_config(None, overrides), trainer)
    with pytest.raises(ConfigError, match=message):
        check_training_samples_differ(run)


@pytest.mark.parametrize("trainer,overrides", [
    ("magrpo", ["agent_model.temperature=0", "magrpo.advantage_mode=raw"]),   # raw returns still train
    ("magrpo", ["agent_model.temperature=0", "magrpo.num_generations=1", "magrpo.advantage_mode=raw"]),
    ("magrpo", ["agent_model.temperature=0", "magrpo.temperature=0.7"]),      # the section's value wins
    ("magrpo", ["magrpo.top_k=2", "magrpo.top_p=0.1"]),
    ("iac", ["agent_model.temperature=0"]),                                   # a critic's baseline, no group
    ("madpo_iter", ["agent_model.temperature=0", "madpo_iter.comparator_policy=model"]),   # another model's side
    ("marlhf_iter", ["agent_model.temperature=0", "marlhf_iter.rl_algorithm=mareinforce",
                     "marlhf_iter.comparator_policy=api"]),
    ("marlhf_iter", ["agent_model.temperature=0", "marlhf_iter.rl_algorithm=iac",
                     "marlhf_iter.comparator_policy=model"]),
])
def test_greedy_sampling_that_still_trains_passes(trainer, overrides):
    from cooprl.config import check_training_samples_differ
    check_training_samples_differ(Run.of(load_config(None, overrides), trainer))


# ------------------------------------------------------------------------------------------------ per-agent settings
@pytest.mark.parametrize("overrides,message", [
    (["agents=[{temperature: 0.7}, {temperature: 0}]"], r"^agents\[1\]\.temperature=0\.0 with magrpo.num_generations"),
    (["agents=[a, {top_k: 1}]"], r"^agents\[1\]\.top_k=1 with magrpo.num_generations"),
    (["agent_model.temperature=0", "agents=[{temperature: 0.7}, b]"], r"^agent_model.temperature=0\.0 with"),
])
def test_one_agent_that_samples_greedily_is_refused_naming_its_own_key(overrides, message):
    from cooprl.config import check_training_samples_differ
    with pytest.raises(ConfigError, match=message):
        check_training_samples_differ(Run.of(load_config(None, overrides), "magrpo"))


def test_agents_that_all_sample_on_their_own_pass_a_greedy_shared_temperature():
    from cooprl.config import check_training_samples_differ
    config = load_config(None, ["magrpo.temperature=0", "agents=[{temperature: 1.0}, {temperature: 0.3}]"])
    check_training_samples_differ(Run.of(config, "magrpo"))


def test_an_agent_s_temperature_vllm_would_raise_is_refused_at_load_naming_it():
    with pytest.raises(ConfigError, match=r"^agents\[0\]\.temperature=0\.005 with agent_model.generation_backend=vllm"):
        load_config(None, ["agent_model.generation_backend=vllm", "agents=[{temperature: 0.005}, b]"])
    load_config(None, ["agents=[{temperature: 0.005}, b]"])   # the HF sampler takes it
