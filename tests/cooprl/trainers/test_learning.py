"""Learning tests: every trainer family raises the reward of a tiny learnable task, and one update moves the
log-probs the right way.

The task (tests/learnable.py) needs no sandbox: a 2-layer character-level model writes 6 characters per agent and
the reward is the share of lowercase letters (random model: about 0.25, max 1.0). Each run takes a fixed seed and a
few steps at a high learning rate, and must show (1) the mean training reward of its last steps above that of its
first steps and (2) the evaluation reward after training above the one before, each by a margin. The margins were
picked with headroom over several seeds of both the model and the run (see the report in issue 14).

Config keys the tests rely on are set explicitly (update schedule, buffer sizes, normalization, clipping, weight
decay, pair selection), so a change of a default does not change what is tested; keys that only some versions of
the config have are set when the section has them (`_if_known`).
"""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import pytest
import torch

from cooprl.config import TRAINER_SECTIONS, Run, load_config
from cooprl.models.loading import load_causal_lm, load_tokenizer
from cooprl.models.logprobs import completion_logprobs
from cooprl.preferences.pairs import PreferencePair
from cooprl.samples import TrainSample
from cooprl.trainers.loop import evaluation_seed, seed_everything, train_loop
from tests.scripted import policy_gradient_step
from tests.learnable import HEAD, build_char_model, lowercase_task

pytestmark = pytest.mark.slow   # end to end (trainers, command lines, subprocesses): not in `make test-fast`

FIRST_LAST = 4   # steps averaged at each end of the training curve


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    # a 64-wide model gains nothing from threads, and on a busy 2-core machine the thread pool's spinning made each
    # forward 20x slower (72 ms vs 3 ms): one thread keeps these runs at a few seconds
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def char_model(tmp_path_factory) -> Path:
    return build_char_model(tmp_path_factory.mktemp("char_model") / "model", seed=0)


def _if_known(trainer: str, **keys) -> list[str]:
    """Return overrides `trainer.key=value` for the keys (and values, where a key has choices) this version's section
    has; others are left out."""
    fields = {f.name: f for f in dataclasses.fields(TRAINER_SECTIONS[trainer])}
    known = lambda k, v: k in fields and v in (fields[k].metadata.get("choices") or (v,))
    return [f"{trainer}.{k}={v}" for k, v in keys.items() if known(k, v)]


def _builder(trainer: str):
    from cooprl.trainers.actor_critic import build_iac, build_maac
    from cooprl.trainers.madpo import build_madpo
    from cooprl.trainers.magrpo import build_magrpo
    from cooprl.trainers.marlhf import build_marlhf
    return {"magrpo": build_magrpo, "grpo": build_magrpo, "iac": build_iac, "ac": build_iac, "maac": build_maac,
            "madpo": build_madpo, "madpo_iter": build_madpo, "marlhf": build_marlhf,
            "marlhf_iter": build_marlhf}[trainer]


def common(t: str, steps: int, lr: float = 1e-2) -> list[str]:
    """Overrides every learning run shares: short answers, sampling at T=1, a fixed plan of `steps` steps."""
    return [f"{t}.max_new_tokens=6", f"{t}.num_turns=1", f"{t}.learning_rate={lr}", f"{t}.weight_decay=0.0",
            f"{t}.max_grad_norm=1.0", f"{t}.max_steps={steps}", f"{t}.num_train_epochs={steps // 4}",
            f"{t}.eval_interval=0", f"{t}.eval_num_samples=2", f"{t}.eval_num_generations=8",
            f"{t}.temperature=1.0", f"{t}.top_p=1.0", *_if_known(t, reference_kl_coef=0.0)]


def grpo_keys(t: str) -> list[str]:
    """MAGRPO's update: G=4 siblings, mean baseline, an update after every item (one node per item at one turn)."""
    return [f"{t}.num_generations=4", f"{t}.advantage_mode=mean", f"{t}.advantage_normalization=true",
            f"{t}.rollout_buffer_size=1", f"{t}.joint_mode=aligned",
            *_if_known(t, update_schedule="nodes", train_batch_size="null")]


def actor_critic_keys(t: str) -> list[str]:
    """4 episodes per item, one update per item (buffer of 4 episodes), a separate critic learning fast."""
    return [f"{t}.num_generations=4", f"{t}.rollout_buffer_size=4", f"{t}.critic_type=v",
            f"{t}.use_separate_critic=true", f"{t}.critic_learning_rate=1e-3", f"{t}.advantage_normalization=true",
            *_if_known(t, train_batch_size="null")]


