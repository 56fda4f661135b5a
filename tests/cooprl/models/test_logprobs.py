"""Token-trie packing of the update's forward: the same log-probs and gradients as the padded layout."""

import pytest
import torch

from cooprl.models import logprobs
from cooprl.models.loading import TINY_RANDOM, load_causal_lm, load_tokenizer
from cooprl.models.logprobs import TokenTrie, _padded_logprobs, completion_logprobs, group_by_prompt


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
        monkeypatch.setattr(logprobs, name, (lambda f, n: lambda *a: calls.append(n) or f(*a))(getattr(logprobs, name),
                                                                                               name))
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
