"""vLLM under ddp with the real CPU build: torchrun starts 2 processes, each builds its two agents' engines with
vLLM's external_launcher executor (joined to the trainers' gloo group), samples its own items and averages its
gradients with the other rank's; the run exits cleanly (engines closed before the group is destroyed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[3]
TORCHRUN = Path(sys.executable).with_name("torchrun")


def test_magrpo_under_ddp_builds_one_external_launcher_engine_per_agent_and_rank(tiny32, tmp_path):
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp), "WANDB_MODE": "disabled", "PYTHONPATH": str(ROOT),
           "VLLM_CACHE_ROOT": str(tmp_path / "vllm-cache")}
    result = subprocess.run(
        [str(TORCHRUN), "--standalone", "--nproc_per_node=2", "train_magrpo.py", "--config",
         "configs/magrpo_che_cpu.yaml", "--override", f"agent_model.name={tiny32}", "agent_model.device=cpu",
         "agent_model.generation_backend=vllm", "agent_model.lora.r=8", "agent_model.vllm_weight_sync=lora",
         "agent_model.max_length=512", "magrpo.parallel_training=ddp", "magrpo.update_schedule=items",
         "magrpo.num_turns=1", "magrpo.max_steps=2", "magrpo.max_new_tokens=16", "magrpo.num_generations=2",
         "magrpo.eval_at_start=false", "magrpo.eval_interval=0", "magrpo.rollout_buffer_size=1",
         "magrpo.learning_rate=1e-2", "output.verbose=true", f"output.base_dir={tmp_path / 'runs'}",
         "output.run_name=vllm-ddp"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert "Traceback" not in output and "Invalid process group" not in output, output[-4000:]
    assert output.count("Using external launcher for distributed inference") >= 2, output[-4000:]   # vLLM's log
    steps = [json.loads(line) for line in (tmp_path / "runs/vllm-ddp/metrics.jsonl").read_text().splitlines()]
    assert sum("agent_0/loss" in step for step in steps) == 2
    # every engine's caches under its device's own root (cooprl.rollout.vllm_engines)
    assert [p.name for p in (tmp_path / "vllm-cache").iterdir()] in ([], ["cooprl-engines-on-cpu"])
