"""What a user types is what runs (issue 43): every `--override` flag counts, a key a run accepts takes effect or is
one error line, a run past its epochs says which key trains longer, and what needs no model (W&B's key, a launcher
for ddp, samples that can differ) is checked before any model loads or any run folder is made.

In-process through `envs.launch.train_main`, `evaluate.main` and `evaluate_strategy.main`, as
tests/cli/test_scripted_use.py; the refusals cost a fraction of a second, one run trains the tiny model.
"""

import json

import pytest

import evaluate
import evaluate_strategy
from cooprl.config import load_config
from cooprl.tracking import WandbUnavailable, check_wandb
from tests.cli.test_bad_input import assert_one_error, base_config
from tests.cli.test_scripted_use import MISSING_MODEL, cli, events, fake_run


def printed_config(capsys, trainer: str, *argv: str) -> dict:
    code, out = cli(capsys, trainer, *argv, "--print-config")
    assert code == 0, out
    return __import__("yaml").safe_load(out[out.index("agent_model:"):])


# ------------------------------------------------------------------------------------------------ --override
def test_every_override_flag_counts_and_the_later_value_of_a_key_wins(tmp_path, capsys):
    config = printed_config(capsys, "magrpo", "--config", "configs/magrpo_che_cpu.yaml", "--override",
                            "magrpo.max_steps=3", "magrpo.num_turns=1", "--override", "magrpo.logging_steps=2",
                            "--override", "magrpo.max_steps=5")
    section = config["magrpo"]
    assert (section["max_steps"], section["num_turns"], section["logging_steps"]) == (5, 1, 2)


@pytest.mark.parametrize("first,second,named", [
    ("magrpo.no_such_key=1", "magrpo.max_steps=2", "magrpo.no_such_key"),    # the first flag is not dropped
    ("magrpo.max_steps=2", "magrpo.no_such_key=1", "magrpo.no_such_key"),    # nor the second
])
def test_evaluate_reads_every_override_flag(capsys, first, second, named):
    code = evaluate.main(["--config", "configs/magrpo_che_cpu.yaml", "--override", first, "--override", second,
                          MISSING_MODEL])
    assert_one_error(code, capsys.readouterr().err, named)


def test_evaluate_strategy_reads_every_override_flag(tmp_path, capsys):
    code = evaluate_strategy.main(["--strategy", "codet", "--config", "configs/magrpo_che_cpu.yaml", "--override",
                                   "codet.num_codes=2", "--override", "budget.no_such_key=1"])
    assert_one_error(code, capsys.readouterr().err, "budget.no_such_key")
    code = evaluate_strategy.main(["--strategy", "codet", "--config", "configs/magrpo_che_cpu.yaml", "--override",
                                   "codet.no_such_key=2", "--override", "budget.max_calls=1"])
    assert_one_error(code, capsys.readouterr().err, "codet.no_such_key")


# ------------------------------------------------------------------------------------------------ MARLHF's RL section
@pytest.mark.parametrize("override,key", [
    ("iac.learning_rate=1e-4", "iac.learning_rate=0.0001"), ("iac.actor_learning_rate=1e-4", "iac.learning_rate"),
    ("iac.max_steps=50", "iac.max_steps=50"), ("iac.num_turns=3", "iac.num_turns=3"),
    ("iac.eval_interval=1", "iac.eval_interval=1"), ("iac.temperature=0.3", "iac.temperature=0.3"),
])
def test_marlhf_with_iac_refuses_a_shared_key_of_the_iac_section(capsys, override, key):
    # MARLHF's RL algorithm takes every key all trainers share from marlhf: these were saved and ignored
    code, err = cli(capsys, "marlhf", "--config", "configs/marlhf_che_cpu.yaml", "--override",
                    "marlhf.rl_algorithm=iac", override, MISSING_MODEL)
    line = assert_one_error(code, err, key, "MARLHF with rl_algorithm iac trains with marlhf's value")
    assert f"set marlhf.{key.split('.')[1].split('=')[0]} instead" in line


def test_marlhf_with_maac_refuses_a_shared_key_in_the_file(tmp_path, capsys):
    path = tmp_path / "marlhf.yaml"
    path.write_text("marlhf: {rl_algorithm: maac, max_steps: 4}\nmaac: {critic_type: q, max_steps: 40}\n")
    assert_one_error(*cli(capsys, "marlhf", "--config", str(path), "--override", MISSING_MODEL),
                     "maac.max_steps=40", "marlhf.max_steps=4")


