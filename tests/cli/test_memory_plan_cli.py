"""`train_*.py --memory-plan GIB`: the plan per GPU of that size, printed offline without loading a model; exit 0 when
it fits or may not fit (only the update's bound over the GPU), 2 with the figures and the keys to change when it is
refused."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.test_bad_input import run_script

ROOT = Path(__file__).resolve().parents[2]
HE = ["--config", "configs/magrpo_he_config.yaml"]


def plan(argv: list[str], monkeypatch, capsys, script: str = "train_magrpo.py") -> tuple[int, str, str]:
    """Run `script argv` in-process with the hub out of reach; return (exit status, stdout, stderr)."""
    import cooprl.models.loading as loading
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(loading, "load_causal_lm", lambda *a, **k: pytest.fail("a model was loaded"))
    out = []
    monkeypatch.setattr(sys.stdout, "write", lambda text: out.append(text) or len(text))
    code, err = run_script(script, argv, monkeypatch, capsys)
    return code, "".join(out), err


def test_the_reference_config_on_80_gib_may_not_fit_and_says_by_how_much(monkeypatch, capsys):
    code, out, err = plan([*HE, "--memory-plan", "80"], monkeypatch, capsys)
    assert code == 0, err   # the reference command starts (with a warning): only the update's bound tips it over
    assert "memory plan of magrpo (hf sampler), per GPU of 80 GiB (79.0 GiB usable):" in out
    # 2 turns: turn 2's prompts hold turn 1 and the feedback, so they stay at max_length; the dataset was read
    assert ("largest update forward: 8 sequences, 5632 tokens, 2048 scored positions (prompts at "
            "agent_model.max_length - max_new_tokens = 1792 tokens (2 turns: later prompts hold earlier turns and "
            "feedback); the dataset's longest first prompt: 824 tokens (1648 characters / 2 per token: "
            "Qwen/Qwen2.5-Coder-3B's tokenizer is not on this machine))") in out
    assert "cuda:0: 92.9 GiB, may not fit" in out and "22.99 GiB  agent 0 optimizer states" in out
    assert "26.19 GiB  agent 0 activations (5632 tokens of 8 sequences, trie)" in out
    assert ("cuda:0: 63.2 GiB held whatever the lengths, 15.8 GiB left for the update's activations and log-softmax, "
            "bounded at 29.7 GiB") in out


def test_a_single_turn_run_bounds_its_prompts_by_the_dataset(monkeypatch, capsys):
    code, out, _ = plan([*HE, "--memory-plan", "80", "--override", "magrpo.num_turns=1"], monkeypatch, capsys)
    # 2 prompts of 824 tokens (HumanEval's longest first prompt, 1,648 characters at 2 a token) + 8 x 256
    assert code == 0 and "8 sequences, 3696 tokens, 2048 scored positions (prompts of 824 tokens;" in out
    assert "cuda:0: 84.2 GiB, may not fit" in out


def test_a_dataset_that_cannot_be_read_offline_falls_back_to_max_length(monkeypatch, capsys):
    code, out, _ = plan([*HE, "--memory-plan", "80", "--override", "magrpo.num_turns=1", "dataset.name=nobody/none",
                         "dataset.type=custom"], monkeypatch, capsys)
    assert code == 0 and "8 sequences, 5632 tokens, 2048 scored positions (prompts at agent_model.max_length" in out
    assert "the dataset was not read offline (" in out


def test_the_reference_config_on_24_gib_is_refused_with_the_figures_and_the_keys(monkeypatch, capsys):
    code, out, err = plan([*HE, "--memory-plan", "24"], monkeypatch, capsys)
    assert code == 2 and "cuda:0: 92.9 GiB, too big" in out
    assert err.startswith("error: memory plan: cuda:0 would hold 92.9 GiB, more than the 23.0 GiB usable of 24 GiB")
    assert "change agent_model.gradient_checkpointing=true" in err and "agent_model.lora.r=16" in err


def test_with_gradient_checkpointing_it_fits_80_gib(monkeypatch, capsys):
    code, out, err = plan([*HE, "--memory-plan", "80", "--override", "agent_model.gradient_checkpointing=true"],
                          monkeypatch, capsys)
    assert code == 0, err
    assert "cuda:0: 68.2 GiB, fits" in out and "1.50 GiB  agent 0 activations" in out


def test_two_full_3b_agents_do_not_fit_24_gib(monkeypatch, capsys):
    code, out, err = plan([*HE, "--memory-plan", "24", "--override", "agent_model.gradient_checkpointing=true",
                           "agent_model.logprob_chunk_size=256"], monkeypatch, capsys)
    assert code == 2 and "cuda:0: 65.2 GiB, too big" in out
    assert "22.99 GiB  agent 1 optimizer states" in out
    # what is already set is not offered again
    assert "change agent_model.lora.r=16" in err and "gradient_checkpointing=true" not in err


def test_an_unknown_hub_model_says_how_to_give_its_shape(monkeypatch, capsys):
    code, _, err = plan([*HE, "--memory-plan", "80", "--override", "agent_model.name=nobody/no-such-model"],
                        monkeypatch, capsys)
    assert code == 2
    assert "the shape of model 'nobody/no-such-model' is not known offline" in err
    assert "local folder holding its config.json" in err


@pytest.mark.parametrize("script", sorted(p.name for p in ROOT.glob("train_*.py")))
def test_every_training_script_prints_its_plan(script, monkeypatch, capsys):
    trainer = script.removeprefix("train_").removesuffix(".py")
    code, out, err = plan(["--memory-plan", "141"], monkeypatch, capsys, script)   # its reference config
    assert f"memory plan of {trainer} (hf sampler), per GPU of 141 GiB" in out, err
    assert code == 0 or "change " in err


@pytest.mark.cli
def test_the_plan_is_made_offline_without_writing_anything(tmp_path):
    # no network (the hub and any proxy unreachable), a fresh HF cache: the shipped shapes are all it needs
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "HF_HOME": str(tmp_path / "hf"), "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9",
           "COOPRL_CACHE": str(tmp_path / "cache"), "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    result = subprocess.run([sys.executable, "train_magrpo.py", *HE, "--memory-plan", "80", "--override",
                             "agent_model.gradient_checkpointing=true", f"output.base_dir={tmp_path / 'runs'}"],
                            cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "cuda:0: 68.2 GiB, fits" in result.stdout
    assert not (tmp_path / "runs").exists() and not (tmp_path / "cache").exists()   # no run folder, no model built


def test_a_cpu_config_holds_nothing_on_a_gpu(monkeypatch, capsys):
    code, out, err = plan(["--config", "configs/magrpo_che_cpu.yaml", "--memory-plan", "24"], monkeypatch, capsys)
    assert code == 0, err
    assert "nothing on a GPU (every model on the CPU)" in out