def preference_keys(t: str, candidates: int, pairs: int) -> list[str]:
    return [f"{t}.preference_num_candidates={candidates}", f"{t}.preference_pairs_per_sample={pairs}",
            f"{t}.pair_selection=reward_gap", f"{t}.min_reward_gap=0.0"]


def iterative_keys(t: str, comparator: str = "current") -> list[str]:
    """Two iterations (each a pass over the step plan), no replay of earlier iterations' pairs."""
    return [f"{t}.num_iterations=2", f"{t}.comparator_policy={comparator}", f"{t}.preference_replay_mode=current"]


def marlhf_keys(t: str, candidates: int = 24, pairs: int = 48) -> list[str]:
    # The reward model needs data to rank unseen answers: 24 candidates on each of the 4 problems, the 48 largest
    # gaps of each (192 pairs). With 32 pairs per problem or fewer, its held-out accuracy was still about 1.0 but
    # the policies found answers it overrated on 1 of 6 seeds (task reward flat or falling). `reward_max_length` 64
    # keeps the answers and the end of the prompt: the problem does not change the reward here.
    return [*grpo_keys(t), f"{t}.num_generations=8", *preference_keys(t, candidates, pairs), f"{t}.rl_algorithm=magrpo",
            f"{t}.reward_model_learning_rate=2e-3", f"{t}.reward_model_epochs=4", f"{t}.normalize_reward=true",
            f"{t}.reward_max_length=64", f"{t}.reward_eval_fraction=0.2",
            *_if_known(t, reward_train_batch_size=8, reward_freeze_backbone="false", preference_scoring_reward="task")]


def two_turns(t: str) -> list[str]:
    """Two turns, the second always played (no early termination), its return discounted into the first's."""
    return [f"{t}.num_turns=2", f"{t}.discount=0.9", f"{t}.early_termination_threshold=null"]


def madpo_keys(t: str, collection: str, candidates: int = 8, pairs: int = 4) -> list[str]:
    """`candidates` per problem, its `pairs` largest gaps; one DPO step per training step (all of its pairs)."""
    return [*preference_keys(t, candidates, pairs), *_if_known(t, pair_collection=collection, train_batch_size="null",
                                                     rollout_buffer_size="null")]


# run -> (trainer, its overrides, steps (per iteration), margin of the training curve (None: not checked),
#         margin of the evaluation)
RUNS = {
    "magrpo": ("magrpo", grpo_keys, 16, 0.1, 0.15),
    "grpo": ("grpo", grpo_keys, 16, 0.1, 0.15),
    "iac": ("iac", actor_critic_keys, 16, 0.1, 0.15),
    "maac": ("maac", actor_critic_keys, 16, 0.1, 0.15),
    "ac": ("ac", actor_critic_keys, 16, 0.1, 0.15),
    # the value head on the actor (no separate critic); two turns, where the critic matters: the turn-1 target
    # bootstraps from its value of turn 2 (with one turn, every episode of an item starts from the same prompt and the
    # normalized advantages are the centered rewards whatever the critic says)
    "iac_value_head": ("iac", lambda t: [*actor_critic_keys(t), f"{t}.use_separate_critic=false",
                                         f"{t}.value_clip_range=0.2"], 16, 0.1, 0.15),
    "iac_two_turns": ("iac", lambda t: [*actor_critic_keys(t), *two_turns(t)], 16, 0.1, 0.15),
    # two turns: the turn-2 prompt holds the turn-1 answer (the task's transition), returns reward + discount x child;
    # 16 items are 16 optimizer steps with update_schedule items and 80 with nodes (1 + 4 nodes per item): both learn
    "magrpo_two_turns": ("magrpo", lambda t: [*grpo_keys(t), *two_turns(t)], 16, 0.1, 0.15),
    # online: every step pairs new candidates of the current policy (its training reward is theirs)
    "madpo_online": ("madpo", lambda t: madpo_keys(t, "online"), 16, 0.1, 0.15),
    # offline (upstream's): the pairs come once from the start policy, so the training curve stays flat by design
    "madpo_offline": ("madpo", lambda t: madpo_keys(t, "offline", 16, 8), 16, None, 0.15),
    "madpo_iter": ("madpo_iter", lambda t: [*madpo_keys(t, "online"), *iterative_keys(t)], 8, 0.1, 0.15),
    # upstream's iterative set-up: a frozen copy of the start policy as comparator, the policy's candidate i against
    # the comparator's i (8 of the 16 candidates are the comparator's); the second iteration's candidates come from
    # the policy trained in the first, so the curve rises between iterations
    "madpo_iter_copy": ("madpo_iter", lambda t: [*madpo_keys(t, "offline", 16, 8), *iterative_keys(t, "copy"),
                                                 *_if_known(t, pair_selection="comparator_reward")], 8, 0.08, 0.15),
    # a sequential team (agent 1 reads agent 0's answer, as planner+coder): each pair keeps the loser's own prompts
    "madpo_sequential": ("madpo", lambda t: madpo_keys(t, "online"), 16, 0.1, 0.15),
    "marlhf": ("marlhf", marlhf_keys, 16, 0.08, 0.05),
    # the RL phase as IAC on the learned reward (its own keys from the iac section: 8 episodes per update; with 4 the
    # learned reward's noise left 1 of 6 seeds flat)
    "marlhf_iac": ("marlhf", lambda t: [*marlhf_keys(t), f"{t}.rl_algorithm=iac", *actor_critic_keys("iac"),
                                        "iac.num_generations=8", "iac.rollout_buffer_size=8"], 16, 0.08, 0.05),
    # the second iteration refines the same reward model on new pairs: fewer per iteration suffice
    "marlhf_iter": ("marlhf_iter", lambda t: [*marlhf_keys(t, 16, 32), *iterative_keys(t)], 8, 0.08, 0.05),
}