def test_marlhf_s_rl_section_keeps_its_own_keys_and_its_config_yaml_only_those(tmp_path, capsys):
    # its own keys take effect; a shared key equal to MARLHF's is no conflict
    config = printed_config(capsys, "marlhf", "--config", "configs/marlhf_che_cpu.yaml", "--override",
                            "marlhf.rl_algorithm=iac", "iac.critic_type=q", "iac.critic_learning_rate=3e-4",
                            "marlhf.num_turns=1", "iac.num_turns=1")
    assert config["iac"] == {**config["iac"], "critic_type": "q", "critic_learning_rate": 3e-4}
    assert "learning_rate" not in config["iac"] and "max_steps" not in config["iac"]   # config.yaml: MARLHF's only
    # a run folder of an older version wrote the whole iac section, shared keys at their defaults: still read
    run_dir = fake_run(tmp_path / "old", "marlhf", **{"marlhf.rl_algorithm": "iac", "marlhf.learning_rate": "1e-4"})
    data = __import__("yaml").safe_load((run_dir / "config.yaml").read_text())
    data["iac"].update(learning_rate=2e-5, num_turns=2, max_steps=None)   # ActorCriticSection's defaults
    (run_dir / "config.yaml").write_text(json.dumps(data))
    assert printed_config(capsys, "marlhf", "--config", str(run_dir / "config.yaml"))["marlhf"]["learning_rate"] == 1e-4


# ------------------------------------------------------------------------------------------------ before any model
def test_wandb_online_without_a_key_is_refused_before_any_model_or_folder(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))   # no ~/.netrc, no W&B settings
    for name in ("WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE", "NETRC", "WANDB_CONFIG_DIR", "WANDB_MODE"):
        monkeypatch.delenv(name, raising=False)
    config = base_config(tmp_path)
    assert_one_error(*cli(capsys, "magrpo", "--config", str(config), "--override", "wandb.mode=online",
                          MISSING_MODEL), "wandb.mode=online, but no W&B API key was found", "wandb login",
                     "wandb.mode=offline")
    assert not (tmp_path / "run").exists()


def test_a_wandb_key_is_found_where_wandb_keeps_it(tmp_path, monkeypatch):
    from cooprl.config import WandbSection
    online = WandbSection(mode="online")
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE", "NETRC", "WANDB_CONFIG_DIR", "WANDB_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    check_wandb(WandbSection(mode="offline"))   # offline and disabled need none
    with pytest.raises(WandbUnavailable):
        check_wandb(online)
    (tmp_path / ".netrc").write_text("machine example.org login user password secret\n")
    with pytest.raises(WandbUnavailable):   # another host's entry is not W&B's
        check_wandb(online)
    (tmp_path / ".netrc").write_text("machine api.wandb.ai login user password secret\n")
    check_wandb(online)
    monkeypatch.setenv("WANDB_BASE_URL", "https://wandb.mycompany.com")   # a self-hosted server: its own entry
    with pytest.raises(WandbUnavailable):
        check_wandb(online)
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    check_wandb(online)


