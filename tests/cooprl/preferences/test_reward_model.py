"""The joint reward model: its input text, the Bradley-Terry loss, the held-out split, learning a toy preference."""

import math
import random

import pytest
import torch

from cooprl.models.loading import TINY_RANDOM, load_causal_lm, load_tokenizer
from cooprl.models.value_model import ValueModel
from cooprl.preferences.pairs import PreferencePair
from cooprl.preferences.reward_model import (RewardModel, RewardTraining, bradley_terry_loss, reward_input, split_pairs,
                                 train_reward_model)

pytestmark = pytest.mark.slow   # end to end (trainers, command lines, subprocesses): not in `make test-fast`


def tiny_reward_model(max_length=64):
    torch.manual_seed(0)
    lm = load_causal_lm(TINY_RANDOM, device="cpu", torch_dtype="float32")
    return RewardModel(ValueModel(lm), load_tokenizer(TINY_RANDOM), max_length)


def test_reward_input_labels_the_prompts_and_every_agents_output():
    prompt, answer = reward_input(["Write aux.\n", "Write main."], ["def aux(x):\n    return x\n", "  return aux(1)"])
    assert prompt + answer == (
        "### Prompt of agent 1\nWrite aux.\n\n"
        "### Prompt of agent 2\nWrite main.\n\n"
        "### Output of agent 1\ndef aux(x):\n    return x\n\n"
        "### Output of agent 2\nreturn aux(1)\n")


def test_reward_input_shows_a_shared_or_joint_prompt_once():
    prompt, answer = reward_input(["Solve it."], ["<auxiliary>...</auxiliary><main>...</main>"])
    assert prompt + answer == "### Prompt\nSolve it.\n\n### Joint answer\n<auxiliary>...</auxiliary><main>...</main>\n"
    prompt, _ = reward_input(["Same.", "Same."], ["a", "b"])
    assert prompt == "### Prompt\nSame.\n\n"


def test_encode_cuts_the_prompt_from_the_left_and_keeps_the_answers():
    rm = tiny_reward_model(max_length=24)
    long_prompt = " ".join(f"word{i}" for i in range(200))
    prompt_ids, answer_ids = rm.encode([long_prompt], ["return 1"])
    assert len(prompt_ids) + len(answer_ids) == 24
    assert answer_ids[-1].item() == rm.tokenizer.eos_token_id
    _, full_answer = reward_input([long_prompt], ["return 1"])
    assert rm.tokenizer.decode(answer_ids[:-1]) == full_answer
    assert rm.tokenizer.decode(prompt_ids).endswith("word199\n\n")  # the end of the prompt survives


def test_bradley_terry_loss_on_hand_computed_numbers():
    chosen = torch.tensor([2.0, 0.0], requires_grad=True)
    rejected = torch.tensor([1.0, 1.0])
    loss = bradley_terry_loss(chosen, rejected)
    # -log sigmoid(1) = log(1 + e^-1) = 0.313262; -log sigmoid(-1) = 1.313262
    assert loss.item() == pytest.approx((math.log(1 + math.exp(-1)) + math.log(1 + math.exp(1))) / 2, abs=1e-6)
    assert loss.item() == pytest.approx(0.813262, abs=1e-6)
    loss.backward()  # d/d r_w = -sigmoid(r_l - r_w) / n
    assert chosen.grad.tolist() == pytest.approx([-0.268941 / 2, -0.731059 / 2], abs=1e-6)
    weighted = bradley_terry_loss(chosen.detach(), rejected, torch.tensor([1.0, 3.0]))
    assert weighted.item() == pytest.approx((0.313262 + 3 * 1.313262) / 4, abs=1e-6)


def test_split_pairs_is_seeded_and_holds_out_at_least_one():
    train, held = split_pairs(10, 0.2, seed=3)
    assert (train, held) == split_pairs(10, 0.2, seed=3)
    assert len(held) == 2 and sorted(train + held) == list(range(10))
    assert len(split_pairs(3, 0.1, seed=0)[1]) == 1
    assert split_pairs(5, 0.0, seed=0)[1] == []


def _toy_pairs(n, seed=0):
    rng = random.Random(seed)
    words = ["alpha", "beta", "gamma", "delta", "x", "y", "total", "count", "value", "items"]

    def answer(tag):
        return f"def f({rng.choice(words)}):\n    return {rng.choice(words)} + {rng.randint(0, 99)}  # {tag}"

    return [PreferencePair(item_id=str(i), prompts=[f"task {i}: {rng.choice(words)}"], chosen=[answer("good")],
                           rejected=[answer("bad")], chosen_reward=1.0, rejected_reward=0.0) for i in range(n)]


def test_reward_model_learns_a_separable_toy_preference():
    rm = tiny_reward_model()
    pairs = _toy_pairs(48)
    metrics = train_reward_model(rm, pairs, RewardTraining(learning_rate=1e-3, epochs=2, eval_fraction=0.25, seed=0))
    assert metrics["reward_model/train_pairs"] == 36 and metrics["reward_model/eval_pairs"] == 12
    assert metrics["reward_model/eval_accuracy"] > 0.9
    good, bad = rm.score([(["new task"], ["def f(z):\n    return z  # good"]),
                          (["new task"], ["def f(z):\n    return z  # bad"])])
    assert good > bad


def test_training_in_chunks_of_pairs_equals_one_forward_per_batch(monkeypatch):
    # memory: a batch's gradient is accumulated over forwards of PAIRS_PER_FORWARD pairs; the step must not change
    import cooprl.preferences.reward_model as reward_model_module
    pairs, weights = _toy_pairs(8), [1.0, 0.5] * 4
    trained = []
    for per_forward in (2, 8):
        monkeypatch.setattr(reward_model_module, "PAIRS_PER_FORWARD", per_forward)
        rm = tiny_reward_model()
        metrics = train_reward_model(rm, pairs, RewardTraining(learning_rate=1e-3, epochs=1, eval_fraction=0.0,
                                                               seed=0), weights=weights)
        trained.append((rm.model.head.weight.detach().clone(), metrics["reward_model/train_loss"]))
    assert torch.allclose(trained[0][0], trained[1][0], atol=1e-6)
    assert abs(trained[0][1] - trained[1][1]) < 1e-5
