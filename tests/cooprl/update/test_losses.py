"""The algorithms' math (cooprl.update.losses) on hand-computed numbers: the pieces the engine's loss functions are
built from. Most are also pinned where their algorithm is tested (test_rollout, test_actor_critic, test_madpo,
test_reward_model); these cover the ones that are new with the module."""

import math

import pytest
import torch

from cooprl.update import losses
from cooprl.update.losses import nll_loss


def test_sft_loss_is_the_summed_negative_log_likelihood_of_the_real_tokens():
    logps = torch.log(torch.tensor([[0.5, 0.25, 0.9], [0.1, 1.0, 1.0]]))
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])   # row 0's third token and row 1's tail: padding
    expected = -(math.log(0.5) + math.log(0.25)) - math.log(0.1)
    assert losses.sft_loss(logps, mask).item() == pytest.approx(expected, rel=1e-6)
    weighted = -(math.log(0.5) + math.log(0.25)) * 2.0 - math.log(0.1) * 0.5
    assert losses.sft_loss(logps, mask, torch.tensor([2.0, 0.5])).item() == pytest.approx(weighted, rel=1e-6)


def test_policy_gradient_loss_weighs_each_token_and_each_advantage():
    logps = torch.tensor([[-1.0, -2.0], [-0.5, 0.0]], requires_grad=True)
    loss = losses.policy_gradient_loss(logps, torch.tensor([2.0, -1.0]), torch.tensor([[1.0, 0.5], [1.0, 0.0]]))
    assert loss.item() == pytest.approx(-(2.0 * (-1.0 - 1.0) + -1.0 * -0.5))   # -sum_i adv_i sum_t w_t logp_t
    loss.backward()
    assert logps.grad.tolist() == [[-2.0, -1.0], [1.0, 0.0]]


def test_k3_kl_is_zero_at_the_reference_and_positive_elsewhere():
    policy = torch.tensor([[-1.0, -2.0]])
    mask = torch.ones(1, 2)
    assert losses.k3_kl(policy, policy.clone(), mask).item() == 0.0
    d = -0.5 - -1.0   # reference -0.5 against policy -1.0 on the first token, the second masked out
    value = losses.k3_kl(policy, torch.tensor([[-0.5, 5.0]]), torch.tensor([[1.0, 0.0]])).item()
    assert value == pytest.approx(math.exp(d) - d - 1)


def test_nll_loss_is_the_mean_negative_log_prob_of_the_completion_tokens():
    logps = torch.tensor([[-1.0, -2.0, -9.0], [-0.5, -7.0, -7.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert nll_loss(logps, mask).item() == pytest.approx((1.0 + 2.0 + 0.5) / 3)
    assert nll_loss(logps, torch.zeros_like(mask)).item() == 0.0   # no token: no loss, not NaN


def test_each_loss_type_weighs_tokens_as_trl_defines_it():
    # two completions of 1 and 3 tokens, every token's loss 1 (the second's last is padding)
    token_losses = torch.tensor([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0]])
    mask = torch.tensor([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0]])
    total = {t: losses.aggregate_token_losses(token_losses, mask, t, max_new_tokens=4).item()
             for t in losses.LOSS_TYPES}
    # divided by the engine's denominator: 2 samples (sequence_sum, grpo, dr_grpo) or 4 tokens (dapo)
    assert total == {"sequence_sum": 4.0, "grpo": 2.0, "dapo": 4.0, "dr_grpo": 1.0}
    with pytest.raises(ValueError, match="loss_type 'bnpo'"):
        losses.aggregate_token_losses(token_losses, mask, "bnpo", 4)


def test_the_ppo_ratio_is_clipped_only_where_it_would_gain():
    logps = torch.log(torch.tensor([[1.5, 0.5, 1.1]]))
    sampling = torch.zeros(1, 3)
    up, ratio = losses.clipped_token_losses(logps, sampling, torch.tensor([1.0]), 0.2, 0.28)
    assert ratio[0].tolist() == pytest.approx([1.5, 0.5, 1.1])
    assert up[0].tolist() == pytest.approx([-1.28, -0.5, -1.1])   # a positive advantage: the gain stops at 1.28
    down, _ = losses.clipped_token_losses(logps, sampling, torch.tensor([-1.0]), 0.2, 0.28)
    assert down[0].tolist() == pytest.approx([1.5, 0.8, 1.1])     # a negative one: the gain stops at 0.8
