"""load_config: a config file plus overrides, each value typed; every shipped config loads; the command line's
config errors (exit 2, no traceback) and --print-config."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cooprl.config import load_config

ROOT = Path(__file__).resolve().parents[3]


def test_config_file_plus_overrides_types():
    config = load_config(ROOT / "configs/magrpo_he_config.yaml", [
        "magrpo.num_turns=1", "magrpo.learning_rate=1e-5", "agent_model.lora={r: 4}", "wandb.tags=[a, b]",
        "external.sandbox_slice=all", "magrpo.early_termination_threshold=null"])
    assert config.magrpo.num_turns == 1
    assert config.magrpo.learning_rate == 1e-5  # YAML reads 1e-5 as text; a float field converts it
    assert config.agent_model.lora.r == 4 and config.agent_model.lora.alpha == 32
    assert config.wandb.tags == ["a", "b"]
    assert config.task.external.sandbox_slice == "all"
    assert config.magrpo.early_termination_threshold is None
    assert config.task.dataset.train_split == "test[33:163]" and config.agent_model.torch_dtype == "bfloat16"


def test_every_shipped_config_loads_and_every_trainer_has_its_reference_configs():
    configs = sorted((ROOT / "configs").glob("*.yaml"))
    from cooprl.cli import read_config
    from envs import task_config_of
    for path in configs:
        read_config(path, [], task_config_of)   # each with its environment's sections
    names = {path.name for path in configs}
    scripts = sorted(path.stem.removeprefix("train_") for path in ROOT.glob("train_*.py"))
    missing = [f"{t}_{d}_config.yaml" for t in scripts for d in ("che", "he") if f"{t}_{d}_config.yaml" not in names]
    assert scripts and missing == []


def run_script(*args):
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_cli_typo_exits_nonzero_with_did_you_mean_and_no_traceback():
    result = run_script("train_magrpo.py", "--config", "configs/magrpo_che_cpu.yaml", "--override",
                        "magrpo.num_turnz=3")
    assert result.returncode == 2
    assert "error: magrpo.num_turnz: unknown key; did you mean magrpo.num_turns?" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_cli_missing_config_file():
    result = run_script("train_magrpo.py", "--config", "configs/nope.yaml")
    assert result.returncode == 2 and "config file 'configs/nope.yaml' not found" in result.stderr


@pytest.mark.slow
def test_print_config_prints_merged_yaml():
    result = run_script("train_grpo.py", "--config", "configs/grpo_he_config.yaml", "--override", "grpo.num_turns=1",
                        "--print-config")
    assert result.returncode == 0, result.stderr
    printed = yaml.safe_load(result.stdout)
    assert printed["grpo"]["num_turns"] == 1 and printed["grpo"]["num_agents"] == 1
    assert "magrpo" not in printed  # other trainers' sections are left out
    assert load_config(None, []).to_dict("grpo").keys() == printed.keys()
