"""What a model and a vLLM engine hold in GPU memory, counted from the model's config alone (no weights): the
parts of `cooprl.rollout.memory_plan`, which adds them up per GPU before any model loads.

A vLLM engine reserves its memory at start, whatever the trainer will need later: with vLLM's own sizing,
`gpu_memory_utilization` x the whole GPU (vllm/v1/worker/utils.py `request_memory`; its KV cache is that minus its
weights and activation peak, vllm/v1/worker/gpu_worker.py); with `kv_cache_memory_bytes` (vLLM >= 0.27), its weights,
its activation peak and exactly that KV cache, and then `gpu_memory_utilization` is only the free memory vLLM
requires at the engine's start (`engine_memory_utilization` sets it to what the engine takes). Counted here:

- a model's shape (`model_shape`): its parameters (on the meta device), LoRA parameters, KV cache per token and the
  sizes its activations follow, from a local folder's config.json, the shipped fields of the models the configs name
  (cooprl/models/model_shapes.json: the plan needs no hub), or the hub's config.json;
- a trained model's weights, gradients and optimizer states, in bytes per parameter of what
  `cooprl.update.optim.build_adamw` keeps (`optimizer_state_bytes`; the Kahan buffer's dtype in `kahan_buffer_bytes`);
  with LoRA, the frozen weights plus float32 adapters (peft upcasts them), their gradients and AdamW states;
- an engine's KV cache: `vllm_kv_cache_bytes` (vLLM's `kv_cache_memory_bytes`; null: `default_kv_cache_bytes`, sized
  from the run).
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from cooprl.config import ActorCriticSection, ConfigError, MAGRPOSection, TrainerSection
from cooprl.models.loading import pick_device, resolve_model_path
from cooprl.rollout.vllm_weights import base_weights

GIB = 1 << 30
VLLM_BLOCK_TOKENS = 16      # vLLM's KV cache block: a sequence holds whole blocks
LORA_DTYPE = torch.float32  # peft keeps LoRA adapters in float32 over frozen low-precision weights
BATCHED_TOKENS = 4096       # the most tokens an engine processes in one step by default (TRL's cap)
ENGINE_OVERHEAD_BYTES = 1 << 30  # a vLLM engine beyond weights and KV cache: its CUDA graphs and activation peak
EVAL_SEQUENCES = 64         # the default KV cache of an evaluation's engine holds this many max-length sequences


@dataclass(frozen=True)
class ModelShape:
    """What the memory plan needs of a model: its distinct parameters (`vector_parameters` of them in 1-D tensors:
    norms, biases), its LoRA parameters for the given adapters (0 without), its KV cache elements per token (layers x
    2 x KV heads x head size), and the sizes its activations follow (`cooprl.rollout.memory_plan`)."""

    parameters: int
    lora_parameters: int
    kv_elements_per_token: int
    vector_parameters: int = 0
    layers: int = 0
    hidden: int = 0
    intermediate: int = 0
    heads: int = 0
    kv_dim: int = 0            # KV heads x head size
    vocab: int = 0


# the layers vLLM gives LoRA buffers in a Llama/Qwen2-style model (its LoRA-capable linear layers, whatever an
# adapter targets: a module the adapter leaves out gets zeros)
VLLM_LORA_LAYERS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def lora_slots_bytes(name: str, slot_rank: int, slots: int, dtype: torch.dtype, offline: bool = False) -> int:
    """Return what an engine with LoRA (vLLM's enable_lora) preallocates for `slots` adapters (its max_loras) of rank
    `slot_rank` (its max_lora_rank) in `dtype`: A and B of every LoRA-capable layer (`VLLM_LORA_LAYERS`) per slot."""
    return slots * _model_shape(name, slot_rank, VLLM_LORA_LAYERS, offline).lora_parameters * _size(dtype)


def kv_elements_per_token(config: Any) -> int:
    """Return the KV cache elements one token takes in a model of HF config `config`: layers x 2 (K and V) x KV
    heads x head size."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return text.num_hidden_layers * 2 * _kv_dim(text)


def _kv_dim(text: Any) -> int:
    head_size = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    return (getattr(text, "num_key_value_heads", None) or text.num_attention_heads) * head_size


# config.json fields of the models the shipped configs name: their plan needs no hub (`--memory-plan` offline)
SHIPPED_SHAPES = Path(__file__).resolve().parent.parent / "models" / "model_shapes.json"


@functools.lru_cache(maxsize=1)
def shipped_shapes() -> dict[str, dict[str, Any]]:
    """Return the shipped config.json fields by model name (cooprl/models/model_shapes.json)."""
    return json.loads(SHIPPED_SHAPES.read_text(encoding="utf-8"))["models"]


def model_config(name: str, offline: bool = False) -> Any:
    """Return the HF config of model `name` without its weights: a local folder's config.json, else the shipped
    fields (`shipped_shapes`), else the hub's config.json (with `offline`, only from the local HF cache). ConfigError
    when offline and none of these has it, saying how to give the shape."""
    from transformers import AutoConfig
    if Path(name).expanduser().is_dir():
        return AutoConfig.from_pretrained(str(Path(name).expanduser()))
    fields = shipped_shapes().get(name)
    if fields is not None:
        return AutoConfig.for_model(**fields)
    if not offline:
        return AutoConfig.from_pretrained(resolve_model_path(name))
    try:
        return AutoConfig.from_pretrained(name, local_files_only=True)
    except (OSError, ValueError) as err:
        raise ConfigError(f"memory plan: the shape of model {name!r} is not known offline ({type(err).__name__}): the "
                          f"project ships {', '.join(shipped_shapes())}; give a local folder holding its config.json "
                          "(agent_model.name=/path/to/folder; no weights needed), or fetch it once into the HF "
                          f"cache (huggingface-cli download {name} config.json)") from None


@functools.lru_cache(maxsize=16)
def _model_shape(name: str, lora_rank: int, lora_targets: tuple[str, ...], offline: bool) -> ModelShape:
    from transformers import AutoModelForCausalLM
    config = model_config(name, offline)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    distinct = {id(p): p for p in model.parameters()}.values()   # tied embeddings once
    lora = sum(lora_rank * (m.in_features + m.out_features) for module_name, m in model.named_modules()
               if isinstance(m, torch.nn.Linear) and module_name.rpartition(".")[2] in lora_targets)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return ModelShape(sum(p.numel() for p in distinct), lora, kv_elements_per_token(config),
                      vector_parameters=sum(p.numel() for p in distinct if p.dim() <= 1),
                      layers=text.num_hidden_layers, hidden=text.hidden_size, intermediate=text.intermediate_size,
                      heads=text.num_attention_heads, kv_dim=_kv_dim(text), vocab=text.vocab_size)


def model_shape(name: str, lora: Any = None, offline: bool = False) -> ModelShape:
    """Return the ModelShape of model `name` (hub id, folder or embedded model) with LoRA adapters `lora` (a
    LoraSection, or None), read from its config (`model_config`; `offline`: never the network) without weights."""
    rank, targets = (lora.r, tuple(lora.target_modules)) if lora is not None else (0, ())
    return _model_shape(name, rank, targets, offline)


# KahanAdamW's compensation buffer (cooprl.update.optim): float32 for 1-D parameters (norm gains, biases, where a bf16
# buffer saturates: gpu-review-3 finding 1), the weights' dtype for the others. The one place to change if it moves.
KAHAN_BUFFER_FLOAT32_1D = True


def kahan_buffer_bytes(dtype: torch.dtype, vector: bool) -> int:
    """Return the bytes per weight of KahanAdamW's compensation buffer for a parameter of `dtype` (`vector`: 1-D)."""
    return 4 if vector and KAHAN_BUFFER_FLOAT32_1D else _size(dtype)


def optimizer_state_bytes(dtype: torch.dtype, bf16_optimizer: str, vector: bool = False) -> int:
    """Return the bytes of optimizer state per trained parameter of `dtype` that `build_adamw` keeps (with
    `bf16_optimizer`; `vector`: a 1-D parameter): KahanAdamW's first moment in the weights' dtype, its second moment in
    float32 and its compensation buffer (`kahan_buffer_bytes`); torch's AdamW two moments in the weights' dtype."""
    if dtype == torch.bfloat16 and bf16_optimizer == "kahan":
        return _size(dtype) + 4 + kahan_buffer_bytes(dtype, vector)
    return 2 * _size(dtype)


def gpu_name(device: str) -> str:
    """Return `device` with a CUDA GPU named by its index ('cuda' and 'auto' with CUDA: torch's current one)."""
    if device == "auto":   # as cooprl.models.loading.pick_device
        device = "cuda" if torch.cuda.is_available() else "cpu"
    chosen = torch.device(device)
    if chosen.type != "cuda":
        return str(chosen)
    if chosen.index is not None:
        return f"cuda:{chosen.index}"
    # (a machine without CUDA: torch's current_device asserts; the device check names the problem later)
    return f"cuda:{torch.cuda.current_device() if torch.cuda.is_available() else 0}"


def on_gpu(device: str) -> bool:
    """Return whether `device` is a CUDA GPU (after `gpu_name`)."""
    return gpu_name(device).startswith("cuda")


def _size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def weight_bytes(shape: ModelShape, dtype: torch.dtype) -> int:
    """Return the bytes of a model's weights in `dtype`."""
    return shape.parameters * _size(dtype)


def trained_bytes(shape: ModelShape, dtype: torch.dtype, lora: bool) -> int:
    """Return the bytes of what a model trains: its weights (full fine-tuning) or its float32 LoRA adapters (the
    size of its gradients, too)."""
    return shape.lora_parameters * _size(LORA_DTYPE) if lora else weight_bytes(shape, dtype)


def optimizer_bytes(shape: ModelShape, dtype: torch.dtype, lora: bool, bf16_optimizer: str) -> int:
    """Return the bytes of optimizer state a trained model keeps (`optimizer_state_bytes` per trained parameter;
    with LoRA, its float32 adapters' AdamW moments plus the adapters themselves)."""
    if lora:
        return shape.lora_parameters * (_size(LORA_DTYPE) + optimizer_state_bytes(LORA_DTYPE, bf16_optimizer))
    matrices = shape.parameters - shape.vector_parameters
    return (matrices * optimizer_state_bytes(dtype, bf16_optimizer)
            + shape.vector_parameters * optimizer_state_bytes(dtype, bf16_optimizer, vector=True))


def trained_model_bytes(shape: ModelShape, dtype: torch.dtype, lora: bool, bf16_optimizer: str) -> int:
    """Return the bytes a trained model holds during its update: weights, gradients and optimizer states (full
    fine-tuning), or frozen weights plus float32 LoRA adapters with their gradients and AdamW states."""
    return (weight_bytes(shape, dtype) + trained_bytes(shape, dtype, lora)
            + optimizer_bytes(shape, dtype, lora, bf16_optimizer))


def engine_max_len(model_cfg: Any, max_new_tokens: int) -> int:
    """Return an engine's max_model_len: prompt (agent_model.max_length - new tokens, at least 8) + new tokens."""
    return max(model_cfg.max_length, max(model_cfg.max_length - max_new_tokens, 8) + max_new_tokens)


def largest_call_sequences(section: TrainerSection | None) -> int:
    """Return the most sequences one sampling call of the run holds: a training turn after the first samples its G
    child nodes x G samples in one call (cooprl.rollout.tree), the first turn G; an evaluation call its batch
    (eval_batch_size; null: all eval_num_samples problems at once) x eval_num_generations; without a trainer section
    (evaluation), EVAL_SEQUENCES."""
    if section is None:
        return EVAL_SEQUENCES
    generations = section.num_generations if isinstance(section, (MAGRPOSection, ActorCriticSection)) else 1
    training = generations ** 2 if section.num_turns > 1 else generations
    evaluation = (section.eval_batch_size or section.eval_num_samples) * section.eval_num_generations
    return max(training, evaluation)


def default_kv_cache_bytes(model_cfg: Any, section: TrainerSection | None, max_new_tokens: int, kv_elements: int,
                           dtype: torch.dtype) -> int:
    """Return the KV cache an engine gets when `vllm_kv_cache_bytes` is null: the run's largest sampling call
    (`largest_call_sequences`) of max_model_len tokens each (whole vLLM blocks), at `kv_elements` per token of
    `dtype`. vLLM queues what does not fit, so a smaller cache costs speed, not results."""
    tokens = math.ceil(engine_max_len(model_cfg, max_new_tokens) / VLLM_BLOCK_TOKENS) * VLLM_BLOCK_TOKENS
    return largest_call_sequences(section) * tokens * kv_elements * _size(dtype)


def engine_batch_limits(model_cfg: Any, section: TrainerSection | None, max_model_len: int) -> tuple[int, int]:
    """Return vLLM's (max_num_seqs, max_num_batched_tokens) for an engine: `vllm_max_num_seqs` and
    `vllm_max_num_batched_tokens` when set, else the run's largest call (`largest_call_sequences`) and its tokens
    capped at BATCHED_TOKENS (never below one whole sequence). vLLM's own defaults (1,024 sequences, 16,384 tokens
    on an H100) size its profile run, sampler warm-up and CUDA-graph capture for batches this run never makes."""
    sequences = largest_call_sequences(section)
    seqs = model_cfg.vllm_max_num_seqs or sequences
    tokens = model_cfg.vllm_max_num_batched_tokens or max(min(sequences * max_model_len, BATCHED_TOKENS), max_model_len)
    return seqs, tokens


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
    """Return the memory of CUDA device `device` ('cuda:N') in bytes; ModelError, naming it, for a CUDA device this
    machine does not have (as loading a model there would say)."""
    return torch.cuda.get_device_properties(pick_device(device)).total_memory


def engine_utilization(model_cfg: Any, model: Any, kv_cache_bytes: int | None, device: str) -> float:
    """Return the gpu_memory_utilization an engine of `model` on `device` asks vLLM for: the key's share, or, for a KV
    cache given in bytes on a GPU, what the engine takes (vLLM requires utilization x the GPU free at the engine's
    start even then: the key's default share could fail where the plan fits; gpu-review-3, finding 8)."""
    if kv_cache_bytes is None or not on_gpu(device):
        return model_cfg.vllm_gpu_memory_utilization
    weights = sum(p.numel() * p.element_size() for p in base_weights(model)) // model_cfg.vllm_tensor_parallel_size
    return engine_memory_utilization(weights, kv_cache_bytes, gpu_total_bytes(gpu_name(device)))


def engine_memory_utilization(weights: int, kv_cache: int, total: int) -> float:
    """Return the gpu_memory_utilization to give an engine whose KV cache is `kv_cache` bytes, with `weights` bytes
    of weights, on a GPU of `total` bytes: what it takes (weights + KV cache + the plan's engine overhead) as a share
    of the GPU, which vLLM requires free at the engine's start (within vLLM's bounds 0.01 to 0.95)."""
    return min(0.95, max(0.01, round((weights + kv_cache + ENGINE_OVERHEAD_BYTES) / total + 0.005, 2)))
