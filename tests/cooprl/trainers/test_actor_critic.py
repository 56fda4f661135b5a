"""IAC, MAAC and AC: TD targets and advantages by hand, critic inputs, exact resume, 2-step CLI runs."""

import copy
import json
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch

from cooprl.config import ConfigError, Run, load_config
from cooprl.models.loading import TINY_RANDOM, load_causal_lm, load_tokenizer
from cooprl.models.logprobs import completion_logprobs
from cooprl.rollout.generation import Completion
from cooprl.rollout.tree import rollout
from cooprl.trainers.actor_critic import (ActorCritic, Critic, actor_advantages, build_iac, build_maac,
                                          critic_input_text, td_target, value_errors)
from cooprl.trainers.loop import seed_everything, train_loop
from cooprl.update.policy_gradient import PolicyObjective, policy_gradient_term
from tests.scripted import scripted_task
from tests.cli.test_cli_smoke import SMALL, events, run, trainer_overrides

pytestmark = pytest.mark.slow   # end to end (trainers, command lines, subprocesses): not in `make test-fast`

# ------------------------------------------------------------------------------------------ pure functions


def test_td_target_bootstraps_only_when_the_episode_goes_on():
    assert td_target(-0.625, 0.5, 0.9) == pytest.approx(-0.175)
    assert td_target(-0.625, None, 0.9) == -0.625


def test_advantages_v_q_and_normalization():
    targets, values = [1.0, -1.0, 0.5], [0.5, 0.0, 1.5]
    assert actor_advantages(targets, values, "v", False) == pytest.approx([0.5, -1.0, -1.0])
    # q: the baseline is the buffer's mean Q (2/3), the same for every action
    assert actor_advantages(targets, values, "q", False) == pytest.approx([1 / 3, -5 / 3, -1 / 6])
    normalized = actor_advantages(targets, values, "v", True)
    raw = torch.tensor([0.5, -1.0, -1.0], dtype=torch.float64)
    assert normalized == pytest.approx(((raw - raw.mean()) / raw.std(unbiased=False)).tolist())
    assert actor_advantages([1.0], [0.25], "v", True) == [0.75]  # one sample: nothing to normalize by


def test_value_clipping_keeps_the_larger_error():
    values, targets, old = torch.tensor([1.0, 0.0]), torch.tensor([2.0, 1.0]), torch.tensor([0.0, 0.5])
    assert value_errors(values, targets, old, None).tolist() == [1.0, 1.0]
    # row 0: V moved 1.0 from 0.0, clipped to 0.2 -> error (0.2 - 2)^2 = 3.24 > 1; row 1: within range
    assert value_errors(values, targets, old, 0.2).tolist() == pytest.approx([3.24, 1.0])


def test_maac_critic_input_strings():
    assert critic_input_text(["write aux", "write main"]) == (
        "### Agent 0 prompt\nwrite aux\n\n### Agent 1 prompt\nwrite main")
    assert critic_input_text(["write aux", "write main"], ["def aux(): pass", "return 1"]) == (
        "### Agent 0 prompt\nwrite aux\n\n### Agent 1 prompt\nwrite main\n\n"
        "### Agent 0 response\ndef aux(): pass\n\n### Agent 1 response\nreturn 1")
    # centralized mode: one policy, one prompt; V's text is a prefix of Q's
    assert critic_input_text(["both"], ["<main>x</main>"]) == (
        "### Agent 0 prompt\nboth\n\n### Agent 0 response\n<main>x</main>")


# ------------------------------------------------------------------------------------------ scripted episodes
# turn 1: agent 0 writes 'aaaabbbb' (0.5), agent 1 'aabbbbbb' (0.25): reward 0.375, processed -0.625 (shift -1)
# turn 2: both write 'aaaaaaaa': reward 1.0, processed 0.0
SCRIPT = [["aaaabbbb", "aaaaaaaa"], ["aabbbbbb", "aaaaaaaa"]]


class ConstantValue:
    """A critic that values everything at 0.5."""

    def values(self, prompts, completions, pad_id):
        return torch.full((len(prompts),), 0.5)


