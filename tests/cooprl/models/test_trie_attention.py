"""Unit tests of cooprl/models/trie_attention.py: the trie attention's SDPA calls, K/V heads repeated where
a masked call needs it."""

import pytest
import torch

from cooprl.models.logprobs import TokenTrie


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
