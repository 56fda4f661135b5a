"""GPU memory of a run that samples with vLLM, counted per GPU before any model loads (`check_vllm_memory`).

A vLLM engine reserves its memory at start, whatever the trainer will need later: with vLLM's own sizing,
`gpu_memory_utilization` x the whole GPU (vllm/v1/worker/utils.py `request_memory`; its KV cache is that minus its
weights and activation peak, vllm/v1/worker/gpu_worker.py); with `kv_cache_memory_bytes` (vLLM >= 0.27), its weights,
its activation peak and exactly that KV cache. The trainer's states arrive at the first update, so a run that does
not fit builds and compiles its engines and then dies there. So the check counts, per GPU:

- each trained model (agents, separate critics): weights, gradients and the optimizer's states, in bytes per
  parameter of what `cooprl.update.optim.build_adamw` really keeps (measured on a small tensor,
  `optimizer_state_bytes`);
  with LoRA, the frozen weights plus float32 adapters (peft upcasts them), their gradients and AdamW states;
- each frozen full copy (a reference model for `reference_kl_coef` > 0 or madpo's `reference_model` without LoRA);
- each engine: `vllm_kv_cache_bytes` (vLLM's `kv_cache_memory_bytes`; null: `default_kv_cache_bytes`, sized from the
  run) plus its copy of the weights, or, with `vllm_kv_cache_bytes: 0`, `vllm_gpu_memory_utilization` x the GPU.

Activations, the CUDA context and vLLM's activation peak come on top, so the sum must stay within
`MEMORY_SHARE` of the GPU. Parameter counts come from the model's config, built on the meta device (no weights).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from cooprl.config import ActorCriticSection, ConfigError, MADPOSection, MAGRPOSection, TrainerSection, model_devices
from cooprl.models.loading import pick_dtype, resolve_model_path
from cooprl.parallel.context import Parallel
from cooprl.rollout import vllm_platform   # not its engine_devices: memory_accounts' argument has that name
from cooprl.update.optim import build_adamw

GIB = 1 << 30
MEMORY_SHARE = 0.9          # of a GPU the counted states may take; the rest is for activations and the CUDA context
VLLM_BLOCK_TOKENS = 16      # vLLM's KV cache block: a sequence holds whole blocks
LORA_DTYPE = torch.float32  # peft keeps LoRA adapters in float32 over frozen low-precision weights
EVAL_SEQUENCES = 64         # the default KV cache of an evaluation's engine holds this many max-length sequences


@dataclass(frozen=True)
class ModelShape:
    """What the count needs of a model: its distinct parameters, its LoRA parameters for the given adapters (0
    without), and its KV cache elements per token (layers x 2 x KV heads x head size)."""

    parameters: int
    lora_parameters: int
    kv_elements_per_token: int


def kv_elements_per_token(config: Any) -> int:
    """Return the KV cache elements one token takes in a model of HF config `config`: layers x 2 (K and V) x KV
    heads x head size."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    head_size = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    kv_heads = getattr(text, "num_key_value_heads", None) or text.num_attention_heads
    return text.num_hidden_layers * 2 * kv_heads * head_size


@functools.lru_cache(maxsize=16)
def _model_shape(path: str, lora_rank: int, lora_targets: tuple[str, ...]) -> ModelShape:
    from transformers import AutoConfig, AutoModelForCausalLM
    config = AutoConfig.from_pretrained(path)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    parameters = sum(p.numel() for p in model.parameters())   # tied embeddings once
    lora = sum(lora_rank * (m.in_features + m.out_features) for name, m in model.named_modules()
               if isinstance(m, torch.nn.Linear) and name.rpartition(".")[2] in lora_targets)
    return ModelShape(parameters, lora, kv_elements_per_token(config))


def model_shape(name: str, lora: Any = None) -> ModelShape:
    """Return the ModelShape of model `name` (hub id, folder or embedded model) with LoRA adapters `lora` (a
    LoraSection, or None), read from its config without loading weights."""
    rank, targets = (lora.r, tuple(lora.target_modules)) if lora is not None else (0, ())
    return _model_shape(resolve_model_path(name), rank, targets)


@functools.lru_cache(maxsize=8)
def optimizer_state_bytes(dtype: torch.dtype, bf16_optimizer: str) -> int:
    """Return the bytes of optimizer state per trained parameter of `dtype` that `build_adamw` keeps (with
    `bf16_optimizer`), measured: one step on a small tensor, its per-element states added up."""
    weight = torch.nn.Parameter(torch.zeros(64, dtype=dtype))
    optimizer = build_adamw([weight], lr=1e-3, bf16_optimizer=bf16_optimizer)
    weight.grad = torch.ones_like(weight)
    optimizer.step()
    states = optimizer.state[weight].values()
    return sum(t.element_size() for t in states if torch.is_tensor(t) and t.numel() == weight.numel())


