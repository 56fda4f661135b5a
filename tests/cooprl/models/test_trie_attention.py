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


def test_the_masked_segments_kernel_is_chosen_at_run_time():
    """Where flash takes the call (CUDA, half precision, sm80+: torch's can_use_flash_attention decides), masked
    segments pass the lower-right causal bias (no mask, no K/V repeat); elsewhere a CUDA grouped-query call repeats
    its K/V heads, and the CPU keeps the bool mask."""
    from cooprl.models import trie_attention as ta
    assert ta.masked_kernel("cuda", True, True) == ta.masked_kernel("cuda", False, True) == "lower_right"
    assert ta.masked_kernel("cuda", True, False) == "repeat"
    assert ta.masked_kernel("cuda", False, False) == ta.masked_kernel("cpu", True, False) == "mask"
    q = torch.zeros(1, 4, 3, 8)
    assert not ta._flash_takes(q, q, q, 0.0, False)   # never on the CPU


@pytest.mark.parametrize("kv_heads", [2, 4])
def test_every_masked_segment_is_lower_right_causal(monkeypatch, kv_heads):
    """The masks segment_plan builds equal torch's lower-right causal bias, materialised, and the trie attention with
    the bias in their place (what flash runs on a GPU; torch materialises it on the CPU) gives the same output."""
    import warnings

    from cooprl.models import trie_attention as ta
    trie = TokenTrie([[1, 2, 3, 4, 5], [1, 2, 3, 6, 7, 8], [1, 2, 9], [10, 11, 12], [1, 2, 3, 6, 7, 13, 14]])
    masked = [seg for seg in ta.segment_plan(trie, torch.device("cpu")) if seg.mask is not None]
    assert len(masked) >= 3
    for seg in masked:
        n = seg.end - seg.start
        assert torch.equal(seg.mask, ta.causal_lower_right(n, seg.mask.shape[1])._materialize())
    gen = torch.Generator().manual_seed(0)
    query = torch.randn(1, 4, trie.num_tokens, 8, generator=gen)
    key, value = (torch.randn(1, kv_heads, trie.num_tokens, 8, generator=gen) for _ in range(2))

    def attend() -> torch.Tensor:
        with ta.trie_attention(torch.nn.Linear(1, 1), trie), warnings.catch_warnings():
            warnings.simplefilter("ignore")   # torch's notes that no fused kernel takes the bias on the CPU
            return ta.trie_attention_forward(None, query, key, value, ta.PLACEHOLDER_MASK)[0]

    plain = attend()
    monkeypatch.setattr(ta, "masked_kernel", lambda *args: "lower_right")
    torch.testing.assert_close(attend(), plain, rtol=0, atol=1e-6)