def test_ddp_without_a_launcher_is_refused_before_any_model_or_folder(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert_one_error(*cli(capsys, "magrpo", "--config", str(base_config(tmp_path)), "--override",
                          "magrpo.parallel_training=ddp", "magrpo.update_schedule=items", MISSING_MODEL),
                     "magrpo.parallel_training: ddp, but no launcher started this process",
                     "start it with python -m cooprl.parallel.torchrun --nproc_per_node=N train_magrpo.py ...")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("override", ["agent_model.temperature=0", "magrpo.top_k=1"])
def test_greedy_samples_of_a_group_are_refused_before_any_model_or_folder(tmp_path, capsys, override):
    assert_one_error(*cli(capsys, "magrpo", "--config", str(base_config(tmp_path)), "--override", override,
                          MISSING_MODEL), "with magrpo.num_generations=2: greedy sampling", "nothing trains")
    assert not (tmp_path / "run").exists()
    # evaluation samples greedily as asked: the same config evaluates (up to the model that is missing)
    code = evaluate.main(["--config", str(base_config(tmp_path)), "--override", override, MISSING_MODEL])
    assert_one_error(code, capsys.readouterr().err, "/no/such/model")


def test_the_longer_training_advice_names_a_key_that_trains_longer():
    from cooprl.config import Run
    from cooprl.trainers.loop import train_longer

    def advice(trainer, *overrides, epoch_steps=10):
        return train_longer(Run.of(load_config(None, list(overrides)), trainer), epoch_steps)
    assert advice("magrpo") == "--override magrpo.num_train_epochs=<more>"
    assert advice("magrpo", "magrpo.max_steps=4") == ("--override magrpo.max_steps=<more> (up to 10; beyond: "
                                                      "--override magrpo.num_train_epochs=<more>)")
    assert advice("iac", "iac.max_steps=10") == "--override iac.num_train_epochs=<more> iac.max_steps=null"
    assert advice("madpo_iter", "madpo_iter.max_steps=3") == "--override madpo_iter.num_iterations=<more>"


@pytest.mark.slow
def test_max_steps_past_the_epochs_is_said_and_the_finished_run_s_advice_works(tmp_path, capsys, caplog):
    config = base_config(tmp_path)   # 2 training items here: an epoch is 2 steps
    common = ["dataset.train_split=train[16:18]", "magrpo.eval_at_start=false", "magrpo.rollout_buffer_size=1"]
    code, err = cli(capsys, "magrpo", "--config", str(config), "--override", "magrpo.max_steps=5", *common)
    assert code == 0, err
    assert ("magrpo.max_steps=5 is more than the 2 steps of magrpo.num_train_epochs=1 (2 per epoch): it trains 2 "
            "steps; to train longer: --override magrpo.num_train_epochs=<more> magrpo.max_steps=null") in caplog.text
    run_dir = tmp_path / "run"
    assert max(e["step"] for e in events(run_dir)) == 2
    code, err = cli(capsys, "magrpo", "--resume", str(run_dir))
    assert code == 0 and "is finished: 2 of 2 steps" in err
    assert "--override magrpo.num_train_epochs=<more> magrpo.max_steps=null" in err
    # the advice, followed, trains the second epoch
    code, err = cli(capsys, "magrpo", "--resume", str(run_dir), "--override", "magrpo.num_train_epochs=2",
                    "magrpo.max_steps=null")
    assert code == 0, err
    assert max(e["step"] for e in events(run_dir)) == 4


# ------------------------------------------------------------------------------------------------ data
@pytest.mark.parametrize("eval_split,shared", [("test", 69), ("test[:16]", 0), ("train[10:20]", 4)])
def test_overlapping_splits_are_said_before_an_rl_run_trains(caplog, eval_split, shared):
    # dataset.eval_split=test beside the default train split (train[16:] of the same 85 problems) evaluated on 69
    # training problems without a word (SFT warned)
    from cooprl.config import Run
    from cooprl.train import warn_shared_items
    from envs import environment_for
    config = load_config(None, [f"dataset.eval_split={eval_split}"])
    task = environment_for(config).prepare_task(Run.of(config, "magrpo"))
    warn_shared_items(task)
    if not shared:
        assert "overlap" not in caplog.text
        return
    assert (f"{shared} of the {len(task.eval_items)} eval problems of code:coop are training problems too (its "
            f"training and eval splits overlap") in caplog.text


def test_a_hub_model_without_network_is_one_error_line_at_once_and_leaves_no_folder(tmp_path, capsys, monkeypatch):
    # 74 s and 22 retry warnings before transformers' error: the hub is probed once, before the model loads
    import urllib.error
    import urllib.request

    from cooprl.models import loading

    def unreachable(url, timeout):
        raise urllib.error.URLError("Name or service not known")
    monkeypatch.setattr(urllib.request, "urlopen", unreachable)
    monkeypatch.setattr(loading, "_hub_unreachable", {})
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    started = __import__("time").monotonic()
    assert_one_error(*cli(capsys, "magrpo", "--config", str(base_config(tmp_path)), "--override",
                          "agent_model.name=someone/a-model-nobody-cached"),
                     "model 'someone/a-model-nobody-cached': not in the local Hugging Face cache", "cannot be reached")
    assert __import__("time").monotonic() - started < 30
    assert not (tmp_path / "run").exists()


def test_a_hub_dataset_without_network_is_one_error_line_at_once_and_leaves_no_folder(tmp_path, capsys, monkeypatch):
    # datasets retried for ~30 s before its own error; the hub is probed once, and offline the local cache alone read
    import urllib.error
    import urllib.request

    import datasets

    from cooprl.models import loading

    def unreachable(url, timeout):
        raise urllib.error.URLError("Name or service not known")
    monkeypatch.setattr(urllib.request, "urlopen", unreachable)
    monkeypatch.setattr(loading, "_hub_unreachable", {})
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "datasets-cache")
    for variable in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "HF_ENDPOINT"):
        monkeypatch.delenv(variable, raising=False)
    started = __import__("time").monotonic()
    assert_one_error(*cli(capsys, "magrpo", "--config", str(base_config(tmp_path)), "--override",
                          "dataset.name=someone/a-set-nobody-cached"),
                     "dataset 'someone/a-set-nobody-cached' could not be loaded from the hub: not in the local "
                     "Hugging Face datasets cache, and https://huggingface.co cannot be reached (Name or service not "
                     "known); connect to the network, or use `dataset.name: coop`")
    assert __import__("time").monotonic() - started < 30
    assert not (tmp_path / "run").exists()
