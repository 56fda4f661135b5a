"""What every in-process vLLM engine is built with (`EngineOptions`, `AgentEngine`) and needs around its build and its
end, so that engines on different GPUs (one process under `parallel_training: mp`, or one per rank under ddp) never
share device-bound state. Where an engine runs is cooprl.rollout.vllm_platform's.

Read in vLLM 0.27.1 and 0.30.0 (the `vllm` extra's ends; line numbers are 0.30.0's) and 0.32.0 (the CPU build):

- Compiled code. vLLM caches torch.compile's output under `VLLM_CACHE_ROOT/torch_compile_cache/...`, keyed by a hash
  that holds no device (vllm/config/device.py:42-47 gives it no factors; the compile cache dir is left out of
  CompilationConfig's hash) and a rank that is 0 for every single-process engine (ahead-of-time artifacts:
  vllm/compilation/decorators.py:539-576; the piecewise cache: vllm/compilation/backends.py:1058-1077). Inductor's
  generated code hard-codes the GPU it was compiled on, so an engine on cuda:1 that finds cuda:0's artifact loads it
  and fails ("CUDA driver error: invalid argument"). `prepare_engine_build` gives each device its own cache root
  (`engine_cache_root`), so both caches are per device and warm starts still hit.
- vLLM reads its environment once and freezes it at the end of the first EngineCore's build (`enable_envs_cache`,
  vllm/v1/engine/core.py:251): a second engine would read the first one's root. `prepare_engine_build` unfreezes it
  (`vllm.envs.disable_envs_cache`, vLLM's own reset) before each build; the build freezes it again.
- Rotary embeddings. `get_rope` caches one module per shape in the process-wide `_ROPE_DICT`, keyed without a
  device (vllm/model_executor/layers/rotary_embedding/__init__.py:29, 72-83): a second engine of the same model on
  another GPU would share the first one's module and its cos/sin cache. It is emptied before each build (vLLM empties
  it itself when a model runner shuts down), so each engine makes its own.
- Random numbers. A build reseeds the process's generators (vLLM's `set_random_seed`): `kept_random_state` restores
  ours, so a run samples and initializes the same with or without this backend.
- The end. Under ddp each rank's engines are built with vLLM's `external_launcher` executor, which joins the
  trainers' process group and makes its own groups from it; `close_engines` (cooprl.rollout.vllm_generation) shuts
  the engines down and `end_engine_groups` lets vLLM destroy its groups, before the trainers' process group is shut
  down.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import Any

import torch

DEVICE_CACHE_PREFIX = "cooprl-engines-on-"


@dataclass(frozen=True)
class EngineOptions:
    """What one in-process vLLM engine is built with (cooprl.rollout.vllm_generation.VLLMGenerator): `model_path` what
    vLLM loads at start (a hub id or folder with the trained model's architecture); `max_prompt_tokens` the prompts'
    bound, `max_model_len` prompt + completion's; `max_num_seqs` and `max_num_batched_tokens` (None: vLLM's defaults)
    what it runs in one step; `sampler_logprobs`: vLLM's log-prob of each sampled token kept; `adapter_dir` where the
    lora weight sync saves its adapters; `device` the agent's (None: where the model's weights are); `kv_cache_bytes`
    the KV cache in bytes (vLLM's kv_cache_memory_bytes; None: sized from `gpu_memory_utilization`)."""

    model_path: str
    max_prompt_tokens: int
    max_model_len: int
    chat_template: bool = False
    gpu_memory_utilization: float = 0.3
    seed: int = 0
    weight_sync: str = "merged"
    sleep: bool = False
    tensor_parallel_size: int = 1
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    sampler_logprobs: bool = False
    adapter_dir: str | None = None
    device: str | None = None
    kv_cache_bytes: int | None = None
    max_loras: int = 1   # a team's engine holds every agent's adapter (cooprl.rollout.vllm_team)


@dataclass(frozen=True)
class AgentEngine:
    """Which agent an engine samples for (cooprl.rollout.vllm_generation.build_vllm_generator): its model's path, its
    prompts' and completions' token budgets, the seed, its device (None: agent_model.device) and its name in errors."""

    model_path: str
    max_prompt_tokens: int
    max_new_tokens: int
    seed: int
    device: str | None = None
    name: str = "agent 0"


def engine_cache_root(device: str, cache_root: str | None = None) -> str:
    """Return the vLLM cache root of engines on `device` ('cuda:1', 'cpu'): `<root>/cooprl-engines-on-cuda1`, where
    `<root>` is `cache_root` (default: $VLLM_CACHE_ROOT, else vLLM's default $XDG_CACHE_HOME/vllm or ~/.cache/vllm,
    as vllm/envs.py computes it); a root that already is a device's own is replaced, not nested."""
    root = cache_root or os.environ.get("VLLM_CACHE_ROOT") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.join(os.path.expanduser("~"), ".cache")), "vllm")
    root = os.path.expanduser(root)
    if os.path.basename(root.rstrip(os.sep)).startswith(DEVICE_CACHE_PREFIX):
        root = os.path.dirname(root.rstrip(os.sep))
    return os.path.join(root, DEVICE_CACHE_PREFIX + device.replace(":", ""))


