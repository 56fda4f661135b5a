"""Batched sampling of completions: every prompt x every sample of a call in one `generate`.

The default backend is transformers' `generate`. A completion keeps its token ids (for the update, so the
log-probs are of exactly the tokens sampled, never of a re-tokenized text) and ends at the first EOS
(kept, so the model learns to stop) or at a stop string; padding after it is dropped.

With several samples per prompt, each prompt is prefilled once and its KV cache repeated for its samples:
`generate(num_return_sequences=G)` would copy the prompt G times before the prefill, and on CPU the
prefill of long (turn-2) prompts costs more than decoding 64 tokens.

With `agent_model.autocast: bf16` the prefill and `generate` run under bfloat16 autocast (`autocast_context`),
like the update's forward passes, so the policy samples with the numerics it is trained with.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from cooprl.models.loading import autocast_context
from cooprl.parallel.context import Parallel
from cooprl.text import plain_text, safe_text


@dataclass(frozen=True)
class SamplingParams:
    """How completions are sampled; temperature 0 means greedy decoding."""

    max_new_tokens: int = 256
    temperature: float = 0.6
    top_p: float = 1.0
    top_k: int | None = None
    stop_strings: tuple[str, ...] = ()


@dataclass
class Completion:
    """One sampled completion: its text and token ids, and the ids of the prompt it continues."""

    text: str
    prompt_ids: torch.Tensor       # 1-D, unpadded
    completion_ids: torch.Tensor   # 1-D, unpadded, EOS included when generated
    truncated: bool                # True when the budget ran out before EOS or a stop string
    # 1-D float, one per completion id: each token's log-prob under the sampler that drew it, after its temperature,
    # top-k and top-p (vLLM with agent_model.vllm_importance_cap; NaN where vLLM gave none); None otherwise
    sampler_logprobs: torch.Tensor | None = None


def sampling_logits(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Return `logits` [..., vocab] turned into those the sampler draws from: divided by the temperature, then top-k,
    then top-p, removed tokens at -inf (transformers' temperature, top-k and top-p warpers, in generate's order, which
    vLLM's sampler applies alike). Greedy (temperature 0) leaves them unchanged, as vLLM's greedy log-probs do."""
    if params.temperature == 0:
        return logits
    logits = logits / params.temperature
    if params.top_k:
        kth = torch.topk(logits, min(params.top_k, logits.shape[-1]), dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if params.top_p < 1.0:
        ascending, order = torch.sort(logits, dim=-1)
        remove = ascending.softmax(dim=-1).cumsum(dim=-1) <= 1 - params.top_p
        remove[..., -1] = False   # the most likely token always stays
        logits = logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))
    return logits


def first_stop(text: str, stop_strings: Sequence[str]) -> int | None:
    """Return where `text` should end: the first stop string that follows some non-blank text, else None.

    Stop strings at the very start are ignored because small models often open with a blank line and
    restart the function header they were given ("\ndef f(...)"): that is the answer, not its end.
    """
    best = None
    for stop in stop_strings:
        at = text.find(stop)
        while at != -1 and not text[:at].strip():
            at = text.find(stop, at + 1)
        if at != -1 and (best is None or at < best):
            best = at
    return best


class _StopOnStrings:
    """A stopping criterion: each row stops once its generated text holds a stop string (see first_stop).

    Written by hand because transformers' `stop_strings` cannot skip a match at the very start.
    """

    def __init__(self, tokenizer: Any, stop_strings: Sequence[str], prompt_width: int):
        self.tokenizer, self.stop_strings, self.prompt_width = tokenizer, tuple(stop_strings), prompt_width

    def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> torch.Tensor:
        texts = self.tokenizer.batch_decode(input_ids[:, self.prompt_width:], skip_special_tokens=True)
        done = [first_stop(text, self.stop_strings) is not None for text in texts]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)


