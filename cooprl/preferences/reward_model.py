"""A joint reward model: one scalar for a prompt and every agent's answer, trained on preference pairs.

The model is a `ValueModel` (a causal LM with a linear head) that reads ONE text: the joint prompt, then
each agent's output under its own label (`reward_input`). The text is cut to `max_length` tokens by
dropping the start of the prompt, never the answers (they are what is being judged), and ends with EOS so
the head always reads the same kind of last token.

Training is Bradley-Terry: loss = -log sigmoid(r(chosen) - r(rejected)), one AdamW step per batch of
PAIRS_PER_BATCH pairs, its gradient accumulated over forwards of PAIRS_PER_FORWARD pairs (chosen and rejected
rows padded together) to bound the activations' memory. A seeded share of the pairs is held out and the
accuracy on it (how often r(chosen) > r(rejected)) is reported. `score_stats` gives the mean and spread of the
scores on the pairs' answers, which MARLHF uses to standardize the learned reward.
"""

from __future__ import annotations

import logging
import statistics
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from cooprl.models.value_model import ValueModel
from cooprl.text import plain_text
from cooprl.update.engine import Term, optimizer_step
from cooprl.update.losses import bradley_terry_loss, bradley_terry_losses
from cooprl.update.optim import build_adamw

log = logging.getLogger(__name__)

PAIRS_PER_BATCH = 8   # pairs per optimizer step in training, and per forward (2x as many sequences) in scoring
# Pairs per forward + backward in training; the step's gradient is accumulated over its batch's chunks. The
# backward keeps every layer's activations (with eager/math attention an L x L score matrix per head): 8 pairs of
# 512 tokens on SmolLM2-135M took the RSS past 16 GB, 2 pairs keep it near 4 GB.
PAIRS_PER_FORWARD = 2


def reward_input(prompts: Sequence[str], outputs: Sequence[str]) -> tuple[str, str]:
    """Return (prompt part, answer part) of the reward model's text; the text is their concatenation.

    `prompts` are the policies' prompts: one per agent (decentralized), or one joint prompt (centralized,
    or agents that all see the same prompt: it is shown once). `outputs` are the answers, one per policy.
    """
    distinct = list(dict.fromkeys(prompts))
    if len(distinct) == 1:
        prompt = f"### Prompt\n{distinct[0].strip()}\n\n"
    else:
        prompt = "".join(f"### Prompt of agent {i + 1}\n{p.strip()}\n\n" for i, p in enumerate(prompts))
    if len(outputs) == 1:
        answer = f"### Joint answer\n{outputs[0].strip()}\n"
    else:
        answer = "\n".join(f"### Output of agent {i + 1}\n{o.strip()}\n" for i, o in enumerate(outputs))
    return prompt, answer