def _vllm_module(name: str) -> Any:
    """Return vLLM's module `name`, or None where this vLLM release has none."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def prepare_engine_build(device: str) -> str:
    """Before an engine for `device` is built: point vLLM's cache root at the device's own (`engine_cache_root`),
    make vLLM read its environment afresh, and empty its rotary-embedding cache (the module docstring says why);
    return the root the engine will use."""
    root = engine_cache_root(device)
    os.environ["VLLM_CACHE_ROOT"] = root
    envs = _vllm_module("vllm.envs")
    if envs is not None and hasattr(envs, "disable_envs_cache"):
        envs.disable_envs_cache()
    rotary = _vllm_module("vllm.model_executor.layers.rotary_embedding")
    if rotary is not None and hasattr(rotary, "_ROPE_DICT"):
        rotary._ROPE_DICT.clear()
    return root


def end_engine_groups() -> None:
    """After this process's engines were shut down: let vLLM destroy its model-parallel groups (which an
    `external_launcher` engine made from the trainers' process group), so that the process group can be shut down
    after."""
    state = _vllm_module("vllm.distributed.parallel_state")
    if state is not None and hasattr(state, "destroy_model_parallel"):
        state.destroy_model_parallel()


def engine_worker(llm: Any) -> Any:
    """Return the in-process engine's worker (`llm.llm_engine.model_executor.driver_worker.worker`), else None."""
    executor = getattr(getattr(llm, "llm_engine", None), "model_executor", None)
    return getattr(getattr(executor, "driver_worker", None), "worker", None)


def engine_model(llm: Any) -> Any:
    """Return the engine's torch model when it lives in this process at the path TRL's colocate mode uses, else None.

    `llm.llm_engine.model_executor.driver_worker.worker.model_runner.model`: V1 with
    VLLM_ENABLE_V1_MULTIPROCESSING=0 (and V0); older V0 releases have no `.worker` step.
    """
    executor = getattr(getattr(llm, "llm_engine", None), "model_executor", None)
    driver = getattr(executor, "driver_worker", None)
    for worker in (getattr(driver, "worker", None), driver):
        model = getattr(getattr(worker, "model_runner", None), "model", None)
        if model is not None and hasattr(model, "load_weights"):
            return model
    return None


class kept_random_state:
    """Restore Python's, NumPy's and torch's (CPU and CUDA) random states on exit, whatever ran inside (an engine's
    build reseeds them: vLLM's set_random_seed)."""

    def __enter__(self) -> None:
        import random

        import numpy
        self._states = (random.getstate(), numpy.random.get_state(), torch.get_rng_state(),
                        torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None)

    def __exit__(self, *exc: Any) -> None:
        import random

        import numpy
        python, numpy_state, cpu, cuda = self._states
        random.setstate(python)
        numpy.random.set_state(numpy_state)
        torch.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)
