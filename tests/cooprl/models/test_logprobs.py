"""Token-trie packing of the update's forward: the same log-probs and gradients as the padded layout."""

import copy

import pytest
import torch

from cooprl.models import logprobs
from cooprl.models.loading import TINY_RANDOM, load_causal_lm, load_tokenizer
from cooprl.models.logprobs import TokenTrie, _padded_logprobs, completion_logprobs, group_by_prompt
from cooprl.samples import TrainSample
from cooprl.update.policy_gradient import policy_gradient_step


@pytest.fixture(scope="module")
def tiny():
    return load_causal_lm(TINY_RANDOM, device="cpu"), load_tokenizer(TINY_RANDOM)


def mixed_group():
    """Two shared prompts, one single prompt; completions of different lengths, interleaved order."""
    gen = torch.Generator().manual_seed(0)
    a, b, c = (torch.randint(5, 1000, (n,), generator=gen) for n in (23, 9, 14))
    prompts = [a, b, a, a, c, b]
    completions = [torch.randint(5, 1000, (n,), generator=gen) for n in (6, 1, 11, 3, 5, 8)]
    return prompts, completions


def two_turn_tree():
    """A 2-turn-like tree: G = 3 turn-1 samples of one prompt, then per turn-1 sample a turn-2 prompt that
    starts with most of the turn-1 prompt and then differs (previous answer + feedback), with G samples each;
    plus a sequence that is a prefix of another one and a sample sharing nothing."""
    gen = torch.Generator().manual_seed(1)
    rand = lambda n: torch.randint(5, 1000, (n,), generator=gen)  # noqa: E731
    prompt1 = rand(40)
    prompts, completions = [prompt1] * 3, [rand(n) for n in (7, 12, 4)]
    for k, answer in enumerate(completions[:3]):
        prompt2 = torch.cat([prompt1[:-2], rand(2), answer, rand(5 + k)])  # template end differs: not a prefix
        prompts += [prompt2] * 3
        completions += [rand(n) for n in (5, 9, 2)]
    prompts.append(torch.cat([prompt1, completions[1][:5]]))  # prompt + part of a sibling's completion
    completions.append(completions[1][5:9])                   # ... whose whole sequence is a prefix of that one
    prompts.append(rand(11))
    completions.append(rand(6))
    return prompts, completions


def test_trie_layout():
    sequences = [[1, 2, 3, 4], [1, 2, 5], [1, 2], [7, 8], [1, 2, 3, 4, 9]]
    trie = TokenTrie(sequences)
    input_ids, position_ids = trie.layout()
    allowed = trie.allowed()
    # segments depth first: [1 2] [3 4] [9] [5] | [7 8]; every token stored once
    assert trie.num_tokens == 8
    assert input_ids.tolist() == [1, 2, 3, 4, 9, 5, 7, 8]
    assert position_ids.tolist() == [0, 1, 2, 3, 4, 2, 0, 1]   # depth in the token's own path
    assert trie.columns == [[0, 1, 2, 3], [0, 1, 5], [0, 1], [6, 7], [0, 1, 2, 3, 4]]
    for seq, cols in zip(sequences, trie.columns):
        assert input_ids[cols].tolist() == seq
        # each token attends to exactly the tokens of its path up to itself
        for k, col in enumerate(cols):
            assert allowed[col].nonzero().flatten().tolist() == sorted(cols[:k + 1])


def test_trie_shares_the_turn1_prompt_across_the_tree():
    prompts, completions = two_turn_tree()
    trie = TokenTrie([torch.cat([p, c]).tolist() for p, c in zip(prompts, completions)])
    total = sum(len(p) + len(c) for p, c in zip(prompts, completions))
    # the 38 shared tokens of the turn-1 prompt are stored once for the 13 sequences that start with them
    assert trie.num_tokens < total - 12 * 38
    assert len(group_by_prompt(prompts)) == 6


@pytest.mark.parametrize("case", [mixed_group, two_turn_tree])
def test_trie_logprobs_equal_padded(tiny, case):
    model, tokenizer = tiny
    prompts, completions = case()
    packed, mask = completion_logprobs(model, prompts, completions, tokenizer.pad_token_id)
    padded, padded_mask = _padded_logprobs(model, prompts, completions, tokenizer.pad_token_id)
    assert torch.equal(mask, padded_mask)
    assert mask.sum(-1).tolist() == [len(c) for c in completions]
    assert (packed[mask == 0] == 0).all()
    assert torch.allclose(packed, padded, atol=1e-5)
    # and each sample equals its own forward, alone
    for row, (p, c) in enumerate(zip(prompts, completions)):
        single, _ = completion_logprobs(model, [p], [c], tokenizer.pad_token_id)
        assert torch.allclose(packed[row, :len(c)], single[0], atol=1e-5)


def test_layout_choice_and_parts(tiny, monkeypatch):
    """No sharing -> padded layout; a trie over MAX_TRIE_TOKENS is scored in parts, same numbers."""
    model, tokenizer = tiny
    calls = []
    for name in ("_padded_logprobs", "_trie_logprobs"):
        monkeypatch.setattr(logprobs, name, (lambda f, n: lambda *a: calls.append(n) or f(*a))(getattr(logprobs, name), name))
    gen = torch.Generator().manual_seed(2)
    prompts = [torch.randint(5, 1000, (n,), generator=gen) for n in (8, 12, 5)]
    completions = [torch.randint(5, 1000, (n,), generator=gen) for n in (3, 1, 4)]
    completion_logprobs(model, prompts, completions, tokenizer.pad_token_id)
    assert calls == ["_padded_logprobs"]
    prompts, completions = two_turn_tree()
    whole, _ = completion_logprobs(model, prompts, completions, tokenizer.pad_token_id)
    monkeypatch.setattr(logprobs, "MAX_TRIE_TOKENS", 150)
    calls.clear()
    parts, mask = completion_logprobs(model, prompts, completions, tokenizer.pad_token_id)
    assert len(calls) > 1 and mask.shape == whole.shape
    assert torch.allclose(parts, whole, atol=1e-5)


