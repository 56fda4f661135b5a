"""The value head shared by critics and the reward model: token choice, padding invariance, save/load."""

import torch

from cooprl.checkpoint import load_agent_weights, save_checkpoint
from cooprl.models.loading import TINY_RANDOM, load_causal_lm
from cooprl.models.value_model import ValueModel


def _inputs():
    prompts = [torch.tensor([5, 6, 7]), torch.tensor([9, 10, 11, 12, 13, 14])]
    completions = [torch.tensor([20, 21, 22, 23]), torch.tensor([30])]
    return prompts, completions


def test_values_read_the_last_prompt_or_completion_token_and_ignore_padding():
    torch.manual_seed(0)
    critic = ValueModel(load_causal_lm(TINY_RANDOM, device="cpu"))
    prompts, completions = _inputs()
    with torch.no_grad():
        v = critic.values(prompts, None, pad_id=0)
        q = critic.values(prompts, completions, pad_id=0)
        assert v.shape == q.shape == (2,)
        for row in range(2):  # a padded row gives the value of that row alone
            assert torch.allclose(v[row], critic.values([prompts[row]], None, 0)[0], atol=1e-5)
            assert torch.allclose(q[row], critic.values([prompts[row]], [completions[row]], 0)[0], atol=1e-5)
        # Q of (prompt, completion) is V of the concatenated sequence: the value at its last token
        joined = torch.cat([prompts[0], completions[0]])
        assert torch.allclose(q[0], critic.values([joined], None, 0)[0], atol=1e-5)
        assert not torch.allclose(q[0], v[0])


def test_first_values_are_near_zero_on_the_real_model_scale():
    # a fresh head must not start at a sizeable value (critics' first TD errors, the reward model's first scores);
    # the final hidden state's RMS is about 2 on SmolLM2, so the head is scaled down from 1/sqrt(hidden)
    torch.manual_seed(0)
    lm = load_causal_lm(TINY_RANDOM, device="cpu")
    critic = ValueModel(lm)
    prompts, completions = _inputs()
    with torch.no_grad():
        critic.lm.model.norm.weight.mul_(2.0)   # hidden states of SmolLM2's size
        values = critic.values(prompts, completions, 0)
    assert values.abs().max() < 0.1, values


def test_value_model_checkpoint_round_trip(tmp_path):
    torch.manual_seed(0)
    critic = ValueModel(load_causal_lm(TINY_RANDOM, device="cpu"))
    with torch.no_grad():
        critic.head.weight.add_(1.0)
        next(critic.lm.parameters()).add_(0.01)
    prompts, completions = _inputs()
    path = save_checkpoint(tmp_path, 1, [critic], {})
    fresh = ValueModel(load_causal_lm(TINY_RANDOM, device="cpu"))
    load_agent_weights(fresh, path, 0)
    with torch.no_grad():
        assert torch.equal(fresh.values(prompts, completions, 0), critic.values(prompts, completions, 0))


def test_shared_head_saves_only_the_head(tmp_path):
    actor = load_causal_lm(TINY_RANDOM, device="cpu")
    head_on_actor = ValueModel(actor, owns_lm=False)
    assert head_on_actor.trunk_parameters() == []
    path = save_checkpoint(tmp_path, 1, [head_on_actor], {})
    assert sorted(p.name for p in (path / "agent_0").iterdir()) == ["value_head.safetensors"]
