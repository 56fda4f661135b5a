"""Shared-prompt packing of the update's forward: the same log-probs and gradients as the padded layout."""

import copy

import pytest
import torch

from cooprl.logprobs import _padded_logprobs, completion_logprobs, group_by_prompt, pack_groups
from cooprl.models import TINY_RANDOM, load_causal_lm, load_tokenizer
from cooprl.policy_update import TrainSample, policy_gradient_step


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


def test_packing_layout():
    prompts, completions = mixed_group()
    assert group_by_prompt(prompts) == [[0, 2, 3], [1, 5], [4]]
    packed = pack_groups(prompts, completions, group_by_prompt(prompts), pad_id=0)
    width_p = 23
    assert packed["width_p"] == width_p and packed["input_ids"].shape == (3, width_p + 6 + 11 + 3)
    assert packed["row_of"] == [0, 1, 0, 0, 2, 1] and packed["offset_of"] == [0, 0, 6, 17, 0, 1]
    # the second completion of row 0 sits after the first one, its positions restart after the prompt
    assert packed["position_ids"][0, width_p + 6:width_p + 17].tolist() == list(range(23, 34))
    allowed = packed["allowed"][0]
    first, second = width_p, width_p + 6
    assert allowed[second, :width_p].all()                  # sees the whole prompt
    assert not allowed[second, first:second].any()          # never a sibling completion
    assert allowed[second + 3, second:second + 4].all() and not allowed[second + 3, second + 4:].any()  # causal


def test_packed_logprobs_equal_padded(tiny):
    model, tokenizer = tiny
    prompts, completions = mixed_group()
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


def test_packed_update_gives_the_padded_gradient(tiny):
    model, tokenizer = tiny
    prompts, completions = mixed_group()
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


def test_policy_step_groups_siblings_whatever_their_order(tiny):
    """Interleaved sibling groups give the same step as a layout of one sample per forward (float noise)."""
    model, tokenizer = tiny
    prompts, completions = mixed_group()
    samples = [TrainSample(p, c, adv) for p, c, adv in zip(prompts, completions, (0.5, -1.0, 0.25, -0.5, 1.0, 0.75))]
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
    from cooprl.generation import HFGenerator, SamplingParams
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
