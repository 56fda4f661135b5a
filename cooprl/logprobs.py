"""Per-token log-probs of completions under a causal LM: one batched forward for a whole group.

Two layouts, chosen by `completion_logprobs`, give the same numbers up to float noise:

- padded (every prompt distinct): prompts left-padded to a common width P, completions right-padded to a
  common width C, so every completion starts at column P. Position ids come from the attention mask, which
  makes a padded row give the same numbers as that row alone.
- packed (some prompts shared, e.g. the G sibling samples of a GRPO group): one row per distinct prompt,
  holding the prompt once followed by all its completions back to back. A 4-D attention mask lets each
  completion see the prompt and, causally, itself, never the other completions; its position ids restart
  at len(prompt), so each completion is computed exactly as if it followed the prompt alone. The prompt is
  run once instead of once per sample, in the forward and in the backward: with G = 4 and turn-2 prompts
  that hold the previous answer, that is 2-3x fewer tokens. Prompts are still left-padded to a common
  width P, so that every row's completions start at column P and one `logits_to_keep` covers them all.

The mask is written by hand rather than through transformers' packed-sequence support: that support
(`position_ids` restarting at 0) separates whole sequences, it cannot let several segments share one
prefix. A custom 4-D mask is passed through unchanged by transformers' mask creation, and the eager and
SDPA attentions both add it to the scores; other attention implementations (flash attention ignores
4-D masks) get the padded layout.

Only the logits of the positions that predict completion tokens are materialized, and padding after a
completion's end is masked out of every sum.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

# Attention implementations that add a custom 4-D mask to the attention scores.
_MASK_4D_ATTENTIONS = ("eager", "sdpa")


def pad_group(prompts: Sequence[torch.Tensor], completions: Sequence[torch.Tensor], pad_id: int
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """Return (input_ids, attention_mask, completion_mask, P): the padded batch and the completion start."""
    width_p = max(len(p) for p in prompts)
    width_c = max(max(len(c) for c in completions), 1)
    batch = len(prompts)
    input_ids = torch.full((batch, width_p + width_c), pad_id, dtype=torch.long)
    attention = torch.zeros_like(input_ids)
    completion_mask = torch.zeros((batch, width_c), dtype=torch.float32)
    for row, (p, c) in enumerate(zip(prompts, completions)):
        input_ids[row, width_p - len(p):width_p] = p
        input_ids[row, width_p:width_p + len(c)] = c
        attention[row, width_p - len(p):width_p + len(c)] = 1
        completion_mask[row, :len(c)] = 1.0
    return input_ids, attention, completion_mask, width_p


def group_by_prompt(prompts: Sequence[torch.Tensor]) -> list[list[int]]:
    """Return the indices of `prompts` grouped by identical token ids, groups in order of first appearance."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, p in enumerate(prompts):
        groups.setdefault(tuple(p.tolist()), []).append(i)
    return list(groups.values())


