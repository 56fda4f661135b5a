"""Per-token log-probs of completions under a causal LM: one batched forward for a whole group.

Two layouts, chosen by `completion_logprobs`, give the same numbers up to float noise:

- padded (little shared): prompts left-padded to a common width P, completions right-padded to a common
  width C, so every completion starts at column P. Position ids come from the attention mask, which makes a
  padded row give the same numbers as that row alone.
- token trie (sequences share prefixes): the batch's prompt + completion sequences are laid out as a tree of
  segments in one row, the tree of their longest common prefixes on token ids. Each segment is stored once;
  its tokens attend to the segments on the path above it and, causally, to its own earlier tokens, never to
  a sibling branch; its position ids continue from the depth where it starts. So every token is computed
  exactly as in its own sequence alone. The G sibling samples of a GRPO group share their prompt, and in a
  multi-turn MAGRPO tree the turn-2 prompts start with the turn-1 prompt: the shared tokens are run once per
  tree instead of once per sample (forward and backward). A completion token's log-prob comes from the
  logits of the previous token on its path, which may be the last token of a parent segment.

The trie layout is written by hand rather than through transformers' packed-sequence support: that support
(`position_ids` restarting at 0, flash-attention varlen) separates whole sequences, it cannot let several
segments share one prefix. The row's attention is `cooprl.models.trie_attention`: each segment attends to the
segments of its own path only, so no L x L mask or score matrix is ever built (L the trie's tokens). Models on
eager or SDPA attention get the trie; others (flash attention kernels) get the padded layout. A batch whose
trie would exceed `MAX_TRIE_TOKENS` is split into consecutive parts; a batch whose trie saves less than 10% of
its tokens gets the padded layout (one attention call per layer instead of one per segment).

Only the logits of the positions that predict completion tokens are materialized, and padding after a
completion's end is masked out of every sum.

Chunked log-probs (`agent_model.logprob_chunk_size`, set on the model, see `cooprl.models.loading.memory_options`): even
those logits are [predictions x vocab] floats (a 49k vocab: 200 KB per completion token, 400 MB for 2,048 tokens,
plus the same again for the log-softmax and for each in the backward; TRL issue 4585 is this OOM). With a chunk
size the model's LM head is switched off for the forward (it returns its input, the final hidden states), and
the head, log-softmax and gather then run on `chunk` predictions at a time, each chunk under activation
checkpointing when gradients are on: only the hidden states are kept, and the backward recomputes one chunk's
logits at a time. Models whose logits are more than their head's output (soft-capping, a logit scale) or whose
head carries LoRA adapters keep the unchunked path. `agent_model.autocast: bf16` runs the forward under bfloat16
autocast; the log-softmax is taken in float32 either way.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Callable, Iterator, Sequence

import torch
from torch.utils.checkpoint import checkpoint

from cooprl.models.loading import autocast_context, memory_options
from cooprl.models.trie_attention import PLACEHOLDER_MASK, trie_attention

# Attention implementations whose models take the trie layout (the sparse trie attention replaces them for the
# forward); flash attention kernels keep the padded layout.
_TRIE_ATTENTIONS = ("eager", "sdpa")
# Use the trie when it holds at most this fraction of the batch's tokens (else the padded layout is cheaper:
# one attention call per layer instead of one per segment).
TRIE_MAX_TOKEN_FRACTION = 0.9
# Longest trie row of one forward: a larger batch is scored in consecutive parts, which bounds the activations
# one forward keeps for the backward.
MAX_TRIE_TOKENS = 4096
# Config attributes of models whose logits are not just their output embedding's output: those keep the
# unchunked path (Gemma 2/3 soft-capping, Cohere's logit scale, Granite's logits scaling).
_HEAD_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling")


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


Warp = Callable[[torch.Tensor], torch.Tensor]   # float32 logits [..., vocab] -> the logits a sampler draws from


def completion_logprobs(model: Any, prompts: Sequence[torch.Tensor], completions: Sequence[torch.Tensor],
                        pad_id: int, warp: Warp | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (log-probs [B, C], mask [B, C]) of each completion's tokens given its prompt, in one forward.

    Sequences that share prefixes are packed as a token trie (see the module doc); the result is the same
    either way, row i for sample i, C the longest completion. `warp`, when given, turns each position's logits into
    a sampler's before the log-softmax (e.g. `generation.sampling_logits`: temperature, top-k, top-p); a token it
    removes gets -inf. Without it the log-probs are the model's own (what the update trains).
    """
    if _attention_implementation(model) in _TRIE_ATTENTIONS and all(len(p) > 0 for p in prompts):
        trie = TokenTrie([torch.cat([p, c]).tolist() for p, c in zip(prompts, completions)])
        total = sum(len(p) + len(c) for p, c in zip(prompts, completions))
        if trie.num_tokens <= TRIE_MAX_TOKEN_FRACTION * total:
            if trie.num_tokens > MAX_TRIE_TOKENS and len(prompts) > 1:
                return _in_parts(model, prompts, completions, pad_id, warp)
            return _trie_logprobs(model, trie, prompts, completions, pad_id, warp)
    return _padded_logprobs(model, prompts, completions, pad_id, warp)


