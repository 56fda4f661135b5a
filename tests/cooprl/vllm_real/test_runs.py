"""Whole runs with real vLLM engines (CPU build): a two-agent MAGRPO run trains through two engines and exits cleanly,
and evaluate_strategy.py samples its trained team with vLLM engines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[3]


def run(args: list[str], folder: Path) -> subprocess.CompletedProcess:
    """Run a command line of this repository with a temp folder of its own (to see what it leaves there)."""
    temp = folder / "tmp"
    temp.mkdir(exist_ok=True)
    env = {**os.environ, "TMPDIR": str(temp), "WANDB_MODE": "disabled", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def magrpo_run(tiny32, tmp_path_factory):
    """Return (the finished process, its folder) of a 2-step MAGRPO run: two agents, each sampling with its own
    engine (LoRA r=8 as vLLM LoRA requests), importance weights against vLLM's sampler, a checkpoint at the end."""
    folder = tmp_path_factory.mktemp("magrpo")
    result = run(["train_magrpo.py", "--config", "configs/magrpo_che_cpu.yaml", "--override",
                  f"agent_model.name={tiny32}", "agent_model.generation_backend=vllm", "agent_model.lora.r=8",
                  "agent_model.vllm_weight_sync=lora", "agent_model.vllm_importance_cap=2.0",
                  "agent_model.max_length=512", "magrpo.max_steps=2", "magrpo.max_new_tokens=24",
                  "magrpo.num_generations=2", "magrpo.eval_at_start=false", "magrpo.eval_num_samples=2",
                  "magrpo.advantage_mode=raw", "magrpo.advantage_normalization=false", "magrpo.learning_rate=1e-2",
                  "checkpoint.checkpoint_interval=2", f"output.base_dir={folder / 'runs'}",
                  "output.run_name=vllm-magrpo"], folder)
    return result, folder


def test_magrpo_trains_two_agents_with_two_engines_and_exits_cleanly(magrpo_run):
    result, folder = magrpo_run
    output = result.stdout + result.stderr   # vLLM logs to stdout
    assert result.returncode == 0, output[-3000:]
    assert "Traceback" not in output and "Invalid process group" not in output, output[-3000:]
    steps = [json.loads(line) for line in (folder / "runs/vllm-magrpo/metrics.jsonl").read_text().splitlines()]
    trained = [s for s in steps if "agent_0/is_weight_mean" in s]
    assert len(trained) == 2
    for step in trained:
        for agent in (0, 1):   # vLLM samples from the trained model's own distribution (float32): weights near 1
            assert abs(step[f"agent_{agent}/is_weight_mean"] - 1) < 1e-3
            assert step[f"agent_{agent}/is_weight_max"] < 1.01
    assert trained[0]["agent_0/optimizer_steps"] >= 1   # the second step sampled an updated adapter
    assert not list((folder / "tmp").glob("cooprl-vllm-lora-*"))   # each engine's adapter folder is removed
    # the stale-weights guard, on by default, checked each engine after each adapter version (cooprl.rollout.vllm_guard)
    checks = [line for line in (folder / "runs/vllm-magrpo/train.log").read_text().splitlines()
              if "vLLM engine weights checked after the LoRA sync of adapter version" in line]
    assert {line.split(" checked after the LoRA sync of adapter version ")[1][:1] for line in checks} >= {"1", "2"}
    assert {line.split(": vLLM engine weights")[0][-7:] for line in checks} == {"agent 0", "agent 1"}


def test_evaluate_strategy_runs_the_trained_team_with_vllm_engines(tiny32, magrpo_run):
    trained, folder = magrpo_run
    assert trained.returncode == 0
    # merged sync this time: each engine gets its agent's adapters merged into the weights (vLLM's in-place reload)
    result = run(["evaluate_strategy.py", "--strategy", "direct", "--config", "configs/magrpo_che_cpu.yaml",
                  "--checkpoint", str(folder / "runs/vllm-magrpo"), "--torch-threads", "1", "--override",
                  f"agent_model.name={tiny32}", "agent_model.lora.r=8",   # the trained team's model and adapters
                  "agent_model.generation_backend=vllm", "agent_model.vllm_weight_sync=merged",
                  "agent_model.max_length=512", "dataset.eval_split=test[:2]", "budget.max_new_tokens=24",
                  f"output.base_dir={folder / 'eval'}", "output.run_name=team"], folder)
    output = result.stdout + result.stderr   # vLLM logs to stdout
    assert result.returncode == 0, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    assert "pass@1: " in result.stdout
    rows = (folder / "eval/team/strategy_results.jsonl").read_text().splitlines()
    assert len(rows) == 2   # one per problem
    assert output.count("init engine (profile") == 2   # one engine per agent of the team
    assert "Reloading weights inplace" in output         # weights pushed by vLLM's in-place reload (logged once)


def test_sleep_mode_on_vllms_cpu_build_is_one_error_line(tiny32, tmp_path):
    # vLLM itself would raise a pydantic ValidationError ("Sleep mode is not supported on current platform")
    result = run(["train_grpo.py", "--config", "configs/grpo_he_config.yaml", "--override",
                  f"agent_model.name={tiny32}",
                  "agent_model.device=cpu", "agent_model.torch_dtype=float32", "agent_model.generation_backend=vllm",
                  "agent_model.vllm_sleep=true", "dataset.name=coop", "dataset.type=coophumaneval",
                  f"output.base_dir={tmp_path / 'runs'}"], tmp_path)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr and "ValidationError" not in result.stdout + result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("error: agent_model.vllm_sleep: vLLM's CPU build has no "
                                                             "sleep mode")