def learn(model: Path, tmp_path: Path, trainer: str, overrides: list[str], seed: int = 0,
          sequential: bool = False) -> dict:
    """Run `trainer` on the lowercase task (`sequential`: as a sequential team); return the eval reward before and
    after and the training curve."""
    agents = 1 if trainer in ("grpo", "ac") else 2
    config = load_config(None, [f"agent_model.name={model}", "agent_model.device=cpu",
                                "agent_model.torch_dtype=float32",
                                "wandb.mode=disabled", f"output.base_dir={tmp_path}", "output.run_name=run",
                                f"seed={seed}", "checkpoint.checkpoint_total_limit=1", *overrides])
    seed_everything(config.seed)
    task = lowercase_task(agents)
    if sequential:   # agent 1's prompt ends with the head of agent 0's answer
        task = dataclasses.replace(task, follow_prompt=lambda item, a, prompt, earlier: f"{prompt}{earlier[0][:HEAD]}|")
    algorithm = _builder(trainer)(Run.of(config, trainer), task)
    with torch.random.fork_rng(devices=[]):   # as the loop evaluates: its own generator, training's untouched
        torch.manual_seed(evaluation_seed(config.seed))
        before = algorithm.evaluate(task.eval_items)["eval/turn_1/reward_mean"]
    summary = train_loop(Run.of(config, trainer), task, algorithm, tmp_path / "run")
    events = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    # MARLHF trains on its learned reward: whether the policies learned is the task's reward
    key = "turn_1/task_reward_mean" if trainer.startswith("marlhf") else "turn_1/reward_mean"
    curve = [e[key] for e in events if key in e]
    return {"before": before, "after": summary["final_eval"]["eval/turn_1/reward_mean"], "curve": curve}


@pytest.mark.parametrize("run", list(RUNS))
def test_trainer_raises_the_reward_of_a_learnable_task(char_model, tmp_path, monkeypatch, run):
    # the reward model's forwards take 2 pairs each to bound memory on real models; 8 on this one is 3x faster
    monkeypatch.setattr("cooprl.preferences.reward_model.PAIRS_PER_FORWARD", 8)
    trainer, keys, steps, curve_margin, eval_margin = RUNS[run]
    result = learn(char_model, tmp_path, trainer, [*common(trainer, steps), *keys(trainer)],
                   sequential=run.endswith("_sequential"))
    curve = result["curve"]
    first, last = sum(curve[:FIRST_LAST]) / FIRST_LAST, sum(curve[-FIRST_LAST:]) / FIRST_LAST
    report = (f"{run}: eval {result['before']:.3f} -> {result['after']:.3f}; training reward "
              f"{first:.3f} (first {FIRST_LAST}) -> {last:.3f} (last {FIRST_LAST}); curve "
              f"{[round(c, 2) for c in curve]}")
    print(report)
    assert len(curve) == steps * (2 if trainer.endswith("_iter") else 1), report
    if curve_margin is not None:
        assert last > first + curve_margin, report
    assert result["after"] > result["before"] + eval_margin, report


# ---------------------------------------------------------------------------------------------- one update
@pytest.fixture(scope="module")
def char_lm(char_model):
    return load_causal_lm(str(char_model), device="cpu", torch_dtype="float32"), load_tokenizer(str(char_model))


def _sequence_logp(model, tokenizer, prompt: torch.Tensor, completions: list[torch.Tensor]) -> torch.Tensor:
    with torch.no_grad():
        logps, _ = completion_logprobs(model, [prompt] * len(completions), completions, tokenizer.pad_token_id)
    return logps.sum(-1)


