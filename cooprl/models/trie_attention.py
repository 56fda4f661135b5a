"""Sparse attention over a token-trie row: each segment attends only to the segments on its own path.

`cooprl.models.logprobs` packs a batch of sequences that share prefixes into one row (a token trie). A dense L x L
mask over that row makes every layer's attention cost grow with the square of the whole row, although a token
only ever sees its own path (a few hundred tokens): on a 2-agent, 2-turn MAGRPO tree (~1,000 trie tokens,
SmolLM2-135M, 1 CPU thread) the masked dense attention was a quarter of the update's time. Here each segment
runs its own small attention, its queries against the keys of its ancestors (all visible) and its own
tokens (causal), so the work follows the path lengths instead of the row length.

It is written as an attention function of transformers' `AttentionInterface` (registered as
`TRIE_ATTENTION` when first switched on), switched on for one forward by `trie_attention(model, trie)`; the forward
must then be given a 4-D attention mask, which the model passes through untouched and this function ignores
(`PLACEHOLDER_MASK`). The autograd graph records the per-segment operations, so the backward needs no switch, except
where a layer is recomputed in the backward (gradient checkpointing): `checkpoint_contexts`, given to torch's
checkpoint as its `context_fn`, switches the same trie attention back on around the recomputation. No library offers
this for a prefix tree on CPU without compiling (flex attention needs `torch.compile`; varlen flash attention
separates whole sequences and cannot share a prefix), hence the hand-written loop. """

from __future__ import annotations

import contextlib
import contextvars
import functools
from dataclasses import dataclass
from typing import Any, Iterator

import torch
import torch.nn.functional as F

TRIE_ATTENTION = "cooprl_trie"


@dataclass(frozen=True)
class SegmentAttention:
    """One segment's attention: its query columns [start, end), its key columns, and its mask.

    `keys` is a slice when the path is one contiguous run of columns (no copy), else an index tensor.
    `mask` (bool, True = visible) is None for a segment without ancestors, which is plain causal attention.
    """

    start: int
    end: int
    keys: slice | torch.Tensor
    mask: torch.Tensor | None


def segment_plan(trie: Any, device: torch.device) -> list[SegmentAttention]:
    """Return the attention of every segment of `trie` (a `cooprl.models.logprobs.TokenTrie`), in column order."""
    plan = []
    for seg, ancestors in trie.segments:
        start, end = seg.start, seg.start + len(seg.tokens)
        runs = [(anc.start, anc.start + len(anc.tokens)) for anc in ancestors] + [(start, end)]
        contiguous = all(a_end == b_start for (_, a_end), (b_start, _) in zip(runs, runs[1:]))
        if contiguous:
            keys: slice | torch.Tensor = slice(runs[0][0], end)
        else:
            keys = torch.cat([torch.arange(a, b) for a, b in runs]).to(device)
        seen = sum(b - a for a, b in runs[:-1])
        mask = None
        if seen:
            n = end - start
            mask = torch.ones((n, seen + n), dtype=torch.bool).tril(diagonal=seen).to(device)
        plan.append(SegmentAttention(start, end, keys, mask))
    return plan


# Every masked segment's mask is exactly lower-right causal (its ancestors all visible, then its own tokens causal),
# so where flash attention takes the call (CUDA, half precision, sm80+: decided at run time by torch's own
# `can_use_flash_attention`, not by device type) a masked segment passes torch's `causal_lower_right` bias instead
# of a mask: flash's causal op, bottom-right aligned, grouped-query natively: no mask and no K/V repeat. Off: False.
LOWER_RIGHT_FOR_MASKS = True
# Where flash does not take it, device types whose SDPA would otherwise run a masked grouped-query call on its math
# kernel (its scores materialised; the slowest): on CUDA memory-efficient attention takes no `enable_gqa` (torch's
# sdp_utils.cpp), so there a masked segment gets its K/V heads repeated to the query heads (as transformers'
# `repeat_kv`): a plain masked call, which the memory-efficient kernel takes, with the same result (`enable_gqa` is
# defined as that repetition). Segments without a mask (causal) keep `enable_gqa`: flash takes it.
REPEAT_KV_FOR_MASKS = ("cuda",)

_PLAN: contextvars.ContextVar[list[SegmentAttention] | None] = contextvars.ContextVar("trie_plan", default=None)
# (plan, configs) of the `trie_attention` block in force, for `checkpoint_contexts`
_ACTIVE: contextvars.ContextVar[tuple[list[SegmentAttention], list[Any]] | None] = contextvars.ContextVar(
    "trie_active", default=None)

# What the model is given as its attention mask while the trie attention is on: a prepared 4-D mask is passed
# through to the attention function unchanged (so no dense mask is ever built), and this function ignores it.
PLACEHOLDER_MASK = torch.zeros((1, 1, 1, 1))


