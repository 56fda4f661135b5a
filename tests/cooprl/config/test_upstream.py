"""Fidelity to upstream (issue 14 §1, §2): the seed's commands run as written, and upstream's own configs load in the
matching train_*.py with their values where they belong, and run.

The commands are the seed document's (the README of OpenMLRL/LLM_Collab_Code_Generation as the project received
it), copied literally; each runs in-process through the real command line (`envs.launch.train_main`) with only
`--override` additions: the tiny offline model, the shipped coop set, two steps, small candidate counts.
Upstream's configs are test data in tests/data/upstream_configs/ (sources in the README there).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from cooprl.config import ConfigError, load_config
from envs.launch import train_main

# the end-to-end tests (trainers, command lines, subprocesses) are marked slow: not in `make test-fast`

ROOT = Path(__file__).resolve().parents[3]
UPSTREAM = ROOT / "tests" / "data" / "upstream_configs"
TRAINERS = ("magrpo", "grpo", "iac", "maac", "ac", "madpo", "madpo_iter", "marlhf", "marlhf_iter")

# every `python train_*.py` command of the seed, as written there (line continuations joined)
SEED_COMMANDS = [
    "python train_magrpo.py --config configs/magrpo_che_config.yaml",
    "python train_magrpo.py --config configs/magrpo_he_config.yaml \\\n"
    "  --override agent_model.name='bigcode/starcoder2-3b' magrpo.num_turns=1",
    "python train_magrpo.py --config configs/magrpo_che_config.yaml --override \\\n"
    "  magrpo.collaboration_mode=centralized magrpo.num_turns=1 \\\n"
    "  magrpo.max_new_tokens=512 magrpo.centralized_prompt=native",
    "python train_madpo_iter.py --config configs/madpo_iter_che_config.yaml --override \\\n"
    "  madpo_iter.comparator_generation_mode=centralized madpo_iter.centralized_prompt=native",
]

OFFLINE = ["agent_model.name=offline:tiny-random", "agent_model.device=cpu", "agent_model.torch_dtype=float32",
           "agents=null", "critics=null", "critic_model.name=null", "dataset.name=coop", "dataset.type=coophumaneval",
           "dataset.path=null", "dataset.train_split=train[16:]", "dataset.eval_split=test[:1]", "wandb.mode=disabled"]


def few_steps(trainer: str, tmp_path: Path, name: str) -> list[str]:
    """Return the cost controls every run adds: two steps, tiny budgets, the run folder under tmp_path."""
    extra = [f"{trainer}.max_steps=2", f"{trainer}.max_new_tokens=8", f"{trainer}.eval_num_samples=1",
             f"{trainer}.eval_interval=0", f"{trainer}.num_train_epochs=1", f"{trainer}.agent_devices=null",
             f"output.base_dir={tmp_path}", f"output.run_name={name}", "checkpoint.checkpoint_interval=0"]
    if trainer in ("magrpo", "grpo", "marlhf", "marlhf_iter"):
        extra.append(f"{trainer}.num_generations=2")
    if trainer in ("madpo", "madpo_iter", "marlhf", "marlhf_iter"):
        extra.append(f"{trainer}.preference_num_candidates=2")
    if trainer.endswith("_iter"):
        extra.append(f"{trainer}.num_iterations=1")
    if trainer in ("iac", "maac", "ac"):
        extra += [f"{trainer}.rollout_buffer_size=1", f"{trainer}.critic_devices=null"]   # upstream's: cuda:0
    if trainer.startswith("marlhf"):
        extra.append(f"{trainer}.reward_model_device=null")
    return extra


def run_command(command: str, additions: list[str]) -> int:
    """Run a `python train_X.py ...` command line in-process (the script's own main), with `additions` appended
    to its --override list; return its exit status."""
    argv = shlex.split(command.replace("\\\n", " "))
    assert argv[0] == "python" and argv[1].startswith("train_") and argv[1].endswith(".py")
    trainer = argv[1][len("train_"):-len(".py")]
    args = argv[2:]
    if "--override" not in args:
        args.append("--override")
    args = args + additions if args[-1] == "--override" or "--override" in args else args
    default = f"configs/{trainer}_{'he' if trainer == 'grpo' else 'che'}_config.yaml"
    return train_main(trainer, args, default)


def train_events(run_dir: Path) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if any(k.startswith("turn_1/") for k in e) and "step" in e
            and not any(k.startswith("eval/") for k in e)]


@pytest.mark.slow
@pytest.mark.parametrize("command", SEED_COMMANDS, ids=lambda c: " ".join(c.split()[1:])[:80])
def test_seed_command_runs_as_written(command, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    trainer = shlex.split(command)[1][len("train_"):-len(".py")]
    # the command's own overrides come first; only the offline model, coop set and two steps are added
    code = run_command(command, OFFLINE + few_steps(trainer, tmp_path, "seed"))
    assert code == 0
    logged = train_events(tmp_path / "seed")
    assert [e["step"] for e in logged] == [1, 2]


@pytest.mark.slow
def test_the_seed_commands_values_land_in_the_config():
    argv = shlex.split(SEED_COMMANDS[3].replace("\\\n", " "))
    config = load_config(ROOT / argv[3], argv[5:])
    assert config.madpo_iter.comparator_generation_mode == "centralized"
    assert config.madpo_iter.centralized_prompt == "native"
    argv = shlex.split(SEED_COMMANDS[1].replace("\\\n", " "))
    config = load_config(ROOT / argv[3], argv[5:])
    assert config.agent_model.name == "bigcode/starcoder2-3b" and config.magrpo.num_turns == 1


# ---------------------------------------------------------------------------------------------- upstream's configs
def upstream(trainer: str, dataset: str) -> Path:
    return UPSTREAM / f"{trainer}_{dataset}_config.yaml"


@pytest.mark.slow
def test_every_upstream_config_is_here_with_its_source():
    readme = (UPSTREAM / "README.md").read_text()
    for trainer in TRAINERS:
        for dataset in ("che", "he"):
            path = upstream(trainer, dataset)
            assert path.is_file(), path
            assert path.name in readme and "commit" in readme


@pytest.mark.slow
@pytest.mark.parametrize("trainer", TRAINERS)
@pytest.mark.parametrize("dataset", ["che", "he"])
def test_upstream_config_loads_and_its_values_land_in_our_fields(trainer, dataset):
    import yaml
    raw = yaml.safe_load(upstream(trainer, dataset).read_text())
    section = raw[trainer]
    config = load_config(upstream(trainer, dataset), [])
    ours = config.trainer(trainer)
    # renamed keys land in our fields
    assert ours.learning_rate == float(section["agent_learning_rate"])
    for key in ("num_turns", "num_train_epochs", "max_new_tokens", "discount", "early_termination_threshold",
                "eval_interval", "eval_num_samples", "eval_batch_size", "logging_steps", "rollout_buffer_size",
                "train_batch_size", "num_generations", "critic_learning_rate", "value_loss_coef", "value_clip_range",
                "critic_type", "use_separate_critic", "advantage_normalization", "joint_mode", "temperature", "top_p",
                "top_k", "preference_num_candidates", "preference_pairs_per_sample", "pair_selection", "dpo_beta",
                "use_environment_step", "environment_steps_per_pair", "rl_algorithm", "reward_model_name",
                "reward_max_length", "reward_freeze_backbone", "reward_train_batch_size", "num_iterations",
                "preference_replay_mode", "preference_replay_k", "preference_replay_sample_size",
                "log_reward_distribution", "policy_checkpoint_dir", "comparator_policy", "comparator_generation_mode",
                "comparator_centralized_agent_index", "comparator_agents", "comparator_num_candidates",
                "comparator_history_k", "comparator_api_url", "comparator_api_format", "comparator_api_model",
                "comparator_api_max_n_per_request", "comparator_api_key_env", "preference_scoring_reward",
                "collaboration_mode", "parallel_training", "agent_devices", "critic_devices", "comparator_devices",
                "reward_model_device"):
            if key in section:
                value = getattr(ours, key)
                assert value == section[key] or (isinstance(value, float) and value == float(section[key])), key
    aliases = {"preference_replay_lambda": "replay_lambda", "reward_learning_rate": "reward_model_learning_rate",
               "reward_num_train_epochs": "reward_model_epochs", "comparator_model_name": "comparator_model"}
    for theirs, mine in aliases.items():
        if theirs in section:
            assert getattr(ours, mine) == section[theirs], theirs
    # reward_shift (grpo/iac/maac/ac) or the reward_processor section: our reward_processor.shift
    shift = section.get("reward_shift", raw.get("reward_processor", {}).get("shift"))
    assert config.reward_processor.shift == float(shift)
    # the other sections
    assert config.agent_model.name == raw["agent_model"]["name"]
    assert config.agent_model.temperature == raw["agent_model"]["temperature"]
    assert config.task.dataset.train_split == raw["dataset"]["train_split"]
    assert config.task.dataset.eval_split == raw["dataset"]["eval_split"]
    if isinstance(raw.get("critic_model"), dict):
        assert config.critic_model.name == raw["critic_model"]["name"]
        assert config.critic_model.max_length == raw["critic_model"]["max_length"]
    # --print-config shows our names only
    printed = yaml.safe_load(config.to_yaml(trainer))
    assert "agent_learning_rate" not in printed[trainer] and printed[trainer]["learning_rate"] == ours.learning_rate
    assert "reward_shift" not in printed[trainer]


@pytest.mark.slow
def test_print_config_of_an_upstream_config_shows_our_names(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    assert train_main("madpo_iter", ["--config", str(upstream("madpo_iter", "che")), "--print-config"]) == 0
    out = capsys.readouterr().out
    assert "replay_lambda: 0.5" in out and "preference_replay_lambda" not in out
    assert "comparator_model: null" in out and "comparator_model_name" not in out


@pytest.mark.slow
@pytest.mark.parametrize("trainer,dataset", [("magrpo", "che"), ("iac", "he"), ("madpo_iter", "che"),
                                             ("marlhf_iter", "che")])
def test_upstream_config_runs_end_to_end(trainer, dataset, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    code = train_main(trainer, ["--config", str(upstream(trainer, dataset)), "--override", *OFFLINE,
                                *few_steps(trainer, tmp_path, "up")])
    assert code == 0
    assert train_events(tmp_path / "up")[-1]["step"] == 2   # upstream logs every logging_steps (50) and at the end


# ---------------------------------------------------------------------------------------------- the trainer of a file
def test_trainer_of_file_names_the_run_config_trainer(tmp_path):
    from cooprl.config import trainer_of_file
    path = tmp_path / "config.yaml"
    cases = [("iac", []), ("marlhf", ["marlhf.rl_algorithm=iac"]), ("madpo_iter", [])]
    for trainer, overrides in cases:
        path.write_text(load_config(None, overrides).to_yaml(trainer))
        assert trainer_of_file(path) == trainer
    path.write_text("seed: 1\n")
    assert trainer_of_file(path) is None  # no trainer section: the caller's default
    path.write_text("madpo: {}\nmadpo_iter: {}\n")
    with pytest.raises(ConfigError, match="several trainers .*--trainer"):
        trainer_of_file(path)