def scripted_agent(a):
    def sample(prompts, n):
        turn = prompts[0].count("again:")
        text = SCRIPT[a][turn]
        return [[Completion(text, torch.tensor([1, 2]), torch.tensor([3 + turn]), False) for _ in range(n)]
                for _ in prompts]
    return SimpleNamespace(model=None, sample=sample)


def scripted_actor_critic(trainer, *overrides):
    config = load_config(None, [f"{trainer}.discount=0.9", f"{trainer}.num_turns=2", f"{trainer}.num_generations=1",
                                *overrides])
    critics = [Critic(ConstantValue(), load_tokenizer(TINY_RANDOM), None, reuses_agent_ids=True)
               for _ in range(2 if trainer == "iac" else 1)]
    team = [scripted_agent(0), scripted_agent(1)]
    return ActorCritic(Run.of(config, trainer), scripted_task(), team, critics, centralized=trainer == "maac")


def roll_out_one_item(algorithm):
    """Return the rollout tree of the algorithm's episodes on one scripted item."""
    return rollout(["item 0:"], algorithm.task, algorithm.sample_agent, algorithm.rollout_settings())[0]


@pytest.mark.parametrize("trainer", ["iac", "maac"])
def test_td_targets_and_advantages_of_scripted_episodes(trainer):
    algorithm = scripted_actor_critic(trainer, f"{trainer}.early_termination_threshold=null")
    root = roll_out_one_item(algorithm)
    steps = algorithm.episode_steps(root)
    assert len(steps) == 2 and all(len(s.critics) == len(algorithm.critics) for s in steps)
    for critic in range(len(algorithm.critics)):
        assert [s.critics[critic].target for s in steps] == pytest.approx([-0.625 + 0.9 * 0.5, 0.0])
        seen = [s.critics[critic] for s in steps]
        assert actor_advantages([x.target for x in seen], [x.value for x in seen], "v", False) == pytest.approx(
            [-0.675, -0.5])
    assert [s.actions[1].completion_ids.tolist() for s in steps] == [[3], [4]]


def test_early_termination_ends_the_episode_without_bootstrap():
    algorithm = scripted_actor_critic("iac", "iac.early_termination_threshold=-0.7")  # -0.625 > -0.7: stop
    root = roll_out_one_item(algorithm)
    steps = algorithm.episode_steps(root)
    assert root.terminated_early and len(steps) == 1
    assert steps[0].critics[0].target == pytest.approx(-0.625)


def test_maac_critic_reads_the_joint_text_with_its_own_tokenizer():
    algorithm = scripted_actor_critic("maac", "maac.critic_type=q", "maac.num_turns=1")
    root = roll_out_one_item(algorithm)
    ids = algorithm.episode_steps(root)[0].critics[0].ids
    text = critic_input_text(root.prompts, ["aaaabbbb", "aabbbbbb"])
    assert ids.tolist() == load_tokenizer(TINY_RANDOM)(text)["input_ids"]


def test_iac_critic_on_another_backbone_retokenizes_the_text():
    algorithm = scripted_actor_critic("iac", "iac.critic_type=q", "iac.num_turns=1")
    algorithm.critics[1].reuses_agent_ids = False  # as when critic_model.name differs from the agent's model
    root = roll_out_one_item(algorithm)
    step = algorithm.episode_steps(root)[0]
    assert step.critics[0].ids.tolist() == [1, 2, 3]  # the agent's own prompt and completion ids
    expected = load_tokenizer(TINY_RANDOM)(root.prompts[1] + "aabbbbbb")["input_ids"]
    assert step.critics[1].ids.tolist() == expected