# Eight parameters: transformers calls an attention function with this signature (its AttentionInterface), so it
# stays as the library fixes it (tests/project/test_layers.py, MANY_PARAMETERS).
def trie_attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                           attention_mask: torch.Tensor | None, dropout: float = 0.0,
                           scaling: float | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """Attention of one layer over the trie row; returns (output [1, L, heads, head_dim], None).

    query is [1, heads, L, head_dim]; key and value are [1, kv_heads, L, head_dim] (grouped-query attention
    when kv_heads < heads)."""
    plan = _PLAN.get()
    if plan is None:
        raise RuntimeError(f"the {TRIE_ATTENTION!r} attention runs only inside `trie_attention(model, trie)`")
    groups = query.shape[1] // key.shape[1]   # query heads per K/V head (1: no grouped-query attention)
    kernel = masked_kernel(query.device.type, groups > 1, _flash_takes(query, key, value, dropout, groups > 1))
    outputs = []
    for seg in plan:
        q = query[:, :, seg.start:seg.end]
        if isinstance(seg.keys, slice):
            k, v = key[:, :, seg.keys], value[:, :, seg.keys]
        else:
            k, v = key.index_select(2, seg.keys), value.index_select(2, seg.keys)
        gqa, mask = groups > 1, seg.mask
        if mask is not None and kernel == "lower_right":   # see LOWER_RIGHT_FOR_MASKS
            n = seg.end - seg.start
            mask = causal_lower_right(n, mask.shape[1])
        elif mask is not None and kernel == "repeat":   # see REPEAT_KV_FOR_MASKS
            k, v, gqa = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1), False
        outputs.append(F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=mask is None, scale=scaling, enable_gqa=gqa))
    return torch.cat(outputs, dim=2).transpose(1, 2).contiguous(), None


def masked_kernel(device_type: str, gqa: bool, flash_takes: bool) -> str:
    """Return how the masked segments of one attention call run: "lower_right" (torch's lower-right causal bias: no
    mask, no K/V repeat) where flash takes the call, "repeat" (K/V heads repeated, a plain masked call) for a
    grouped-query call on a REPEAT_KV_FOR_MASKS device, else "mask" (the bool mask as it is; on the CPU torch would
    materialise the bias into it anyway)."""
    if flash_takes and LOWER_RIGHT_FOR_MASKS:
        return "lower_right"
    return "repeat" if gqa and device_type in REPEAT_KV_FOR_MASKS else "mask"


def _flash_takes(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, dropout: float, gqa: bool) -> bool:
    """Return whether torch's flash attention kernel takes a causal call of these tensors (never on the CPU)."""
    if query.device.type != "cuda":
        return False
    from torch.backends.cuda import SDPAParams, can_use_flash_attention
    return can_use_flash_attention(SDPAParams(query, key, value, None, dropout, True, gqa))


def causal_lower_right(queries: int, keys: int) -> Any:
    """Return torch's lower-right causal bias of `queries` x `keys` (query i sees keys up to keys - queries + i)."""
    from torch.nn.attention.bias import causal_lower_right as bias
    return bias(queries, keys)


@functools.cache
def _registered() -> None:
    """Register `trie_attention_forward` with transformers as `TRIE_ATTENTION`, once, when it is first switched on:
    importing transformers' attention interface loads its whole modeling stack (~2 s), which a process that stops
    before loading a model (a refused resume, a bad init_from) should not pay."""
    from transformers import AttentionInterface
    AttentionInterface.register(TRIE_ATTENTION, trie_attention_forward)


@contextlib.contextmanager
def trie_attention(model: Any, trie: Any) -> Iterator[None]:
    """Within the block, `model`'s forward attends over `trie`'s row with the sparse per-segment attention.

    The model's configs (every distinct one among its modules, through peft wrappers) get the attention
    implementation `TRIE_ATTENTION` and get their own back on exit, even on an error."""
    device = next(model.parameters()).device
    configs = list({id(c): c for c in (getattr(m, "config", None) for m in model.modules())
                    if c is not None and hasattr(c, "_attn_implementation")}.values())
    with _switched_on(segment_plan(trie, device), configs):
        yield


@contextlib.contextmanager
def _switched_on(plan: list[SegmentAttention], configs: list[Any]) -> Iterator[None]:
    """Within the block, `configs` select the trie attention over `plan`; their own attention is back on exit."""
    _registered()
    previous = [c._attn_implementation for c in configs]
    token, active = _PLAN.set(plan), _ACTIVE.set((plan, configs))
    try:
        for c in configs:
            c._attn_implementation = TRIE_ATTENTION
        yield
    finally:
        for c, attention in zip(configs, previous):
            c._attn_implementation = attention
        _ACTIVE.reset(active)
        _PLAN.reset(token)


def checkpoint_contexts() -> tuple[contextlib.AbstractContextManager, contextlib.AbstractContextManager]:
    """Return (forward context, recomputation context) for `torch.utils.checkpoint.checkpoint(context_fn=...)`.

    A layer checkpointed inside a `trie_attention` block is recomputed in the backward, after the block ended:
    the recomputation context switches the same trie attention (plan and configs, captured now, at the forward)
    back on for it. Outside a block both are no-ops."""
    active = _ACTIVE.get()
    if active is None:
        return contextlib.nullcontext(), contextlib.nullcontext()
    return contextlib.nullcontext(), _switched_on(*active)