def apply_chat_template(tokenizer: Any, prompt: str) -> str:
    """Return `prompt` wrapped as one user turn in the tokenizer's chat template, ready for the answer."""
    messages = [{"role": "user", "content": prompt}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


class HFGenerator:
    """Samples completions from a transformers causal LM, batched over prompts and samples."""

    def __init__(self, model: Any, tokenizer: Any, *, max_prompt_tokens: int, chat_template: bool = False):
        self.model = model
        self.tokenizer = tokenizer
        self.max_prompt_tokens = max_prompt_tokens
        self.chat_template = chat_template

    def encode_prompts(self, prompts: Sequence[str]) -> list[torch.Tensor]:
        """Return the unpadded token ids of each prompt, cut from the left to `max_prompt_tokens`.

        Prompts carry model- and program-derived text (a task's feedback may quote error messages, one agent's prompt
        another's completion): `safe_text` first, since a fast tokenizer refuses a lone surrogate (`TypeError:
        TextEncodeInput`), then `plain_text`, so that no special token is parsed out of it: the only ones in the ids
        are those the chat template (or the tokenizer, without one) adds."""
        prompts = [plain_text(safe_text(p), self.tokenizer) for p in prompts]
        if self.chat_template:
            prompts = [apply_chat_template(self.tokenizer, p) for p in prompts]
        encoded = self.tokenizer(list(prompts), add_special_tokens=not self.chat_template)["input_ids"]
        return [torch.tensor(ids[-self.max_prompt_tokens:], dtype=torch.long) for ids in encoded]

    @torch.no_grad()
    def sample(self, prompts: Sequence[str], num_samples: int, params: SamplingParams) -> list[list[Completion]]:
        """Return `num_samples` completions for each prompt (one `generate` call for all of them)."""
        if not prompts:
            return []
        prompt_ids = self.encode_prompts(prompts)
        pad_id = self.tokenizer.pad_token_id
        width = max(len(ids) for ids in prompt_ids)
        input_ids = torch.full((len(prompt_ids), width), pad_id, dtype=torch.long)
        attention = torch.zeros_like(input_ids)
        for row, ids in enumerate(prompt_ids):  # left padding: every prompt ends at the same column
            input_ids[row, width - len(ids):] = ids
            attention[row, width - len(ids):] = 1
        device = self.model.device
        greedy = params.temperature == 0
        # synced_gpus off: transformers turns it on for a sharded model, to decode in lock-step with the other
        # processes; ours samples with its gathered weights alone (cooprl.parallel.fsdp.full_weights)
        kwargs = dict(do_sample=not greedy, max_new_tokens=params.max_new_tokens, num_return_sequences=num_samples,
                      pad_token_id=pad_id, eos_token_id=self.tokenizer.eos_token_id, synced_gpus=False)
        kwargs.update(_plain_sampling())
        if not greedy:
            kwargs.update(temperature=params.temperature, top_p=params.top_p, top_k=params.top_k or 0)
        if params.stop_strings:
            from transformers import StoppingCriteriaList
            kwargs["stopping_criteria"] = StoppingCriteriaList([_StopOnStrings(self.tokenizer, params.stop_strings,
                                                                               width)])
        input_ids, attention = input_ids.to(device), attention.to(device)
        was_training = self.model.training
        self.model.eval()
        Parallel.check_gathered(self.model, "sampling")   # (parallel_training fsdp: see Parallel.sampling)
        try:
            with autocast_context(self.model):
                if num_samples > 1 and width > 1:
                    kwargs[_cache_argument(self.model)] = self._prefill_once(input_ids, attention, num_samples)
                    input_ids = input_ids.repeat_interleave(num_samples, dim=0)
                    attention = attention.repeat_interleave(num_samples, dim=0)
                    kwargs["num_return_sequences"] = 1
                output = self.model.generate(input_ids=input_ids, attention_mask=attention, **kwargs)
        finally:
            self.model.train(was_training)
        generated = output[:, width:].cpu()
        texts_and_ids = [self._trim(row, params) for row in generated]
        return [[Completion(text, prompt_ids[p], ids, truncated)
                 for text, ids, truncated in texts_and_ids[p * num_samples:(p + 1) * num_samples]]
                for p in range(len(prompt_ids))]

    def _prefill_once(self, input_ids: torch.Tensor, attention: torch.Tensor, num_samples: int) -> Any:
        """Return the KV cache of every prompt but its last column, each prompt's rows repeated `num_samples` times.

        `generate`, given the whole prompts and this cache, runs only the last column (whose logits give the
        first sampled token) and goes on decoding. Position ids are the ones `generate` derives from the mask.
        """
        from transformers import DynamicCache

        cache = DynamicCache(config=self.model.config)
        prefix, prefix_mask = input_ids[:, :-1], attention[:, :-1]
        position_ids = (prefix_mask.cumsum(-1) - 1).clamp(min=0)
        self.model(input_ids=prefix, attention_mask=prefix_mask, position_ids=position_ids, use_cache=True,
                   logits_to_keep=1, **{_cache_argument(self.model): cache})
        cache.batch_repeat_interleave(num_samples)
        return cache

    def _trim(self, row: torch.Tensor, params: SamplingParams) -> tuple[str, torch.Tensor, bool]:
        """Return (text, ids, truncated) of one generated row, cut at its EOS, stop string or padding."""
        eos = self.tokenizer.eos_token_id
        eos_ids = set(eos if isinstance(eos, list) else [eos])
        tokens = row.tolist()
        end = next((i for i, t in enumerate(tokens) if t in eos_ids or t == self.tokenizer.pad_token_id), len(tokens))
        ids = row[:end]
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        stopped = bool(params.stop_strings) and first_stop(text, params.stop_strings) is not None
        if end < len(tokens) and tokens[end] in eos_ids and not stopped:
            # The model chose to end here: its EOS is part of the action to learn. (After a stop string
            # the EOS-looking token is generate's padding, which the model never sampled.)
            ids = row[:end + 1]
        return text, ids, end == len(tokens) and not stopped


# generate() fills every option it is not given from the model's generation_config.json (Qwen2.5 Instruct sets
# repetition_penalty 1.05): sampling would then draw from another distribution than the one the update's log-probs
# and vLLM's SamplingParams assume (temperature, top-k and top-p alone). Each logits processor and stopping rule
# that such a file can switch on is given here, switched off.
_PLAIN_SAMPLING = dict(
    repetition_penalty=1.0, no_repeat_ngram_size=0, typical_p=1.0, min_p=None, top_h=None, epsilon_cutoff=0.0,
    eta_cutoff=0.0, min_length=0, min_new_tokens=None, bad_words_ids=None, suppress_tokens=None,
    begin_suppress_tokens=None, sequence_bias=None, forced_bos_token_id=None, forced_eos_token_id=None,
    exponential_decay_length_penalty=None, renormalize_logits=False, guidance_scale=None, watermarking_config=None,
    num_beams=1, max_time=None, stop_strings=None)


@functools.lru_cache(maxsize=1)
def _plain_sampling() -> dict[str, Any]:
    """Return the generate() options that switch off what a model's generation_config may add to plain sampling,
    those this transformers version knows (top_h is recent)."""
    from transformers import GenerationConfig
    known = GenerationConfig()
    return {key: value for key, value in _PLAIN_SAMPLING.items() if hasattr(known, key)}


def _cache_argument(model: Any) -> str:
    """Return the name under which this transformers version takes a KV cache (`cache`, formerly `past_key_values`)."""
    import inspect

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"