# ------------------------------------------------------------------------------------------ real tiny models
def tiny_config(trainer, tmp_path, name, *overrides):
    return load_config(None, [
        f"agent_model.name={TINY_RANDOM}", "agent_model.device=cpu", "agent_model.temperature=1.0",
        "agent_model.top_p=1.0", f"{trainer}.max_new_tokens=6", f"{trainer}.num_turns=2",
        f"{trainer}.learning_rate=1e-2", f"{trainer}.critic_learning_rate=1e-2", f"{trainer}.rollout_buffer_size=1",
        f"{trainer}.early_termination_threshold=null", f"{trainer}.eval_interval=0", f"{trainer}.eval_num_samples=1",
        "wandb.mode=disabled", f"output.base_dir={tmp_path}", f"output.run_name={name}", *overrides])


@pytest.mark.parametrize("critic_type", ["v", "q"])
def test_value_shapes_read_prompt_or_prompt_and_response(tmp_path, critic_type):
    config = tiny_config("iac", tmp_path, "shapes", f"iac.critic_type={critic_type}", "iac.num_generations=2")
    seed_everything(0)
    algorithm = build_iac(Run.of(config, "iac"), scripted_task())
    root = roll_out_one_item(algorithm)
    steps = algorithm.episode_steps(root)
    assert len(steps) == 4  # two episodes of two turns
    for step in steps:
        for action, seen in zip(step.actions, step.critics):
            expected = action.prompt_ids
            if critic_type == "q":
                expected = torch.cat([action.prompt_ids, action.completion_ids])
            assert torch.equal(seen.ids, expected)
            assert isinstance(seen.value, float)
    values = algorithm.critics[0].model.values([s.critics[0].ids for s in steps], None, 0)
    assert values.shape == (4,)


def train_events(run_dir):
    return [e for e in events(run_dir) if "turn_1/reward_mean" in e]


def run_actor_critic(tmp_path, trainer, name, *overrides):
    config = tiny_config(trainer, tmp_path, name, *overrides)
    seed_everything(config.seed)
    task = scripted_task()
    run = Run.of(config, trainer)
    algorithm = (build_maac if trainer == "maac" else build_iac)(run, task)
    train_loop(run, task, algorithm, tmp_path / name)
    return algorithm


@pytest.mark.parametrize("trainer,overrides", [
    ("iac", ["iac.critic_type=v"]),                                        # a separate critic per agent
    ("iac", ["iac.use_separate_critic=false", "iac.critic_type=q"]),       # a value head on each actor
    ("maac", ["maac.critic_type=q"]),                                      # one centralized critic
], ids=["iac-separate-v", "iac-head-q", "maac-q"])
def test_resume_matches_uninterrupted_run(tmp_path, trainer, overrides):
    # 2 steps, resumed at 1 (4 and 2 before): rollout_buffer_size 1 updates actors and critics at every step, so the
    # checkpoint of step 1 already holds trained weights and optimizer moments, and the step after it trains again
    straight = run_actor_critic(tmp_path, trainer, "straight", f"{trainer}.max_steps=2", *overrides)
    run_actor_critic(tmp_path, trainer, "resumed", f"{trainer}.max_steps=1", *overrides)
    resumed = run_actor_critic(tmp_path, trainer, "resumed", f"{trainer}.max_steps=2",
                               "checkpoint.resume_from_checkpoint=latest", *overrides)
    a, b = train_events(tmp_path / "straight"), train_events(tmp_path / "resumed")
    assert [e["step"] for e in b] == [1, 2]
    value_key = "critic_0/value_loss" if trainer == "maac" or "false" not in overrides[0] else "agent_0/value_loss"
    for key in ("turn_1/reward_mean", "agent_0/loss", "agent_1/loss", value_key, "critic_0/value_mean"):
        assert [e[key] for e in a] == [e[key] for e in b], key
    assert len(straight.models) == 2 + len(straight.critics)
    for m1, m2 in zip(straight.models, resumed.models):
        for (n1, p1), (_, p2) in zip(m1.named_parameters(), m2.named_parameters()):
            assert torch.equal(p1, p2), n1
    # the critics trained (so the equality above is not vacuous)
    fresh = load_causal_lm(TINY_RANDOM, device="cpu")
    critic = straight.critics[0].model
    assert not torch.equal(fresh.model.embed_tokens.weight, critic.lm.model.embed_tokens.weight)
    assert any(e[value_key] > 0 for e in a)