@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
def test_one_policy_gradient_update_raises_positive_and_lowers_negative_completions(char_lm, optimizer):
    # the update of MAGRPO, GRPO, IAC, MAAC, AC and MARLHF's RL phase: loss = -sum log pi(completion) * advantage
    base, tokenizer = char_lm
    model = copy.deepcopy(base)
    ids = lambda text: torch.tensor(tokenizer(text, add_special_tokens=False)["input_ids"])
    prompt = ids("Q0 AGENT 0:")
    good, bad, other = ids("abcdef"), ids("#!X%Q9"), ids("K?")
    opt = (torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0) if optimizer == "adamw"
           else torch.optim.SGD(model.parameters(), lr=0.1))
    before = _sequence_logp(model, tokenizer, prompt, [good, bad, other])
    samples = [TrainSample(prompt, good, 1.0), TrainSample(prompt, bad, -1.0), TrainSample(prompt, other, 0.0)]
    metrics = policy_gradient_step(model, opt, samples, tokenizer.pad_token_id, max_grad_norm=1.0)
    after = _sequence_logp(model, tokenizer, prompt, [good, bad, other])
    assert metrics["trained_samples"] == 2.0 and metrics["skipped_nonfinite"] == 0.0
    assert after[0] > before[0] + 0.05, (before, after)     # positive advantage: more likely
    assert after[1] < before[1] - 0.05, (before, after)     # negative advantage: less likely


def test_advantage_sign_decides_the_direction_on_separate_prompts(char_lm):
    # one sample per prompt: no sibling to share the gradient with, the sign alone decides
    base, tokenizer = char_lm
    ids = lambda text: torch.tensor(tokenizer(text, add_special_tokens=False)["input_ids"])
    prompt, completion = ids("E1 AGENT 1:"), ids("hello!")
    for sign in (1.0, -1.0):
        model = copy.deepcopy(base)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
        before = _sequence_logp(model, tokenizer, prompt, [completion])[0]
        policy_gradient_step(model, opt, [TrainSample(prompt, completion, sign)], tokenizer.pad_token_id)
        after = _sequence_logp(model, tokenizer, prompt, [completion])[0]
        assert (after - before) * sign > 0.05, (sign, before, after)


def _pair(task, item: str, chosen: list[str], rejected: list[str]) -> PreferencePair:
    return PreferencePair(item, task.first_prompts(item), chosen, rejected, 1.0, 0.0)


@pytest.mark.parametrize("trainer,reference_model", [("madpo", False), ("madpo", True), ("madpo_iter", False)])
def test_one_dpo_update_raises_the_chosen_log_ratio_against_the_rejected(char_model, tmp_path, trainer,
                                                                         reference_model):
    from cooprl.trainers.madpo import build_madpo
    task = lowercase_task(2)
    t = trainer
    config = load_config(None, [f"agent_model.name={char_model}", "agent_model.device=cpu", "wandb.mode=disabled",
                                f"output.base_dir={tmp_path}", f"{t}.learning_rate=1e-3", f"{t}.weight_decay=0.0",
                                f"{t}.max_grad_norm=1.0", f"{t}.reference_model={str(reference_model).lower()}",
                                f"{t}.dpo_beta=0.1", *_if_known(t, reference_kl_coef=0.0, train_batch_size="null",
                                                              rollout_buffer_size="null")])
    seed_everything(0)
    algorithm = build_madpo(Run.of(config, t), task)
    pairs = [_pair(task, "Q0", ["abcdef", "ghijkl"], ["#!X%Q9", "ZZ?.10"]),
             _pair(task, "Q1", ["xyzzyq", "mnopqr"], ["A B C ", "$$$$$$"])]
    tok = algorithm.team[0].tokenizer
    logp = lambda a, side: [_sequence_logp(algorithm.team[a].model, tok, algorithm.team[a].generator.encode_prompts(
        [p.prompts[a]])[0], [torch.tensor(tok(getattr(p, side)[a], add_special_tokens=False)["input_ids"])])[0]
        for p in pairs]
    with torch.no_grad():
        margins_before = [algorithm.margins_and_kl(a, pairs)[0] for a in (0, 1)]
    chosen_before = [logp(a, "chosen") for a in (0, 1)]
    rejected_before = [logp(a, "rejected") for a in (0, 1)]
    metrics = algorithm.update(pairs, [1.0, 1.0])
    assert metrics["dpo/pairs"] == 2.0 and metrics["dpo/skipped_nonfinite"] == 0.0
    with torch.no_grad():
        margins_after = [algorithm.margins_and_kl(a, pairs)[0] for a in (0, 1)]
    for a in (0, 1):
        # Δ = log π(chosen) - log π(rejected) (minus the reference's Δ): rises for every pair, for every agent
        assert (margins_after[a] > margins_before[a] + 0.05).all(), (a, margins_before[a], margins_after[a])
        # and it rises because the chosen got more likely and the rejected less likely
        for k in range(len(pairs)):
            assert logp(a, "chosen")[k] > chosen_before[a][k]
            assert logp(a, "rejected")[k] < rejected_before[a][k]


