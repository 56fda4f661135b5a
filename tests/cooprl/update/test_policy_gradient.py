"""Unit tests of cooprl/update/policy_gradient.py: one policy step, whatever the order and the batching of its
samples."""

import copy

import pytest
import torch

from cooprl.models.loading import TINY_RANDOM, load_causal_lm
from cooprl.models.logprobs import completion_logprobs
from cooprl.samples import TrainSample
from tests.scripted import policy_gradient_step
from tests.cooprl.models.test_logprobs import mixed_group, tiny, two_turn_tree  # noqa: F401 (tiny: a fixture)
from tests.cooprl.rollout.test_vllm_generation import sampled_completions, tiny_tokenizer


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


def policy_step(model, samples, lr=1.0):
    """Return (the step's metrics, each parameter's change) of one plain SGD policy_gradient_step on `samples`."""
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=lr)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    metrics = policy_gradient_step(model, optimizer, samples, 0, max_grad_norm=None)
    return metrics, {n: p.detach() - before[n] for n, p in model.named_parameters()}


def test_policy_gradient_step_weights_each_tokens_term():
    tokenizer = tiny_tokenizer()
    completions = sampled_completions(tokenizer)
    advantages = [1.0, -0.5, 2.0]

    def samples(weights):
        return [TrainSample(c.prompt_ids, c.completion_ids, a, w)
                for c, a, w in zip(completions, advantages, weights)]

    # weights of 1 take exactly the uncorrected step
    plain_metrics, plain = policy_step(load_causal_lm(TINY_RANDOM, device="cpu"), samples([None] * 3))
    ones_metrics, ones = policy_step(load_causal_lm(TINY_RANDOM, device="cpu"),
                                     samples([torch.ones(len(c.completion_ids)) for c in completions]))
    assert all(torch.equal(plain[n], ones[n]) for n in plain)
    assert ones_metrics["loss"] == plain_metrics["loss"] and "is_weight_mean" not in plain_metrics
    assert (ones_metrics["is_weight_mean"], ones_metrics["is_weight_max"]) == (1.0, 1.0)

    # known weights: the loss is -sum_i A_i sum_t w_it log pi(token_it) / N, by hand, and so is its gradient
    weights = [torch.tensor([0.5, 1.0, 2.0, 1.5, 0.0]), torch.tensor([2.0, 2.0, 0.25]), torch.linspace(0.2, 1.2, 6)]
    metrics, step = policy_step(load_causal_lm(TINY_RANDOM, device="cpu"), samples(weights))
    model = load_causal_lm(TINY_RANDOM, device="cpu")
    model.train()
    logps, _ = completion_logprobs(model, [c.prompt_ids for c in completions],
                                   [c.completion_ids for c in completions], 0)
    loss = -sum(a * (w * logps[i, :len(w)]).sum() for i, (a, w) in enumerate(zip(advantages, weights))) / 3
    loss.backward()
    assert metrics["loss"] == pytest.approx(loss.item(), rel=1e-5)
    for name, p in model.named_parameters():
        assert torch.allclose(step[name], -p.grad, atol=1e-6), name
    tokens = torch.cat(weights)
    assert metrics["is_weight_mean"] == pytest.approx(tokens.mean().item()) and metrics["is_weight_max"] == 2.0


def test_one_unclipped_pass_of_the_ppo_objective_is_todays_update():
    # the sampling log-probs are the model's own (on-policy, as the first of num_iterations passes): the ratio is 1
    # and its gradient today's, -adv x grad log pi, bit for bit
    from cooprl.update.engine import optimizer_step
    from cooprl.update.policy_gradient import PolicyObjective, policy_gradient_term
    tokenizer = tiny_tokenizer()
    completions = sampled_completions(tokenizer)
    samples = [TrainSample(c.prompt_ids, c.completion_ids, adv) for c, adv in zip(completions, [1.0, -0.5, 2.0])]
    model = load_causal_lm(TINY_RANDOM, device="cpu")
    with torch.no_grad():
        logps, _ = completion_logprobs(model, [s.prompt_ids for s in samples], [s.completion_ids for s in samples], 0)
    on_policy = [TrainSample(s.prompt_ids, s.completion_ids, s.advantage, sampling_logps=row[:len(s.completion_ids)])
                 for s, row in zip(samples, logps)]
    grads = []
    for objective, batch in [(PolicyObjective(), samples), (PolicyObjective(clipped=True, epsilon=0.0), on_policy)]:
        trained = copy.deepcopy(model)
        term = policy_gradient_term(trained, batch, 0, objective=objective)
        optimizer = torch.optim.SGD(trained.parameters(), lr=0.0)
        for loss_batch in term.batches:
            trained.train()
            term.loss(loss_batch, len(batch))[0].backward()
        grads.append({n: p.grad.clone() for n, p in trained.named_parameters() if p.grad is not None})
        optimizer_step([optimizer], [term], [trained], weight=len(batch), max_grad_norm=None)
    assert grads[0].keys() == grads[1].keys() and grads[0]
    for name in grads[0]:
        assert torch.equal(grads[0][name], grads[1][name]), name


def test_a_masked_truncation_leaves_the_loss_but_not_the_count():
    from cooprl.update.policy_gradient import PolicyObjective, policy_gradient_term
    tokenizer = tiny_tokenizer()
    completions = sampled_completions(tokenizer)
    samples = [TrainSample(c.prompt_ids, c.completion_ids, 1.0, truncated=k == 0) for k, c in enumerate(completions)]
    masked = PolicyObjective(mask_truncated=True)
    term = policy_gradient_term(None, samples, 0, objective=masked)
    assert [s for batch in term.batches for s in batch] == samples[1:]   # the truncated one is not run
    assert masked.weight(samples) == len(samples)                        # but it counts in the step's mean
    tokens = PolicyObjective(loss_type="dapo", mask_truncated=True).weight(samples)
    assert tokens == sum(len(s.completion_ids) for s in samples[1:])     # dapo: the loss's tokens
