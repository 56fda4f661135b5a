"""IAC, MAAC and AC: TD targets and advantages by hand, critic inputs, exact resume, 2-step CLI runs."""

import json
from types import SimpleNamespace

import pytest
import torch

from cooprl.config import Run, load_config
from cooprl.models.loading import TINY_RANDOM, load_causal_lm, load_tokenizer
from cooprl.rollout.generation import Completion
from cooprl.rollout.tree import rollout
from cooprl.trainers.actor_critic import (ActorCritic, Critic, actor_advantages, build_iac, build_maac,
                                          critic_input_text, td_target, value_errors)
from cooprl.trainers.loop import seed_everything, train_loop
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


def test_a_critics_list_of_another_length_says_what_to_give():
    from cooprl.config import ConfigError
    from cooprl.trainers.actor_critic import critic_model_names
    config = load_config(None, ["critics=[offline:tiny-random]"])
    with pytest.raises(ConfigError) as err:
        critic_model_names(config, [], 2)
    assert str(err.value) == ("critics: 1 model names given for 2 critic(s); give one per critic, or critics=null "
                              "for critic_model.name (else its agent's model)")
