"""What a vLLM engine gets of a trained model: its weights as they are now, LoRA merged in (`merged_weights`, for the
merged push), whether its adapters are on, its adapter's rank (the engine's LoRA slot) and the base weights an engine
loads (`base_weights`)."""

from __future__ import annotations

from typing import Any, Iterator

import torch


def base_weights(model: Any) -> Iterator[torch.nn.Parameter]:
    """Yield the weights of the model an engine loads: the base model's (with its adapters) for a LoRA model, also
    for an agent's view of a shared base (cooprl.models.shared_base), whose own parameters are its adapter's alone."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base.parameters()


def weights_dtype(model: Any) -> torch.dtype:
    """Return the dtype of the weights an engine computes with: the base model's (a view's adapter may be float32 on
    a bf16 base)."""
    return next(base_weights(model)).dtype


def merged_weights(model: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield (name, tensor) of the weights `model` uses right now, named as in its plain HF checkpoint.

    A plain model yields its state dict. A peft LoRA model yields its base model's weights with each adapted
    layer's weight replaced by base + delta (computed out of place: the trained model is not touched), the
    adapter tensors themselves left out; a layer whose adapters are disabled (`disable_adapter()`) yields
    its base weight. vLLM's `load_weights` expects exactly these names (it fuses q/k/v itself).
    """
    if not hasattr(model, "get_base_model"):
        yield from model.state_dict().items()
        return
    from peft.tuners.lora import LoraLayer

    base = model.get_base_model()
    layers = {name: module for name, module in base.named_modules() if isinstance(module, LoraLayer)}
    for name, tensor in base.state_dict().items():
        if ".lora_" in name:
            continue
        name = name.replace(".base_layer.", ".")
        owner, _, leaf = name.rpartition(".")
        layer = layers.get(owner)
        if layer is not None and leaf == "weight" and not layer.disable_adapters and not layer.merged:
            with torch.no_grad():
                for adapter in layer.active_adapters:
                    if adapter in layer.lora_A or adapter in getattr(layer, "lora_embedding_A", {}):
                        tensor = tensor + layer.get_delta_weight(adapter).to(tensor.dtype)
        yield name, tensor


def adapters_enabled(model: Any) -> bool:
    """Return False while a peft model's adapters are disabled (inside `disable_adapter()`), else True."""
    if not hasattr(model, "get_base_model"):
        return True
    from peft.tuners.lora import LoraLayer
    return not any(m.disable_adapters for m in model.get_base_model().modules() if isinstance(m, LoraLayer))


def lora_rank(model: Any) -> int | None:
    """Return the rank of a peft LoRA model's adapter (the largest over its layers), or None for a plain model."""
    config = getattr(model, "peft_config", None)
    if not config:
        return None
    adapter = next(iter(config.values()))
    return max([adapter.r, *getattr(adapter, "rank_pattern", {}).values()])