def gpu_name(device: str) -> str:
    """Return `device` with a CUDA GPU named by its index ('cuda' and 'auto' with CUDA: torch's current one)."""
    if device == "auto":   # as cooprl.models.loading.pick_device
        device = "cuda" if torch.cuda.is_available() else "cpu"
    chosen = torch.device(device)
    if chosen.type != "cuda":
        return str(chosen)
    return f"cuda:{torch.cuda.current_device() if chosen.index is None else chosen.index}"


def on_gpu(device: str) -> bool:
    """Return whether `device` is a CUDA GPU (after `gpu_name`)."""
    return gpu_name(device).startswith("cuda")


def _size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def trained_model_bytes(shape: ModelShape, dtype: torch.dtype, lora: bool, bf16_optimizer: str) -> int:
    """Return the bytes a trained model holds: weights, gradients and optimizer states (full fine-tuning), or frozen
    weights plus float32 LoRA adapters with their gradients and AdamW states."""
    if lora:
        adapter = _size(LORA_DTYPE) * 2 + optimizer_state_bytes(LORA_DTYPE, bf16_optimizer)
        return shape.parameters * _size(dtype) + shape.lora_parameters * adapter
    return shape.parameters * (2 * _size(dtype) + optimizer_state_bytes(dtype, bf16_optimizer))


def engine_max_len(model_cfg: Any, max_new_tokens: int) -> int:
    """Return an engine's max_model_len: prompt (agent_model.max_length - new tokens, at least 8) + new tokens."""
    return max(model_cfg.max_length, max(model_cfg.max_length - max_new_tokens, 8) + max_new_tokens)


def default_kv_cache_bytes(model_cfg: Any, section: TrainerSection | None, max_new_tokens: int, kv_elements: int,
                           dtype: torch.dtype) -> int:
    """Return the KV cache an engine gets when `vllm_kv_cache_bytes` is null: the run's largest sampling call, i.e.
    prompts (eval_batch_size, else 1) x samples per prompt (the larger of num_generations and eval_num_generations)
    sequences of max_model_len tokens (whole vLLM blocks), at `kv_elements` per token of `dtype`; without a trainer
    section (evaluation), EVAL_SEQUENCES sequences. vLLM queues what does not fit, so a smaller cache costs speed,
    not results."""
    if section is None:
        sequences = EVAL_SEQUENCES
    else:
        generations = section.num_generations if isinstance(section, (MAGRPOSection, ActorCriticSection)) else 1
        samples = max(generations, section.eval_num_generations)
        sequences = (section.eval_batch_size or 1) * samples
    tokens = math.ceil(engine_max_len(model_cfg, max_new_tokens) / VLLM_BLOCK_TOKENS) * VLLM_BLOCK_TOKENS
    return sequences * tokens * kv_elements * _size(dtype)


def engine_kv_cache_bytes(model_cfg: Any, section: TrainerSection | None, max_new_tokens: int, kv_elements: int,
                          dtype: torch.dtype) -> int | None:
    """Return the KV cache bytes to give an engine (vLLM's kv_cache_memory_bytes): `vllm_kv_cache_bytes`, or
    `default_kv_cache_bytes` when it is null; None (vLLM sizes it from `vllm_gpu_memory_utilization`) when it is 0."""
    if model_cfg.vllm_kv_cache_bytes == 0:
        return None
    if model_cfg.vllm_kv_cache_bytes is not None:
        return model_cfg.vllm_kv_cache_bytes
    return default_kv_cache_bytes(model_cfg, section, max_new_tokens, kv_elements, dtype)


def gpu_total_bytes(device: str) -> int:
    """Return the memory of CUDA device `device` ('cuda:N') in bytes."""
    return torch.cuda.get_device_properties(torch.device(device)).total_memory


@dataclass
class DeviceAccount:
    """The counted bytes on one GPU, by what holds them (for the error's figures)."""

    items: list[tuple[str, int]]

    def total(self) -> int:
        """Return the bytes of every item."""
        return sum(size for _, size in self.items)

    def describe(self) -> str:
        """Return the items as 'what X.X GiB' joined by ' + '."""
        return " + ".join(f"{what} {size / GIB:.1f} GiB" for what, size in self.items)