def _in_parts(model: Any, prompts: Sequence[torch.Tensor], completions: Sequence[torch.Tensor],
              pad_id: int, warp: Warp | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Score the first and second half of the batch separately; concatenate, padded to the longest completion."""
    half = len(prompts) // 2
    parts = [completion_logprobs(model, prompts[:half], completions[:half], pad_id, warp),
             completion_logprobs(model, prompts[half:], completions[half:], pad_id, warp)]
    width = max(logps.shape[1] for logps, _ in parts)
    logps = torch.cat([torch.nn.functional.pad(lp, (0, width - lp.shape[1])) for lp, _ in parts])
    mask = torch.cat([torch.nn.functional.pad(m, (0, width - m.shape[1])) for _, m in parts])
    return logps, mask


def _padded_logprobs(model: Any, prompts: Sequence[torch.Tensor], completions: Sequence[torch.Tensor],
                     pad_id: int, warp: Warp | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    input_ids, attention, mask, width_p = pad_group(prompts, completions, pad_id)
    device = _device(model)
    input_ids, attention, mask = input_ids.to(device), attention.to(device), mask.to(device)
    position_ids = (attention.cumsum(-1) - 1).clamp(min=0)
    width_c = mask.shape[1]
    targets = input_ids[:, width_p:]
    head, chunk = _chunking(model)
    if head is not None:
        keep = mask > 0
        rows = torch.arange(keep.numel(), device=device).view_as(keep)[keep]
        scores = _HeadScores(lambda hidden: hidden[:, :-1].reshape(-1, hidden.shape[-1]), rows, targets[keep],
                             chunk, warp)
        with autocast_context(model), _head_scores(head, scores):
            values = model(input_ids=input_ids, attention_mask=attention, position_ids=position_ids,
                           logits_to_keep=width_c + 1, use_cache=False).logits
        return torch.zeros_like(mask).masked_scatter(keep, values), mask
    with autocast_context(model):
        logits = model(input_ids=input_ids, attention_mask=attention, position_ids=position_ids,
                       logits_to_keep=width_c + 1, use_cache=False).logits[:, :-1].float()
    if warp is not None:
        logits = warp(logits)
    # log-softmax of the chosen token only: logit - logsumexp, without a [B, C, V] log-softmax copy
    chosen = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    # masked_fill, not * mask: a warp may put a padding position's target at -inf (and -inf * 0 is NaN)
    token_logps = (chosen - torch.logsumexp(logits, dim=-1)).masked_fill(mask == 0, 0.0)
    return token_logps, mask


class _Segment:
    """A run of tokens of the trie; children keyed by their first token."""

    __slots__ = ("tokens", "children", "start", "depth")

    def __init__(self, tokens: list[int]):
        self.tokens, self.children = tokens, {}
        self.start = self.depth = 0


class TokenTrie:
    """The sequences' tree of longest common prefixes (on token ids), laid out in one row.

    Segments are placed depth first (a parent before its children), so `input_ids`, `position_ids` (the depth
    of each token in its path) and `allowed` (query may attend key: the key is on the query's path, at or
    before it) describe one row of `num_tokens` columns; `columns[i][k]` is the column of token k of
    sequence i. A sequence that is a prefix of another ends at a segment boundary of it.
    """

    def __init__(self, sequences: Sequence[list[int]]):
        self.root = _Segment([])
        for seq in sequences:
            self._insert(seq)
        self.segments: list[tuple[_Segment, list[_Segment]]] = []  # (segment, its ancestors)
        column, stack = 0, [(child, 0, []) for child in reversed(list(self.root.children.values()))]
        while stack:
            seg, depth, ancestors = stack.pop()
            seg.start, seg.depth = column, depth
            column += len(seg.tokens)
            self.segments.append((seg, ancestors))
            below = ancestors + [seg]
            stack.extend((child, depth + len(seg.tokens), below) for child in reversed(list(seg.children.values())))
        self.num_tokens = column
        self.columns = [self._columns(seq) for seq in sequences]

    def _insert(self, seq: list[int]) -> None:
        node, pos = self.root, 0
        while pos < len(seq):
            child = node.children.get(seq[pos])
            if child is None:
                node.children[seq[pos]] = _Segment(seq[pos:])
                return
            tokens, limit, k = child.tokens, min(len(child.tokens), len(seq) - pos), 1
            while k < limit and tokens[k] == seq[pos + k]:
                k += 1
            if k < len(tokens):  # split: the shared head becomes the parent of the rest
                head = _Segment(tokens[:k])
                child.tokens = tokens[k:]
                head.children[child.tokens[0]] = child
                node.children[seq[pos]] = child = head
            node, pos = child, pos + k

    def _columns(self, seq: list[int]) -> list[int]:
        columns: list[int] = []
        node, pos = self.root, 0
        while pos < len(seq):
            node = node.children[seq[pos]]
            columns.extend(range(node.start, node.start + len(node.tokens)))
            pos += len(node.tokens)
        return columns

    def layout(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Return input_ids [L] and position_ids [L] of the row."""
        input_ids = torch.empty(self.num_tokens, dtype=torch.long)
        position_ids = torch.empty(self.num_tokens, dtype=torch.long)
        for seg, _ in self.segments:
            a, b = seg.start, seg.start + len(seg.tokens)
            input_ids[a:b] = torch.tensor(seg.tokens, dtype=torch.long)
            position_ids[a:b] = torch.arange(seg.depth, seg.depth + b - a)
        return input_ids, position_ids

    def allowed(self) -> torch.Tensor:
        """Return the row's [L, L] bool mask: query column i may attend to key column j (j on i's path, at or
        before i). The definition `cooprl.models.trie_attention` computes sparsely; built densely only for checks."""
        allowed = torch.zeros((self.num_tokens, self.num_tokens), dtype=torch.bool)
        for seg, ancestors in self.segments:
            a, b = seg.start, seg.start + len(seg.tokens)
            for anc in ancestors:
                allowed[a:b, anc.start:anc.start + len(anc.tokens)] = True
            allowed[a:b, a:b] = torch.ones((b - a, b - a), dtype=torch.bool).tril()
        return allowed


def _trie_logprobs(model: Any, trie: TokenTrie, prompts: Sequence[torch.Tensor],
                   completions: Sequence[torch.Tensor], pad_id: int, warp: Warp | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    device = _device(model)
    input_ids, position_ids = trie.layout()
    # Completion token k of sample i is predicted by the logits at the column of the token before it on its path.
    batch, width_c = len(prompts), max(max(len(c) for c in completions), 1)
    mask = torch.zeros((batch, width_c), dtype=torch.float32)
    predictors = torch.zeros((batch, width_c), dtype=torch.long)
    targets = torch.full((batch, width_c), pad_id, dtype=torch.long)
    for i, (p, c) in enumerate(zip(prompts, completions)):
        n, cols = len(c), trie.columns[i]
        mask[i, :n] = 1.0
        predictors[i, :n] = torch.tensor(cols[len(p) - 1:len(p) - 1 + n], dtype=torch.long)
        targets[i, :n] = c
    # only the predicting columns go through the LM head; `index` maps each prediction into them
    keep = torch.unique(predictors[mask > 0], sorted=True)
    if keep.numel() == 0:
        keep = torch.zeros(1, dtype=torch.long)
    index = torch.searchsorted(keep, predictors).clamp(max=keep.numel() - 1)
    head, chunk = _chunking(model)
    mask, index, targets = mask.to(device), index.to(device), targets.to(device)
    valid = mask > 0
    scores = None if head is None else _HeadScores(lambda hidden: hidden[0], index[valid], targets[valid], chunk, warp)
    # each segment attends to its own path only (`cooprl.models.trie_attention`): no dense L x L mask or scores
    with trie_attention(model, trie), autocast_context(model), _head_scores(head, scores):
        out = model(input_ids=input_ids[None].to(device), attention_mask=PLACEHOLDER_MASK.to(device),
                    position_ids=position_ids[None].to(device), logits_to_keep=keep.to(device),
                    use_cache=False).logits
    if head is not None:   # `out` is the kept predictions' log-probs, the head run chunk by chunk
        return torch.zeros_like(mask).masked_scatter(valid, out), mask
    out = out[0]
    logits = out.float() if warp is None else warp(out.float())
    # one log-softmax per kept column, shared by the samples that use it (the fused kernel: ~1.8x faster on
    # CPU than logit - logsumexp, whose max, subtract and exp run as separate passes; the backward keeps one
    # [kept, vocab] tensor either way); masked_fill, not * mask: a warp may leave -inf at padding (-inf * 0 is NaN)
    token_logps = torch.log_softmax(logits, dim=-1)[index, targets].masked_fill(mask == 0, 0.0)
    return token_logps, mask


def chunked_token_logps(head: torch.nn.Module, hidden: torch.Tensor, rows: torch.Tensor, targets: torch.Tensor,
                        chunk: int, warp: Warp | None = None) -> torch.Tensor:
    """Return [M] float32 log-probs: entry m is log softmax(head(hidden[rows[m]]))[targets[m]] (the head's logits
    passed through `warp` first when given).

    `chunk` predictions at a time: the [chunk, vocab] logits of one chunk exist at once. With gradients on, each
    chunk runs under non-reentrant activation checkpointing, which keeps only its [chunk, hidden] input and
    recomputes the logits in the backward, one chunk at a time."""
    parts = []
    for start in range(0, rows.numel(), chunk):
        h = hidden.index_select(0, rows[start:start + chunk])
        t = targets[start:start + chunk]
        if torch.is_grad_enabled() and (h.requires_grad or any(p.requires_grad for p in head.parameters())):
            parts.append(checkpoint(_head_logps, head, h, t, warp, use_reentrant=False))
        else:
            parts.append(_head_logps(head, h, t, warp))
    if not parts:
        return hidden.new_zeros(0, dtype=torch.float32)
    return torch.cat(parts)


def _head_logps(head: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor, warp: Warp | None = None
                ) -> torch.Tensor:
    """Return log softmax(head(hidden))[targets] per row, in float32 (the logits passed through `warp` when given)."""
    logits = head(hidden).float()
    if warp is not None:
        logits = warp(logits)
    return torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def _chunking(model: Any) -> tuple[torch.nn.Module | None, int]:
    """Return (the model's LM head, chunk size) when its log-probs are to be chunked, else (None, 0).

    Chunked only with a `logprob_chunk_size` and a head whose output is the logits as they are: no soft-capping
    or logit scale after it (the unchunked path applies those), no LoRA adapters on it (a reference view switches
    adapters off only for the forward, not for the chunks after it)."""
    chunk = memory_options(model).logprob_chunk_size
    if not chunk:
        return None, 0
    for module in model.modules():
        get_head = getattr(module, "get_output_embeddings", None)
        head = get_head() if callable(get_head) else None
        if isinstance(head, torch.nn.Module):
            config = getattr(module, "config", None)
            if any(getattr(config, name, None) is not None for name in _HEAD_TRANSFORMS):
                return None, 0
            if any(hasattr(m, "lora_A") for m in head.modules()):
                return None, 0
            return head, chunk
    return None, 0


@dataclasses.dataclass(frozen=True)
class _HeadScores:
    """What the LM head computes in place of the logits under `_head_scores`: the [M] log-probs of `targets` at
    `rows` of `flatten(its input)` (the final hidden states at the kept positions, as rows), `chunk` rows at a time."""
    flatten: Callable[[torch.Tensor], torch.Tensor]
    rows: torch.Tensor
    targets: torch.Tensor
    chunk: int
    warp: Warp | None


@contextlib.contextmanager
def _head_scores(head: torch.nn.Module | None, scores: _HeadScores | None) -> Iterator[None]:
    """Within the block, `head` returns `scores`' log-probs (chunked_token_logps) instead of the logits: the model's
    `.logits` are then those [M] log-probs. A no-op for `head` None.

    Why inside the model's forward, not after it on its final hidden states: under fsdp the root unit (embeddings,
    final norm, head) holds its whole weights only during its forward, and its backward gathers them again only for
    the gradients that flow into what that forward returned; a head run after it would meet its sharded weight."""
    if head is None:
        yield
        return

    # an instance attribute shadows the class's forward; nn.Module.__call__ still runs the head's hooks
    def score(hidden: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        del head.forward   # the chunks call the head itself (and recompute it in the backward)
        try:
            return chunked_token_logps(head, scores.flatten(hidden), scores.rows, scores.targets, scores.chunk,
                                       scores.warp)
        finally:
            head.forward = score

    head.forward = score
    try:
        yield
    finally:
        del head.forward


def _device(model: Any) -> torch.device:
    return next(model.parameters()).device


def _attention_implementation(model: Any) -> str | None:
    """Return the model's attention implementation (through peft and reference wrappers), None if unknown."""
    for candidate in (model, getattr(model, "model", None)):
        config = getattr(candidate, "config", None)
        if config is not None:
            return getattr(config, "_attn_implementation", None)
    return None
