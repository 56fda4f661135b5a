"""Engines on different devices keep their device-bound state apart (cooprl.rollout.vllm_engines), and vLLM under ddp
(external_launcher), against fake vLLM modules that do what vLLM does where it matters:

- `FakeEnvs` is vllm.envs: VLLM_CACHE_ROOT read from the environment until the first engine's build freezes it
  (`enable_envs_cache`, vllm/v1/engine/core.py:251), `disable_envs_cache` unfreezes it;
- `CompilingLLM` builds like vLLM's compile path: its compiled code goes to `VLLM_CACHE_ROOT/torch_compile_cache/<hash
  of no device>/rank_0_0`, where a later engine with the same hash would load it; it takes its rotary embedding from
  the process-wide `_ROPE_DICT`, keyed without a device, and freezes the environment at the end of its build.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from cooprl.rollout.vllm_engines import DEVICE_CACHE_PREFIX, engine_cache_root
from cooprl.rollout.vllm_generation import close_engines
from tests.cooprl.rollout.test_vllm_generation import (FakeLLM, GPUWorkerLLM, fake_vllm, make_generator, tiny,  # noqa: F401
                                            two_gpus)
from tests.environment import child_env

ROOT = Path(__file__).resolve().parents[3]
TORCHRUN = Path(sys.executable).with_name("torchrun")


class FakeEnvs(types.ModuleType):
    """vllm.envs: reads VLLM_CACHE_ROOT afresh until frozen."""

    def __init__(self):
        super().__init__("vllm.envs")
        self.frozen: dict | None = None

    @property
    def VLLM_CACHE_ROOT(self):   # noqa: N802 (vLLM's name)
        if self.frozen is not None:
            return self.frozen["VLLM_CACHE_ROOT"]
        return os.environ.get("VLLM_CACHE_ROOT", os.path.expanduser("~/.cache/vllm"))

    def enable_envs_cache(self):
        self.frozen = {"VLLM_CACHE_ROOT": self.VLLM_CACHE_ROOT}

    def disable_envs_cache(self):
        self.frozen = None


class CompilingLLM(GPUWorkerLLM):
    """GPUWorkerLLM (built on its executor's GPU) that compiles and caches as vLLM does (see the module docstring)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        envs, rotary = sys.modules["vllm.envs"], sys.modules["vllm.model_executor.layers.rotary_embedding"]
        key = (kwargs["model"], kwargs["dtype"])                       # no device in it
        self.compile_dir = Path(envs.VLLM_CACHE_ROOT, "torch_compile_cache", str(abs(hash(key))), "rank_0_0")
        artifact = self.compile_dir / "model"
        self.loaded_from = artifact.read_text() if artifact.exists() else None
        if self.loaded_from is None:   # compile on this GPU and save (inductor hard-codes the GPU into the code)
            self.compile_dir.mkdir(parents=True)
            artifact.write_text(f"code for cuda:{self.local_rank}")
        rope_key = (32, 10000.0)                                       # no device in it
        self.rotary = rotary._ROPE_DICT.setdefault(rope_key, types.SimpleNamespace(device=f"cuda:{self.local_rank}"))
        envs.enable_envs_cache()                                       # the end of the first EngineCore's build


@pytest.fixture
def compiling_vllm(fake_vllm, two_gpus, monkeypatch, tmp_path):
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path / "cache"))
    rotary = types.ModuleType("vllm.model_executor.layers.rotary_embedding")
    rotary._ROPE_DICT = {}
    monkeypatch.setitem(sys.modules, "vllm.envs", FakeEnvs())
    monkeypatch.setitem(sys.modules, "vllm.model_executor.layers.rotary_embedding", rotary)
    monkeypatch.setattr(fake_vllm, "LLM", CompilingLLM)
    return fake_vllm


