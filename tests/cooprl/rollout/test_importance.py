"""Unit tests of cooprl/rollout/importance.py: each sampled token's truncated importance weight against vLLM's
sampler."""

import math

import pytest
import torch

from cooprl.rollout.generation import Completion, SamplingParams
from cooprl.rollout.importance import importance_weights
from tests.cooprl.rollout.test_vllm_generation import model_sampler_logprobs, sampled_completions, tiny  # noqa: F401


def test_importance_weights_compare_the_models_sampler_with_vllms(tiny):
    model, tokenizer = tiny
    params = SamplingParams(temperature=0.7)
    completions = sampled_completions(tokenizer)
    own = model_sampler_logprobs(model, tokenizer, completions, params)
    # vLLM's log-probs: equal (weight 1), log 1.5 lower (1.5), log 3 lower (3, capped at 2), unknown (1)
    offsets = [torch.zeros(5), torch.full((3,), math.log(1.5)), torch.tensor([math.log(3), 0, math.nan, 0, 0, 0])]
    for c, logps, offset in zip(completions, own, offsets):
        c.sampler_logprobs = logps - offset
    model.train()
    weights = importance_weights(model, completions, tokenizer.pad_token_id, params, cap=2.0)
    assert model.training   # scored in eval mode, the mode restored
    assert torch.allclose(weights[0], torch.ones(5), atol=1e-5)
    assert torch.allclose(weights[1], torch.full((3,), 1.5), atol=1e-5)
    assert torch.allclose(weights[2], torch.tensor([2.0, 1, 1, 1, 1, 1]), atol=1e-5)
    with pytest.raises(ValueError, match="sampler_logprobs"):
        importance_weights(model, [Completion("", completions[0].prompt_ids, completions[0].completion_ids, False)],
                           tokenizer.pad_token_id, params, cap=2.0)
    # a token the model's own sampler would never draw (outside its top-k) weighs 0
    top1 = SamplingParams(temperature=0.7, top_k=1)
    for c in completions:
        c.sampler_logprobs = torch.zeros(len(c.completion_ids))
    weights = torch.cat(importance_weights(model, completions, tokenizer.pad_token_id, top1, cap=2.0))
    kept = torch.cat(model_sampler_logprobs(model, tokenizer, completions, top1)) == 0   # log 1: the argmax
    assert torch.equal(weights, kept.float()) and not kept.all()


@pytest.mark.parametrize("mode,expected", [
    ("token_truncate", [0.5, 2.0, 1.0]),     # each token's ratio, at most the cap
    ("token_mask", [0.5, 0.0, 1.0]),         # a token past the cap weighs nothing
    ("sequence_truncate", [2.0, 2.0, 2.0]),  # the completion's ratio (0.5 x 4 x 1 = 2), at most the cap, everywhere
    ("sequence_mask", [2.0, 2.0, 2.0])])     # 2 is within the cap: kept
def test_trls_four_importance_modes(mode, expected):
    from cooprl.rollout.importance import bounded_ratios
    log_ratios = torch.log(torch.tensor([0.5, 4.0, 1.0]))
    assert bounded_ratios(log_ratios, 2.0, mode).tolist() == pytest.approx(expected)
    assert bounded_ratios(log_ratios, 1.5, "sequence_mask").tolist() == [0.0, 0.0, 0.0]
