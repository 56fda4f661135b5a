"""A scalar head on a causal LM, read at one token per sequence: the critics' value and the reward model.

`ValueModel(lm)` puts a linear head on the LM's last hidden state (after the final norm). `values(prompts,
completions)` scores each sequence at one token: the last prompt token when `completions` is None (a V
critic: value of the prompt), else the last completion token (a Q critic, or a reward model scoring a
prompt and its answer). The batch uses the same layout as the log-probs (`cooprl.models.logprobs.pad_group`), so a
padded row gives the same value as that row alone.

Sharing the trunk: `ValueModel(actor, owns_lm=False)` is a value head on the actor (IAC's shared mode); its
checkpoint folder then holds only the head, the actor being saved as an agent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import torch

from cooprl.models.loading import HEAD_FILE, load_agent_weights_from_folder, save_pretrained_on_this_rank
from cooprl.models.logprobs import pad_group


class ValueModel(torch.nn.Module):
    """A causal LM with a linear value head; `values` returns one scalar per sequence."""

    def __init__(self, lm: Any, *, owns_lm: bool = True):
        super().__init__()
        self.lm = lm
        self.owns_lm = owns_lm
        hidden = lm.config.get_text_config().hidden_size
        self.head = torch.nn.Linear(hidden, 1)
        # A small head: the first values are near zero, so early TD errors are of the rewards' size. (With
        # std 1/sqrt(hidden) the values are about the final hidden state's RMS: +-2 on SmolLM2, half the reward range.)
        torch.nn.init.normal_(self.head.weight, std=0.01 / (hidden + 1) ** 0.5)
        torch.nn.init.zeros_(self.head.bias)
        self.head.to(device=lm.device, dtype=torch.float32)

    @property
    def device(self) -> torch.device:
        return self.head.weight.device

    def head_parameters(self) -> list[torch.nn.Parameter]:
        """Return the head's parameters (the trunk's trainable ones are `trunk_parameters`)."""
        return list(self.head.parameters())

    def trunk_parameters(self) -> list[torch.nn.Parameter]:
        """Return the LM's trainable parameters when this model owns its LM, else [] (the actor trains it)."""
        return [p for p in self.lm.parameters() if p.requires_grad] if self.owns_lm else []

    def values(self, prompts: Sequence[torch.Tensor], completions: Sequence[torch.Tensor] | None, pad_id: int
               ) -> torch.Tensor:
        """Return the value of each sequence [B] (float32): at its last prompt token, or last completion token."""
        empty = [torch.zeros(0, dtype=torch.long) for _ in prompts]
        input_ids, attention, completion_mask, width_p = pad_group(prompts, completions or empty, pad_id)
        device = self.device
        input_ids, attention = input_ids.to(device), attention.to(device)
        position_ids = (attention.cumsum(-1) - 1).clamp(min=0)
        out = self.lm(input_ids=input_ids, attention_mask=attention, position_ids=position_ids,
                      output_hidden_states=True, logits_to_keep=1)
        hidden = out.hidden_states[-1]
        if completions is None:
            index = torch.full((len(prompts),), width_p - 1, dtype=torch.long)
        else:  # last completion token; an empty completion falls back to the last prompt token
            index = width_p - 1 + completion_mask.sum(-1).long()
        rows = torch.arange(len(prompts))
        picked = hidden[rows.to(device), index.to(device)].float()
        return self.head(picked).squeeze(-1)

    def save_pretrained(self, folder: str | Path) -> None:
        """Write the head (and the LM, when owned) into `folder`, the checkpoint layout of an agent."""
        from safetensors.torch import save_file
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        if self.owns_lm:
            save_pretrained_on_this_rank(self.lm, folder)
        save_file({k: v.detach().cpu().contiguous() for k, v in self.head.state_dict().items()}, folder / HEAD_FILE)

    def load_weights(self, folder: str | Path) -> None:
        """Load what `save_pretrained` wrote into this model in place."""
        from safetensors.torch import load_file
        folder = Path(folder)
        if self.owns_lm:
            load_agent_weights_from_folder(self.lm, folder)
        head = load_file(folder / HEAD_FILE)
        self.head.load_state_dict({k: v.to(self.device) for k, v in head.items()})