@pytest.mark.parametrize("case", [mixed_group, two_turn_tree])
def test_trie_update_gives_the_padded_gradient(tiny, case):
    model, tokenizer = tiny
    prompts, completions = case()
    grads = []
    for fn in (completion_logprobs, _padded_logprobs):
        model.zero_grad()
        logps, _ = fn(model, prompts, completions, tokenizer.pad_token_id)
        (logps.sum(-1) * torch.linspace(-1, 1, len(prompts))).sum().backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    model.zero_grad()
    assert grads[0].keys() == grads[1].keys()
    for name in grads[0]:
        assert torch.allclose(grads[0][name], grads[1][name], atol=1e-5), name


@pytest.mark.parametrize("case", [mixed_group, two_turn_tree])
def test_policy_step_groups_siblings_whatever_their_order(tiny, case):
    """Interleaved sibling groups and whole trees give the same step as one sample per forward (float noise)."""
    model, tokenizer = tiny
    prompts, completions = case()
    advantages = torch.linspace(-1, 1, len(prompts)).tolist()
    samples = [TrainSample(p, c, adv) for p, c, adv in zip(prompts, completions, advantages)]
    results = []
    for batch_size in (None, 1):
        copy_ = copy.deepcopy(model)
        optimizer = torch.optim.SGD(copy_.parameters(), lr=1.0)
        metrics = policy_gradient_step(copy_, optimizer, samples, tokenizer.pad_token_id, batch_size=batch_size)
        results.append((metrics, copy_))
    (m1, a), (m2, b) = results
    assert m1["loss"] == pytest.approx(m2["loss"], abs=1e-5)
    for (name, p1), p2 in zip(a.named_parameters(), b.parameters()):
        assert torch.allclose(p1, p2, atol=1e-5), name


def test_shared_prefill_samples_the_same_tokens_as_plain_generate(tiny):
    """The sampler prefills each prompt once for its G samples: same tokens as generate(num_return_sequences=G)."""
    from cooprl.rollout.generation import HFGenerator, SamplingParams
    model, tokenizer = tiny
    generator = HFGenerator(model, tokenizer, max_prompt_tokens=64)
    prompts, params = ["def f(x):", "a longer prompt, with more tokens", "x"], SamplingParams(max_new_tokens=8, temperature=1.0)
    torch.manual_seed(0)
    ours = [c.completion_ids.tolist() for group in generator.sample(prompts, 3, params) for c in group]
    encoded = generator.encode_prompts(prompts)
    width = max(len(e) for e in encoded)
    input_ids = torch.full((len(prompts), width), tokenizer.pad_token_id)
    attention = torch.zeros_like(input_ids)
    for row, ids in enumerate(encoded):
        input_ids[row, width - len(ids):], attention[row, width - len(ids):] = ids, 1
    torch.manual_seed(0)
    plain = model.generate(input_ids=input_ids, attention_mask=attention, do_sample=True, max_new_tokens=8,
                           num_return_sequences=3, temperature=1.0, top_p=1.0, top_k=0,
                           pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    assert ours == [generator._trim(row, params)[1].tolist() for row in plain[:, width:]]


@pytest.mark.parametrize("kv_heads", [2, 4])
def test_masked_gqa_segments_repeat_their_kv_heads_where_sdpa_needs_it(monkeypatch, kv_heads):
    """On CUDA a masked SDPA call with `enable_gqa` can only run the math kernel, so the trie attention repeats the
    K/V heads of segments with a mask there (`REPEAT_KV_FOR_MASKS`); seen here on the CPU by listing it. The output is
    the same with and without the repeat, and the repeat happens exactly where a mask and grouped-query attention
    meet: never for a causal segment, never for a model whose K/V heads are its query heads."""
    from cooprl.models import trie_attention as ta
    trie = TokenTrie([[1, 2, 3, 4, 5], [1, 2, 3, 6, 7, 8], [1, 2, 9], [10, 11, 12]])   # roots, children, a split
    gen = torch.Generator().manual_seed(0)
    query = torch.randn(1, 4, trie.num_tokens, 8, generator=gen)
    key, value = (torch.randn(1, kv_heads, trie.num_tokens, 8, generator=gen) for _ in range(2))
    calls = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def spy(q, k, v, attn_mask=None, enable_gqa=False, **kwargs):
        calls.append((attn_mask is not None, k.shape[1], v.shape[1], enable_gqa))
        return sdpa(q, k, v, attn_mask=attn_mask, enable_gqa=enable_gqa, **kwargs)
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)

    def attend() -> torch.Tensor:
        calls.clear()
        with ta.trie_attention(torch.nn.Linear(1, 1), trie):
            return ta.trie_attention_forward(None, query, key, value, ta.PLACEHOLDER_MASK)[0]

    plain, plain_calls = attend(), list(calls)
    monkeypatch.setattr(ta, "REPEAT_KV_FOR_MASKS", ("cpu", "cuda"))
    repeated = attend()
    assert torch.equal(repeated, plain)
    gqa = kv_heads < 4
    assert sorted(set(plain_calls)) == [(False, kv_heads, kv_heads, gqa), (True, kv_heads, kv_heads, gqa)]
    if gqa:   # masked segments: heads repeated, a plain call; causal ones untouched
        assert sorted(set(calls)) == [(False, kv_heads, kv_heads, True), (True, 4, 4, False)]
    else:
        assert calls == plain_calls