def completion_logprobs(model: Any, prompts: Sequence[torch.Tensor], completions: Sequence[torch.Tensor],
                        pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (log-probs [B, C], mask [B, C]) of each completion's tokens given its prompt, in one forward.

    Samples that share a prompt are packed behind a single copy of it (see the module doc); the result is
    the same either way, row i for sample i, C the longest completion.
    """
    groups = group_by_prompt(prompts)
    if len(groups) < len(prompts) and _attention_implementation(model) in _MASK_4D_ATTENTIONS:
        return _packed_logprobs(model, prompts, completions, groups, pad_id)
    return _padded_logprobs(model, prompts, completions, pad_id)


def _padded_logprobs(model: Any, prompts: Sequence[torch.Tensor], completions: Sequence[torch.Tensor],
                     pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    input_ids, attention, mask, width_p = pad_group(prompts, completions, pad_id)
    device = _device(model)
    input_ids, attention, mask = input_ids.to(device), attention.to(device), mask.to(device)
    position_ids = (attention.cumsum(-1) - 1).clamp(min=0)
    width_c = mask.shape[1]
    logits = model(input_ids=input_ids, attention_mask=attention, position_ids=position_ids,
                   logits_to_keep=width_c + 1).logits[:, :-1].float()
    targets = input_ids[:, width_p:]
    # log-softmax of the chosen token only: logit - logsumexp, without a [B, C, V] log-softmax copy
    chosen = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    token_logps = (chosen - torch.logsumexp(logits, dim=-1)) * mask
    return token_logps, mask


def pack_groups(prompts: Sequence[torch.Tensor], completions: Sequence[torch.Tensor], groups: list[list[int]],
                pad_id: int) -> dict[str, Any]:
    """Lay out one row per prompt group: left-padded prompt, then the group's completions back to back.

    Returns input_ids and position_ids [R, L], `allowed` [R, L, L] (query may attend key), the prompt width
    P, and per sample (in the order of `prompts`) its row and the column offset of its completion after P.
    """
    width_p = max(len(prompts[g[0]]) for g in groups)
    width = width_p + max(sum(len(completions[i]) for i in g) for g in groups)
    rows = len(groups)
    input_ids = torch.full((rows, width), pad_id, dtype=torch.long)
    position_ids = torch.zeros((rows, width), dtype=torch.long)
    # segment of each column: -1 padding, 0 the prompt, k + 1 the row's k-th completion
    segment = torch.full((rows, width), -1, dtype=torch.long)
    row_of = [0] * len(prompts)
    offset_of = [0] * len(prompts)
    for row, group in enumerate(groups):
        prompt = prompts[group[0]]
        input_ids[row, width_p - len(prompt):width_p] = prompt
        position_ids[row, width_p - len(prompt):width_p] = torch.arange(len(prompt))
        segment[row, width_p - len(prompt):width_p] = 0
        column = width_p
        for k, i in enumerate(group):
            c = completions[i]
            input_ids[row, column:column + len(c)] = c
            position_ids[row, column:column + len(c)] = torch.arange(len(prompt), len(prompt) + len(c))
            segment[row, column:column + len(c)] = k + 1
            row_of[i], offset_of[i] = row, column - width_p
            column += len(c)
    query, key = segment[:, :, None], segment[:, None, :]
    causal = torch.ones((width, width), dtype=torch.bool).tril()
    allowed = causal & (key >= 0) & ((key == 0) | (key == query))
    allowed |= torch.eye(width, dtype=torch.bool)  # padding attends to itself: no all-masked softmax row
    return {"input_ids": input_ids, "position_ids": position_ids, "allowed": allowed, "width_p": width_p,
            "row_of": row_of, "offset_of": offset_of}


def _packed_logprobs(model: Any, prompts: Sequence[torch.Tensor], completions: Sequence[torch.Tensor],
                     groups: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    packed = pack_groups(prompts, completions, groups, pad_id)
    device, dtype = _device(model), _dtype(model)
    input_ids = packed["input_ids"].to(device)
    width_p, width = packed["width_p"], input_ids.shape[1]
    # additive mask in the model's dtype, as transformers builds it: 0 where allowed, the dtype's minimum elsewhere
    mask_4d = torch.zeros(packed["allowed"].shape, dtype=dtype).masked_fill_(~packed["allowed"], torch.finfo(dtype).min)
    # Keep the logits from the last prompt column on: column P - 1 predicts every completion's first token.
    logits = model(input_ids=input_ids, attention_mask=mask_4d[:, None].to(device),
                   position_ids=packed["position_ids"].to(device), logits_to_keep=width - width_p + 1).logits.float()

    # Where each sample's token t is predicted, as an index into the kept logits: token 0 at 0 (column P - 1),
    # token t > 0 right after the sample's token t - 1, i.e. at offset + t.
    batch, width_c = len(prompts), max(max(len(c) for c in completions), 1)
    mask = torch.zeros((batch, width_c), dtype=torch.float32)
    rows = torch.zeros((batch, width_c), dtype=torch.long)
    positions = torch.zeros((batch, width_c), dtype=torch.long)
    targets = torch.full((batch, width_c), pad_id, dtype=torch.long)
    for i, c in enumerate(completions):
        n = len(c)
        mask[i, :n] = 1.0
        rows[i] = packed["row_of"][i]
        positions[i, 1:n] = packed["offset_of"][i] + torch.arange(1, n)
        targets[i, :n] = c
    mask, rows, positions, targets = mask.to(device), rows.to(device), positions.to(device), targets.to(device)
    # log-softmax of the chosen token only: one logsumexp per kept column, shared by the samples that use it
    chosen = logits[rows, positions, targets]
    token_logps = (chosen - torch.logsumexp(logits, dim=-1)[rows, positions]) * mask
    return token_logps, mask


def _device(model: Any) -> torch.device:
    return next(model.parameters()).device


def _dtype(model: Any) -> torch.dtype:
    dtype = getattr(model, "dtype", None)
    return dtype if isinstance(dtype, torch.dtype) else next(model.parameters()).dtype


def _attention_implementation(model: Any) -> str | None:
    """Return the model's attention implementation (through peft and reference wrappers), None if unknown."""
    for candidate in (model, getattr(model, "model", None)):
        config = getattr(candidate, "config", None)
        if config is not None:
            return getattr(config, "_attn_implementation", None)
    return None