def test_one_reward_model_epoch_raises_the_chosen_score_against_the_rejected(char_model):
    # MARLHF's learned reward: Bradley-Terry training moves r(chosen) - r(rejected) up
    from cooprl.preferences.reward_model import RewardModel, RewardTraining, train_reward_model
    from cooprl.models.value_model import ValueModel
    task = lowercase_task(2)
    torch.manual_seed(0)
    reward_model = RewardModel(ValueModel(load_causal_lm(str(char_model), device="cpu", torch_dtype="float32")),
                               load_tokenizer(str(char_model)), 256)
    pairs = [_pair(task, "Q0", ["abcdef", "ghijkl"], ["#!X%Q9", "ZZ?.10"]),
             _pair(task, "Q1", ["xyzzyq", "mnopqr"], ["A B C ", "$$$$$$"])]
    gap = lambda: [c - r for c, r in zip(reward_model.score([(p.prompts, p.chosen) for p in pairs]),
                                         reward_model.score([(p.prompts, p.rejected) for p in pairs]))]
    before = gap()
    train_reward_model(reward_model, pairs, RewardTraining(learning_rate=1e-3, epochs=1, eval_fraction=0.0, seed=0))
    after = gap()
    assert all(a > b for a, b in zip(after, before)), (before, after)


@pytest.mark.parametrize("trainer", ["magrpo", "grpo", "iac", "maac", "ac"])
def test_one_trainer_step_raises_the_best_sample_over_the_worst(char_model, tmp_path, trainer):
    # end to end through the trainer's own advantages (group baseline, or TD target - critic value) and update:
    # of one item's 4 samples, the one of the best joint answer gets more likely, and more so than the worst one
    extra = (grpo_keys(trainer) if trainer in ("magrpo", "grpo") else actor_critic_keys(trainer))
    config = load_config(None, [f"agent_model.name={char_model}", "agent_model.device=cpu", "wandb.mode=disabled",
                                f"output.base_dir={tmp_path}", *common(trainer, 4, lr=1e-3), *extra])
    seed_everything(config.seed)
    task = lowercase_task(1 if trainer in ("grpo", "ac") else 2)
    algorithm = _builder(trainer)(Run.of(config, trainer), task)
    start = [copy.deepcopy(agent.model) for agent in algorithm.team]
    sampled = []
    sample = algorithm.sample_agent

    def recording(agent, prompts, n):
        out = sample(agent, prompts, n)
        sampled.append((agent, out[0]))
        return out

    algorithm.sample_agent = recording
    metrics = algorithm.train_step(task.train_items[0], 1)
    assert any(k.endswith("/grad_norm") and v > 0 for k, v in metrics.items()), metrics   # an update happened
    groups = {agent: completions for agent, completions in sampled}
    rewards = [s.total for s in task.score([task.train_items[0]] * 4,
                                           [[groups[a][g].text for a in sorted(groups)] for g in range(4)])]
    best, worst = rewards.index(max(rewards)), rewards.index(min(rewards))
    assert rewards[best] > rewards[worst], rewards
    mean = sum(rewards) / len(rewards)
    for a, agent in enumerate(algorithm.team):
        change = []
        for completion in groups[a]:
            old = _sequence_logp(start[a], agent.tokenizer, completion.prompt_ids, [completion.completion_ids])[0]
            new = _sequence_logp(agent.model, agent.tokenizer, completion.prompt_ids, [completion.completion_ids])[0]
            change.append((new - old).item())
        report = (trainer, a, rewards, change)
        # one item, one turn, one prompt per agent: every trainer's advantage is the centered (normalized) reward,
        # so the step must raise the objective sum_g A_g log pi(g), raise the best sample and favour it over the worst
        # (with 4 samples sharing parameters, a sample with A < 0 may still rise a little: the direct test above
        # checks the pure negative direction)
        assert sum((r - mean) * c for r, c in zip(rewards, change)) > 0, report
        assert change[best] > 0 and change[best] > change[worst], report