def split_pairs(num_pairs: int, eval_fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """Return (train indices, held-out indices): a seeded shuffle, the held-out share rounded, >= 1 when > 0."""
    order = torch.randperm(num_pairs, generator=torch.Generator().manual_seed(seed)).tolist()
    num_eval = round(eval_fraction * num_pairs)
    if eval_fraction > 0 and num_pairs >= 2:
        num_eval = min(max(num_eval, 1), num_pairs - 1)  # keep at least one pair on each side
    else:
        num_eval = 0
    return order[num_eval:], order[:num_eval]


class RewardModel:
    """A ValueModel with its tokenizer: `score` turns (prompts, outputs) examples into rewards."""

    def __init__(self, model: ValueModel, tokenizer: Any, max_length: int):
        self.model, self.tokenizer, self.max_length = model, tokenizer, max_length

    def encode(self, prompts: Sequence[str], outputs: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Return (prompt ids, answer ids + EOS), the prompt cut from the left to fit `max_length` in all."""
        prompt_text, answer_text = reward_input(prompts, outputs)
        # model- and program-derived text: no special token is parsed out of it (`cooprl.text.plain_text`)
        prompt = self.tokenizer(plain_text(prompt_text, self.tokenizer), add_special_tokens=False).input_ids
        answer = self.tokenizer(plain_text(answer_text, self.tokenizer), add_special_tokens=False).input_ids
        # EOS closes the answers; answers too long on their own keep their start (and no prompt is left)
        answer = answer[:self.max_length - 1] + [self.tokenizer.eos_token_id]
        room = self.max_length - len(answer)
        prompt = prompt[-room:] if room > 0 else []
        return torch.tensor(prompt, dtype=torch.long), torch.tensor(answer, dtype=torch.long)

    def _values(self, examples: Sequence[tuple[Sequence[str], Sequence[str]]]) -> torch.Tensor:
        encoded = [self.encode(p, o) for p, o in examples]
        return self.model.values([e[0] for e in encoded], [e[1] for e in encoded], self.tokenizer.pad_token_id)

    @torch.no_grad()
    def score(self, examples: Sequence[tuple[Sequence[str], Sequence[str]]]) -> list[float]:
        """Return the reward of each (prompts, outputs) example, scored in batches."""
        self.model.eval()
        size = 2 * PAIRS_PER_BATCH
        return [v for start in range(0, len(examples), size)
                for v in self._values(examples[start:start + size]).tolist()]


def _pair_examples(pairs: Sequence[Any]) -> tuple[list[tuple], list[tuple]]:
    return [(p.prompts, p.chosen) for p in pairs], [(p.loser_prompts, p.rejected) for p in pairs]


def score_stats(reward_model: RewardModel, pairs: Sequence[Any]) -> tuple[float, float]:
    """Return (mean, population standard deviation) of the scores of the pairs' joint answers, chosen and rejected."""
    chosen, rejected = _pair_examples(pairs)
    scores = reward_model.score(chosen + rejected)
    return statistics.fmean(scores), statistics.pstdev(scores)


def pair_accuracy(reward_model: RewardModel, pairs: Sequence[Any]) -> tuple[float, float]:
    """Return (accuracy, mean BT loss) of `reward_model` on preference pairs: accuracy = share with r_w > r_l."""
    chosen, rejected = _pair_examples(pairs)
    r_w = torch.tensor(reward_model.score(chosen))
    r_l = torch.tensor(reward_model.score(rejected))
    return (r_w > r_l).float().mean().item(), bradley_terry_loss(r_w, r_l).item()


@dataclass(frozen=True)
class RewardTraining:
    """How `train_reward_model` trains: AdamW at `learning_rate` for `epochs` over the pairs, one step per
    `batch_size` pairs (gradients clipped to `max_grad_norm`; `bf16_optimizer`: how bf16 weights are updated,
    cooprl.update.optim.build_adamw), a seeded `eval_fraction` of the pairs held out (`seed` also orders them)."""

    learning_rate: float
    epochs: int
    eval_fraction: float
    seed: int
    max_grad_norm: float | None = 1.0
    batch_size: int = PAIRS_PER_BATCH
    bf16_optimizer: str = "kahan"


def train_reward_model(reward_model: RewardModel, pairs: Sequence[Any], training: RewardTraining,
                       weights: Sequence[float] | None = None) -> dict[str, float]:
    """Train on the pairs with the Bradley-Terry loss as `training` says; return the metrics.

    `weights` (one per pair, e.g. replay weights) scale each pair's loss. Metrics: pair counts, the last epoch's
    training loss and accuracy, and the held-out accuracy and loss (when any pair is held out).
    """
    train_idx, eval_idx = split_pairs(len(pairs), training.eval_fraction, training.seed)
    weights = list(weights) if weights is not None else [1.0] * len(pairs)
    model = reward_model.model
    # a frozen backbone (reward_freeze_backbone) has requires_grad off: only the head is trained
    params = [p for p in model.head_parameters() + model.trunk_parameters() if p.requires_grad]
    optimizer = build_adamw(params, lr=training.learning_rate, bf16_optimizer=training.bf16_optimizer)
    metrics = {"reward_model/train_pairs": float(len(train_idx)), "reward_model/eval_pairs": float(len(eval_idx))}

    def loss(chunk: list[int], denominator: float) -> tuple[torch.Tensor, dict[str, float]]:
        chosen, rejected = _pair_examples([pairs[i] for i in chunk])
        values = reward_model._values(chosen + rejected)  # one forward for both sides
        r_w, r_l = values[:len(chunk)], values[len(chunk):]
        w = torch.tensor([weights[i] for i in chunk], device=values.device)
        # this chunk's share of the batch's weighted mean loss: the summed gradients are the batch's
        return (bradley_terry_losses(r_w, r_l) * w).sum() / denominator, {"correct": float((r_w > r_l).sum().item())}

    for epoch in range(training.epochs):
        model.train()
        generator = torch.Generator().manual_seed(training.seed * 1000 + epoch)
        order = [train_idx[i] for i in torch.randperm(len(train_idx), generator=generator).tolist()]
        loss_sum, correct = 0.0, 0
        for start in range(0, len(order), training.batch_size):
            indices = order[start:start + training.batch_size]
            parts = [indices[part:part + PAIRS_PER_FORWARD] for part in range(0, len(indices), PAIRS_PER_FORWARD)]
            # every process trains this model alike on the same pairs (MARLHF): a plain step, no sync
            result = optimizer_step([optimizer], [Term(parts, loss)],
                                    weight=max(sum(weights[i] for i in indices), 1e-12),
                                    max_grad_norm=training.max_grad_norm)
            if result.skipped:
                continue
            metrics["reward_model/optimizer_steps"] = metrics.get("reward_model/optimizer_steps", 0.0) + 1
            loss_sum += result.losses["loss"] * len(indices)
            correct += int(result.metrics["correct"])
        if order:
            metrics["reward_model/train_loss"] = loss_sum / len(order)
            metrics["reward_model/train_accuracy"] = correct / len(order)
    optimizer.zero_grad(set_to_none=True)
    if eval_idx:
        accuracy, loss = pair_accuracy(reward_model, [pairs[i] for i in eval_idx])
        metrics.update({"reward_model/eval_accuracy": accuracy, "reward_model/eval_loss": loss})
    model.eval()
    return metrics