# ------------------------------------------------------------------------------------------ the real CLI
def cli_overrides(trainer, tmp_path, name):
    return [*SMALL, *trainer_overrides(trainer, tmp_path, name), f"{trainer}.rollout_buffer_size=2"]


@pytest.mark.parametrize("trainer,extra", [
    ("iac", ["iac.critic_type=q"]),
    ("maac", []),
    ("ac", ["ac.use_separate_critic=false"]),
])
def test_cli_two_steps(tmp_path, trainer, extra):
    result = run([f"train_{trainer}.py", "--config", f"configs/{trainer}_che_config.yaml", "--override",
                  *cli_overrides(trainer, tmp_path, trainer), *extra], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = tmp_path / trainer
    train = train_events(run_dir)
    assert [e["step"] for e in train] == [1, 2]
    assert "agent_0/loss" in train[1] and "critic_0/value_mean" in train[0]  # the update ran at step 2
    assert any("eval/turn_1/pass@1" in e for e in events(run_dir))
    checkpoint = run_dir / "checkpoints" / "checkpoint-2"
    num_agents = 1 if trainer == "ac" else 2
    num_critics = 1 if trainer == "maac" else num_agents
    folders = sorted(p.name for p in checkpoint.iterdir() if p.name.startswith("agent_"))
    assert folders == [f"agent_{i}" for i in range(num_agents + num_critics)]
    assert (checkpoint / f"agent_{num_agents}" / "value_head.safetensors").is_file()
    if trainer == "iac":  # evaluate.py loads actors and critics from the checkpoint
        evaluation = run(["evaluate.py", "--config", str(run_dir / "config.yaml"), "--checkpoint", str(checkpoint),
                          "--trainer", "iac", "--output", str(tmp_path / "eval.json")], tmp_path)
        assert evaluation.returncode == 0, evaluation.stderr[-3000:]
        assert "eval/turn_1/pass@1" in json.loads((tmp_path / "eval.json").read_text())


def test_centralized_maac_two_steps(tmp_path):
    result = run(["train_maac.py", "--config", "configs/maac_che_config.yaml", "--override",
                  *cli_overrides("maac", tmp_path, "c"), "maac.collaboration_mode=centralized", "maac.num_turns=1",
                  "maac.max_new_tokens=16"], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    train = train_events(tmp_path / "c")
    assert len(train) == 2 and "parse_missing_main" in json.dumps(train[0])
    assert "agent_1/loss" not in train[1] and "critic_0/value_loss" in train[1]  # one policy, one critic


# ------------------------------------------------------------------------------------------ the actors' objective
def buffered_iac(tmp_path, *overrides):
    """Return IAC on the tiny model with one item's two episodes of two turns in its buffer (4 turns, not trained)."""
    config = tiny_config("iac", tmp_path, "objective", "iac.num_generations=2", "iac.rollout_buffer_size=8",
                         *overrides)
    seed_everything(0)
    algorithm = build_iac(Run.of(config, "iac"), scripted_task())
    algorithm.buffer = algorithm.episode_steps(roll_out_one_item(algorithm))
    return algorithm


ADVANTAGES = {0: 1.0, 1: -0.5, 2: 2.0, 3: -1.25}


def hand_loss(model, samples, loss_type, max_new_tokens):
    """Return agent 0's policy loss on `samples` by TRL's definition of `loss_type`, from one forward."""
    with torch.no_grad():
        logps, mask = completion_logprobs(model, [s.prompt_ids for s in samples],
                                          [s.completion_ids for s in samples], 0)
    adv = torch.tensor([s.advantage for s in samples], dtype=logps.dtype)
    live = mask * torch.tensor([0.0 if s.truncated else 1.0 for s in samples])[:, None]
    per_token = -logps * adv[:, None] * live
    if loss_type == "sequence_sum":
        return (per_token.sum(-1).sum() / len(samples)).item()
    if loss_type == "grpo":
        return ((per_token.sum(-1) / mask.sum(-1)).sum() / len(samples)).item()
    if loss_type == "dapo":
        return (per_token.sum() / live.sum()).item()
    return (per_token.sum(-1).sum() / max_new_tokens / len(samples)).item()   # dr_grpo


@pytest.mark.parametrize("loss_type", ["sequence_sum", "grpo", "dapo", "dr_grpo"])
def test_an_actor_loss_is_trls_loss_type_and_leaves_masked_truncations_out(tmp_path, loss_type):
    algorithm = buffered_iac(tmp_path, f"iac.loss_type={loss_type}", "iac.mask_truncated_completions=true")
    assert algorithm.objective == PolicyObjective(loss_type, max_new_tokens=6, mask_truncated=True)
    # turns 1 and 3 truncated, 0 and 2 ended: the truncated ones leave the loss but count in sequence_sum's mean
    for k, step in enumerate(algorithm.buffer):
        step.actions[0] = replace(step.actions[0], truncated=k % 2 == 1)
    samples = [replace(algorithm.buffer[k].actions[0], advantage=a) for k, a in ADVANTAGES.items()]
    expected = hand_loss(algorithm.team[0].model, samples, loss_type, max_new_tokens=6)
    metrics = algorithm.actor_step(0, list(ADVANTAGES), ADVANTAGES, value_targets=None)
    assert metrics["loss"] == pytest.approx(expected, rel=1e-5) and expected != 0
    assert metrics["truncated_masked"] == 2 and metrics["trained_samples"] == 2


def test_a_value_head_keeps_its_mean_over_samples_under_dapo(tmp_path):
    losses = []
    for loss_type, all_masked in (("sequence_sum", False), ("dapo", False), ("dapo", True)):
        algorithm = buffered_iac(tmp_path, "iac.use_separate_critic=false", f"iac.loss_type={loss_type}",
                                 "iac.mask_truncated_completions=true")
        for step in algorithm.buffer:   # every completion masked: no token of the policy loss, the head still trains
            step.actions[0] = replace(step.actions[0], truncated=all_masked)
        metrics = algorithm.actor_step(0, list(ADVANTAGES), ADVANTAGES, value_targets=None)
        losses.append(metrics["value_loss"])
    assert losses[1] == pytest.approx(losses[0], rel=1e-6) and losses[0] > 0
    assert losses[2] == pytest.approx(losses[0], rel=1e-6)
    assert metrics["trained_samples"] == 0 and metrics["grad_norm"] > 0


def sgd_step_weights(algorithm, agent=0):
    """Take agent `agent`'s actor step on ADVANTAGES with SGD at lr 1 (new weights = old - gradient); return them."""
    model = algorithm.team[agent].model
    algorithm.team[agent].optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    metrics = algorithm.actor_step(agent, list(ADVANTAGES), ADVANTAGES, value_targets=None)
    return metrics, {n: p.detach().clone() for n, p in model.named_parameters()}


def test_one_unclipped_on_policy_pass_of_an_actor_is_todays_gradient_bit_for_bit(tmp_path):
    # today's gradient, by hand: -sum_i A_i sum_t log pi(token_it) / N on the step's one forward batch
    plain = buffered_iac(tmp_path)
    samples = [replace(plain.buffer[k].actions[0], advantage=a) for k, a in ADVANTAGES.items()]
    model = copy.deepcopy(plain.team[0].model).train()
    batch, = policy_gradient_term(model, samples, 0, batch_size=8).batches
    logps, _ = completion_logprobs(model, [s.prompt_ids for s in batch], [s.completion_ids for s in batch], 0)
    adv = torch.tensor([s.advantage for s in batch], dtype=logps.dtype)
    (-(logps.sum(-1) * adv).sum() / len(samples)).backward()
    by_hand = {n: p.detach() - 1.0 * p.grad for n, p in model.named_parameters()}
    _, today = sgd_step_weights(plain)
    # the first of 2 clipped passes: its samples carry the sampling policy's log-probs (scored after the rollout)
    clipped = buffered_iac(tmp_path, "iac.num_iterations=2")
    assert all(s.actions[0].sampling_logps is not None for s in clipped.buffer)
    metrics, first_pass = sgd_step_weights(clipped)
    assert metrics["ratio_min"] == metrics["ratio_max"] == 1.0 and metrics["clip_fraction"] == 0.0
    for name in today:
        assert torch.equal(today[name], by_hand[name]), name
        assert torch.equal(today[name], first_pass[name]), name
    assert not torch.equal(today["model.embed_tokens.weight"], plain.models[1].model.embed_tokens.weight)


def test_num_iterations_takes_each_step_of_the_update_again_and_clips_the_second_pass(tmp_path):
    algorithm = buffered_iac(tmp_path, "iac.num_iterations=2", "iac.epsilon=0.01", "iac.train_batch_size=2",
                             "iac.rollout_buffer_size=2")
    metrics = algorithm.update()
    # per agent: 2 turns of 2 samples, one step each, twice; each step's critic step twice too
    assert metrics["update/actor_optimizer_steps"] == 8
    assert metrics["agent_0/ratio_max"] > 1.0 or metrics["agent_0/ratio_min"] < 1.0   # the policy moved between
    assert metrics["agent_0/clip_fraction"] > 0 and not algorithm.buffer


def test_tied_groups_is_not_an_actor_critic_key():
    # critic-based advantages (target - V) come from no group of G equal returns: nothing to tie
    with pytest.raises(ConfigError, match="iac has no tied_groups, these trainers do: magrpo, grpo"):
        load_config(None, ["iac.tied_groups=drop"])


# 2 clipped passes, DAPO's token mean and clip-higher; the buffer (3 turn samples per agent, 2 a step) holds step 3's
# samples and their sampling log-probs across the checkpoint
OBJECTIVE = ["iac.num_iterations=2", "iac.loss_type=dapo", "iac.epsilon_high=0.28", "iac.rollout_buffer_size=3"]


def test_resume_matches_uninterrupted_run_with_clipped_passes_and_dapo(tmp_path):
    straight = run_actor_critic(tmp_path, "iac", "straight", "iac.max_steps=4", *OBJECTIVE)
    run_actor_critic(tmp_path, "iac", "resumed", "iac.max_steps=3", *OBJECTIVE)
    resumed = run_actor_critic(tmp_path, "iac", "resumed", "iac.max_steps=4",
                               "checkpoint.resume_from_checkpoint=latest", *OBJECTIVE)
    a, b = train_events(tmp_path / "straight"), train_events(tmp_path / "resumed")
    assert [e["step"] for e in b] == [1, 2, 3, 4]
    assert [{k: v for k, v in e.items() if not k.startswith(("time/", "wall"))} for e in a] == \
        [{k: v for k, v in e.items() if not k.startswith(("time/", "wall"))} for e in b]
    updates = [e for e in a if "agent_0/loss" in e]
    assert [e["step"] for e in updates] == [2, 4]
    assert all(e["update/actor_optimizer_steps"] == 8 and "agent_0/clip_fraction" in e for e in updates)
    for m1, m2 in zip(straight.models, resumed.models):
        for (n1, p1), (_, p2) in zip(m1.named_parameters(), m2.named_parameters()):
            assert torch.equal(p1, p2), n1
    fresh = load_causal_lm(TINY_RANDOM, device="cpu")   # trained: the equality is not vacuous
    assert not torch.equal(fresh.model.embed_tokens.weight, straight.models[0].model.embed_tokens.weight)


def test_a_critics_list_of_another_length_says_what_to_give():
    from cooprl.config import ConfigError
    from cooprl.trainers.actor_critic import critic_model_names
    config = load_config(None, ["critics=[offline:tiny-random]"])
    with pytest.raises(ConfigError) as err:
        critic_model_names(config, [], 2)
    assert str(err.value) == ("critics: 1 model names given for 2 critic(s); give one per critic, or critics=null "
                              "for critic_model.name (else its agent's model)")