def memory_accounts(config: Any, trainer: str | None, section: TrainerSection | None, max_new_tokens: int,
                    agent_devices: Sequence[str],
                    engine_devices: Sequence[Sequence[str]], critic_devices: Sequence[str] = ()
                    ) -> dict[str, DeviceAccount]:
    """Return, per CUDA device, what a run holds there: each agent on `agent_devices[i]` (trained by `trainer`'s
    `section`, or weights only, as in evaluation, when `trainer` is None), its engine on `engine_devices[i]` (one
    device, or T shards), its frozen reference, and the separate critics on `critic_devices`."""
    if not any(map(on_gpu, [*agent_devices, *(d for shards in engine_devices for d in shards), *critic_devices])):
        return {}   # CPU runs: nothing to count
    model_cfg = config.agent_model
    names = list(config.agents) if config.agents is not None else [model_cfg.name] * len(agent_devices)
    accounts: dict[str, DeviceAccount] = {}

    def add(device: str, what: str, size: int) -> None:
        if on_gpu(device):
            accounts.setdefault(gpu_name(device), DeviceAccount([])).items.append((what, size))

    for i, (name, device) in enumerate(zip(names, agent_devices)):
        dtype = pick_dtype(model_cfg.torch_dtype, torch.device(gpu_name(device)))
        shape = model_shape(name, model_cfg.lora)
        weights = shape.parameters * _size(dtype)
        if trainer is None:
            add(device, f"agent {i} weights", weights)
        else:
            add(device, f"agent {i} (weights, gradients, optimizer)",
                trained_model_bytes(shape, dtype, model_cfg.lora is not None, model_cfg.bf16_optimizer))
            reference_model = isinstance(section, MADPOSection) and section.reference_model
            if model_cfg.lora is None and (section.reference_kl_coef > 0 or reference_model):
                add(device, f"agent {i} reference", weights)
        kv = engine_kv_cache_bytes(model_cfg, section, max_new_tokens, shape.kv_elements_per_token, dtype)
        shards = engine_devices[i]
        for shard in filter(on_gpu, shards):
            if kv is None:
                reserved = int(model_cfg.vllm_gpu_memory_utilization * gpu_total_bytes(shard))
                add(shard, f"engine {i} (vllm_gpu_memory_utilization {model_cfg.vllm_gpu_memory_utilization})",
                    reserved)
            else:
                add(shard, f"engine {i} (weights + KV cache {kv / GIB:.2f} GiB)", weights // len(shards) + kv)
    for c, device in enumerate(critic_devices):
        name = (config.critics[c] if config.critics is not None else config.critic_model.name) or names[c]
        dtype = pick_dtype(config.critic_model.torch_dtype, torch.device(gpu_name(device)))
        add(device, f"critic {c} (weights, gradients, optimizer)",
            trained_model_bytes(model_shape(name, config.critic_model.lora), dtype,
                                config.critic_model.lora is not None,
                                model_cfg.bf16_optimizer))
    return accounts


def check_accounts(accounts: dict[str, DeviceAccount], trainer: str | None) -> None:
    """ConfigError, with the figures and the keys to change, when what a GPU would hold exceeds MEMORY_SHARE of it."""
    for device, account in accounts.items():
        total, limit = account.total(), MEMORY_SHARE * gpu_total_bytes(device)
        if total <= limit:
            continue
        fixes = ("agent_model.vllm_kv_cache_bytes (the KV cache per engine in bytes; 0 sizes it by "
                 "agent_model.vllm_gpu_memory_utilization instead, which to lower then)")
        if trainer is not None:
            fixes += (", agent_model.lora (train adapters only), agent_model.bf16_optimizer=pure, or more GPUs "
                      f"({trainer}.parallel_training mp with one GPU per agent, or fsdp without vLLM)")
        raise ConfigError(f"GPU memory: {device} would hold {total / GIB:.1f} GiB before any activation, more than "
                          f"{MEMORY_SHARE:.0%} of its {gpu_total_bytes(device) / GIB:.1f} GiB: {account.describe()}; "
                          f"change {fixes}")


def check_vllm_memory(config: Any, agent_devices: Sequence[str], run: Any = None,
                      max_new_tokens: int | None = None) -> None:
    """ConfigError when the models and vLLM engines of a run (`run`, a cooprl.config.Run; None: an evaluation's agents,
    untrained) on `agent_devices` would not fit their GPUs (`memory_accounts`, `check_accounts`); called before any
    model loads."""
    section = run.section if run is not None else None
    if max_new_tokens is None:
        max_new_tokens = section.max_new_tokens
    shards = config.agent_model.vllm_tensor_parallel_size
    engines = [vllm_platform.engine_devices(device, shards) for device in agent_devices]
    critics: list[str] = []
    if isinstance(section, ActorCriticSection) and section.use_separate_critic:   # one per agent, MAAC's one
        count = 1 if run.trainer == "maac" else len(agent_devices)
        critics = Parallel.devices(model_devices(section.critic_devices, "critic_devices", count,
                                                 config.agent_model.device))
    trainer = run.trainer if run is not None else None
    accounts = memory_accounts(config, trainer, section, max_new_tokens, agent_devices, engines, critics)
    check_accounts(accounts, trainer)