@pytest.mark.slow   # loads models
def test_engines_on_two_gpus_of_one_process_compile_and_cache_each_for_its_own_gpu(tiny, compiling_vllm, tmp_path):
    make_generator(tiny, compiling_vllm, device="cuda:0")
    make_generator(tiny, compiling_vllm, device="cuda:1")
    first, second = FakeLLM.instances[-2:]
    assert (first.local_rank, second.local_rank) == (0, 1)
    # before: the second engine found cuda:0's artifact under the same hash and loaded it ("invalid argument")
    assert first.loaded_from is None and second.loaded_from is None
    assert first.compile_dir.is_relative_to(tmp_path / "cache" / f"{DEVICE_CACHE_PREFIX}cuda0")
    assert second.compile_dir.is_relative_to(tmp_path / "cache" / f"{DEVICE_CACHE_PREFIX}cuda1")
    assert first.rotary is not second.rotary and second.rotary.device == "cuda:1"   # not cuda:0's module
    # a later run (a fresh process) with one engine on cuda:1 loads cuda:1's code, not what cuda:0 left
    sys.modules["vllm.envs"].disable_envs_cache()
    make_generator(tiny, compiling_vllm, device="cuda:1")
    assert FakeLLM.instances[-1].loaded_from == "code for cuda:1"
    make_generator(tiny, compiling_vllm, device="cuda:0")
    assert FakeLLM.instances[-1].loaded_from == "code for cuda:0"


def test_a_devices_cache_root_sits_under_the_users_root(monkeypatch, tmp_path):
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path / "mine"))
    assert engine_cache_root("cuda:1") == str(tmp_path / "mine" / "cooprl-engines-on-cuda1")
    monkeypatch.setenv("VLLM_CACHE_ROOT", engine_cache_root("cuda:1"))   # set by an earlier build: not nested
    assert engine_cache_root("cuda:0") == str(tmp_path / "mine" / "cooprl-engines-on-cuda0")
    monkeypatch.delenv("VLLM_CACHE_ROOT")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))        # vLLM's default root
    assert engine_cache_root("cpu") == str(tmp_path / "xdg" / "vllm" / "cooprl-engines-on-cpu")


@pytest.mark.slow   # loads models
def test_closing_engines_shuts_each_down_once(tiny, fake_vllm):
    generators = [make_generator(tiny, fake_vllm) for _ in range(2)]
    assert close_engines([*generators, object()]) == 2          # other generators are skipped
    assert all(engine.events[-1:] == ["shutdown"] for engine in FakeLLM.instances[-2:])
    assert close_engines(generators) == 0 and all(not hasattr(g, "llm") for g in generators)


@pytest.mark.distributed
@pytest.mark.skipif(not TORCHRUN.exists(), reason="torchrun is not in the interpreter's folder")
def test_vllm_under_ddp_builds_external_launcher_engines_in_order_and_closes_them_first(tmp_path):
    from tests.cooprl.parallel.test_scale_out import DDP_OVERRIDES
    records = tmp_path / "records"
    records.mkdir()
    env = child_env(OMP_NUM_THREADS="1", WANDB_MODE="disabled", VLLM_CACHE_ROOT=str(tmp_path / "cache"))
    result = subprocess.run(
        [str(TORCHRUN), "--standalone", "--nproc_per_node=2", "tests/fake_vllm_run.py", str(records),
         "train_magrpo.py", "--config", "configs/magrpo_che_config.yaml", "--override", *DDP_OVERRIDES,
         "agent_model.generation_backend=vllm", "magrpo.max_steps=2", "magrpo.rollout_buffer_size=1",
         "magrpo.learning_rate=1e-2", f"output.base_dir={tmp_path}", "output.run_name=ddp-vllm"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    ranks = [json.loads((records / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    for engines in ranks:
        assert len(engines) == 2   # one per agent, built in agent order on every rank
        for engine in engines:
            assert engine["executor"] == "external_launcher" and engine["group_at_build"]
            assert engine["seed"] == engines[0]["seed"]
            assert engine["group_at_shutdown"]   # closed before the process group was destroyed
            assert engine["cache_root"].endswith(f"{DEVICE_CACHE_PREFIX}cpu")
    assert ranks[1][0]["seed"] == ranks[0][0]["seed"] + 1                       # each rank's engine seeded apart
    assert ranks[0][0]["prompts"] != ranks[1][0]["prompts"]                      # each rank samples its own items
    for agent in (0, 1):   # the update is ddp's: both ranks push the same averaged weights, which did move
        start, updated = ranks[0][agent]["pushed_weights"][:2]   # (rank 0 alone evaluates at the end: a third push)
        assert ranks[1][agent]["pushed_weights"][:2] == pytest.approx([start, updated], abs=1e-6)
        assert updated != pytest.approx(start, abs=1e-6)
