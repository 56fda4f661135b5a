"""Per-token log-probs of completions under a causal LM: one padded, batched forward for a whole group.

Layout of the batch: prompts left-padded to a common width P, completions right-padded to a common width C,
so every completion starts at column P. Position ids are computed from the attention mask, which makes a
padded row give the same numbers as that row alone. Only the last C+1 positions' logits are materialized
(`logits_to_keep`), and padding after a completion's end is masked out of every sum.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch


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


def completion_logprobs(model: Any, prompts: Sequence[torch.Tensor], completions: Sequence[torch.Tensor],
                        pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (log-probs [B, C], mask [B, C]) of each completion's tokens given its prompt, in one forward."""
    input_ids, attention, mask, width_p = pad_group(prompts, completions, pad_id)
    device = next(model.parameters()).device
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
