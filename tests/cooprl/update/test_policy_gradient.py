"""Unit tests of cooprl/update/policy_gradient.py: one policy step, whatever the order and the batching of its samples."""

import copy

import pytest
import torch

from cooprl.samples import TrainSample
from cooprl.update.policy_gradient import policy_gradient_step
from tests.cooprl.models.test_logprobs import mixed_group, tiny, two_turn_tree


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
