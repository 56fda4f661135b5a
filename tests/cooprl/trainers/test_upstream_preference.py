"""Upstream's preference-trainer semantics (issue 14): the comparator's own candidate budget, comparator snapshots that
survive a resume, `comparator_policy: current_copy`, MARLHF's REINFORCE family (`rl_algorithm: mareinforce`,
`maremax`, `marloo`) and upstream's older MADPO config schema. Tiny random models and the scripted task only."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from cooprl.checkpoint import load_trainer_state
from cooprl.config import ConfigError, Run, load_config
from cooprl.preferences.comparators import Comparator, CurrentCopyComparator, HistoryComparator, build_comparator
from cooprl.preferences.pairs import PairStore, split_candidates
from cooprl.rollout.tree import Completion, Node
from tests.scripted import scripted_task
from tests.cooprl.trainers.test_madpo import madpo_config, run_madpo, train_events
from tests.cooprl.trainers.test_marlhf import marlhf_config, run_marlhf
from tests.cooprl.trainers.test_marlhf import train_events as marlhf_train_events
from tests.cooprl.config.test_upstream import OFFLINE, ROOT, UPSTREAM, few_steps

pytestmark = pytest.mark.slow   # end to end (trainers, command lines, subprocesses): not in `make test-fast`

torch.set_num_threads(1)

OLD_MADPO = UPSTREAM / "old_madpo_che_config_88b74938.yaml"


def weights(model) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def reward_distribution(run_dir, iteration: int = 0) -> dict:
    return json.loads((run_dir / "reward_distributions" / f"iteration_{iteration}.json").read_text())


# ---------------------------------------------------------------------------------------------- comparator budget
def test_the_comparator_writes_a_candidate_set_of_its_own_by_default(tmp_path):
    from cooprl.trainers.team import build_team
    task = scripted_task()
    config = madpo_config(tmp_path, "b", "madpo_iter", [])
    assert config.madpo_iter.comparator_candidate_budget == "separate"
    team = build_team(Run.of(config, "madpo_iter"), 2)

    def comparator(*overrides):
        changed = madpo_config(tmp_path, "b", "madpo_iter", list(overrides))
        return build_comparator(Run.of(changed, "madpo_iter"), task, team)

    # upstream: `current` samples a second set from the live policies, preference_num_candidates (3) of them
    live = comparator()
    assert type(live) is Comparator and live.generators == [a.generator for a in team]
    assert split_candidates(3, live) == (3, 3)
    assert split_candidates(3, comparator("madpo_iter.comparator_num_candidates=5")) == (3, 5)
    assert split_candidates(3, comparator("madpo_iter.comparator_policy=copy")) == (3, 3)
    # ours, kept as an option: the comparator's share comes out of preference_num_candidates
    shared = "madpo_iter.comparator_candidate_budget=shared"
    assert comparator(shared) is None
    assert split_candidates(4, comparator(shared, "madpo_iter.comparator_policy=copy")) == (2, 2)
    assert split_candidates(3, comparator(shared, "madpo_iter.comparator_num_candidates=5")) == (3, 5)


def test_a_collection_samples_both_candidate_sets(tmp_path):
    common = ["madpo_iter.max_steps=2", "madpo_iter.num_iterations=1", "madpo_iter.log_reward_distribution=true",
              "madpo_iter.pair_collection=offline"]
    run_madpo(tmp_path, "sep", common, "madpo_iter")
    dist = reward_distribution(tmp_path / "sep")
    assert (dist["policy"]["count"], dist["comparator"]["count"]) == (2 * 3, 2 * 3)   # 2 problems x 3 each
    sources = {p.source for p in PairStore(tmp_path / "sep" / "preferences").load()[0]}
    assert sources <= {"policy>comparator", "comparator>policy"}                     # comparator_reward pairing
    run_madpo(tmp_path, "sh", common + ["madpo_iter.comparator_candidate_budget=shared"], "madpo_iter")
    dist = reward_distribution(tmp_path / "sh")
    assert (dist["policy"]["count"], dist["comparator"]["count"]) == (2 * 3, 0)


# ---------------------------------------------------------------------------------------------- snapshots on resume
def test_a_resumed_run_plays_the_same_history_comparator_as_the_uninterrupted_run(tmp_path):
    # 3 iterations of 2 steps; the history comparator plays the policies of 2 iterations ago (k = 2): iteration 2
    # compares against the policies as iteration 1 began (after step 2). The resume is from step 3, mid iteration 1.
    common = [
        "madpo_iter.max_steps=2",
        "madpo_iter.num_iterations=3",
        "madpo_iter.pair_collection=offline",
        "madpo_iter.comparator_policy=history",
        "madpo_iter.comparator_history_k=2",
        "madpo_iter.pair_selection=all",
        "checkpoint.checkpoint_interval=1",
        "checkpoint.checkpoint_total_limit=null",
    ]
    straight, _ = run_madpo(tmp_path, "straight", common, "madpo_iter")
    checkpoints = tmp_path / "straight" / "checkpoints"
    saved = load_trainer_state(checkpoints / "checkpoint-3")["algorithm"]["comparator"]["snapshots"]
    assert sorted(saved) == [0, 1]                       # iteration 1 plays 0 (the start); 1 is kept for iteration 2

    # snapshot 1 is the policies after step 2, not the ones a resume at step 3 loads: without it, iteration 2 would
    # compare against the wrong policies
    from safetensors.torch import load_file
    after = {k: load_file(checkpoints / f"checkpoint-{s}" / "agent_0" / "model.safetensors") for k, s in ((2, 2), (3,
                                                                                                                   3))}
    shared = [name for name in saved[1][0] if name in after[2]]
    assert shared and all(torch.equal(saved[1][0][n], after[2][n]) for n in shared)
    assert any(not torch.equal(saved[1][0][n], after[3][n]) for n in shared)

    shutil.copytree(tmp_path / "straight", tmp_path / "resumed")
    resumed, _ = run_madpo(tmp_path, "resumed", common + [
        f"checkpoint.resume_from_checkpoint={tmp_path / 'resumed' / 'checkpoints' / 'checkpoint-3'}"], "madpo_iter")
    a, b = straight.comparator, resumed.comparator
    assert sorted(a.snapshots) == sorted(b.snapshots) == [1, 2] and a.loaded == b.loaded == 1
    for k in a.snapshots:
        for mine, theirs in zip(a.snapshots[k], b.snapshots[k]):
            assert same_weights(mine, theirs)
    assert all(same_weights(weights(x), weights(y)) for x, y in zip(a.copies, b.copies))
    # what the comparator wrote in iteration 2, and everything trained on it, is the same
    assert (
        PairStore(tmp_path / "straight" / "preferences").load()
        == PairStore(tmp_path / "resumed" / "preferences").load()
    )
    first, second = train_events(tmp_path / "straight"), train_events(tmp_path / "resumed")
    for key in ("dpo/comparator_reward_mean", "dpo/loss", "agent_0/margin_mean", "turn_1/reward_mean"):
        assert [e.get(key) for e in first] == [e.get(key) for e in second], key
    assert all(same_weights(weights(x), weights(y)) for x, y in zip(straight.models, resumed.models))


# ---------------------------------------------------------------------------------------------- current_copy
def test_current_copy_is_refreshed_at_the_start_of_every_iteration(tmp_path):
    from cooprl.trainers.team import build_team
    config = madpo_config(tmp_path, "cc", "madpo_iter", ["madpo_iter.comparator_policy=current_copy"])
    team = build_team(Run.of(config, "madpo_iter"), 2)
    comparator = build_comparator(Run.of(config, "madpo_iter"), scripted_task(), team)
    assert isinstance(comparator, CurrentCopyComparator) and isinstance(comparator, HistoryComparator)
    assert comparator.num_candidates == 3                              # its own set (upstream's budget)
    first = next(iter(team[0].model.parameters()))
    for iteration in range(3):
        for step_in_iteration in range(2):
            assert comparator.start_iteration(iteration) == iteration   # every step calls it; it copies once
            if step_in_iteration == 0:
                at_start = weights(team[0].model)
            assert same_weights(weights(comparator.copies[0]), at_start)   # frozen while the iteration trains
            with torch.no_grad():
                first.add_(1.0)
        assert not same_weights(weights(comparator.copies[0]), weights(team[0].model))
    assert sorted(comparator.snapshots) == [2]                          # one snapshot kept, the current iteration's
    assert not any(p.requires_grad for p in comparator.copies[0].parameters())


def test_current_copy_compares_online_pairs_with_the_iterations_starting_policies(tmp_path):
    from transformers import AutoModelForCausalLM
    snapshots = tmp_path / "snapshots"
    algorithm, _ = run_madpo(tmp_path, "cco", ["madpo_iter.max_steps=2", "madpo_iter.num_iterations=2",
                                               "madpo_iter.comparator_policy=current_copy",
                                               f"madpo_iter.policy_checkpoint_dir={snapshots}"], "madpo_iter")
    # upstream's checkpoint of iteration 0 = the policies as iteration 1 began = what current_copy played in it
    for agent in (0, 1):
        saved = AutoModelForCausalLM.from_pretrained(snapshots / "iteration_0" / f"agent_{agent}")
        assert same_weights(weights(algorithm.comparator.copies[agent]), weights(saved))
        assert not same_weights(weights(algorithm.comparator.copies[agent]), weights(algorithm.team[agent].model))
    assert all("dpo/comparator_reward_mean" in e for e in train_events(tmp_path / "cco"))
    # ours stays: `copy` is the frozen start policy
    assert load_config(None, ["madpo_iter.comparator_policy=copy"]).madpo_iter.comparator_policy == "copy"


# ---------------------------------------------------------------------------------------------- REINFORCE family
def known_group_node() -> Node:
    """A node of 4 aligned joint answers of 2 agents with returns 1, 0, 0.5, 0.5."""
    samples = [[Completion(f"s{g}", torch.tensor([1, 2]), torch.tensor([3 + g]), False) for g in range(4)]
               for _ in range(2)]
    return Node("item 0:", 0, ["p0", "p1"], [[], []], samples=samples, joint=[(g, g) for g in range(4)],
                returns=[1.0, 0.0, 0.5, 0.5])


@pytest.mark.parametrize("algorithm,mode,raw_advantages", [
    ("magrpo", "mean", [0.5, -0.5, 0.0, 0.0]),
    ("mareinforce", "raw", [1.0, 0.0, 0.5, 0.5]),              # no baseline
    ("maremax", "max", [0.0, -1.0, -0.5, -0.5]),               # the group's best return
    ("marloo", "rloo", [2 / 3, -2 / 3, 0.0, 0.0]),             # the mean of the other three returns
])
def test_marlhf_rl_algorithm_is_magrpo_with_upstreams_advantage_baseline(algorithm, mode, raw_advantages, tmp_path):
    from cooprl.trainers.magrpo import build_magrpo
    from cooprl.trainers.marlhf import RL_TRAINERS
    assert RL_TRAINERS[algorithm] == "magrpo"
    for normalize, expected in ((False, raw_advantages),
                                # standardized: every baseline gives (R - mean) / std, std = sqrt(0.125)
                                (True, [0.5 / 0.125 ** 0.5, -0.5 / 0.125 ** 0.5, 0.0, 0.0])):
        config = marlhf_config(tmp_path, algorithm, "marlhf", [
            f"marlhf.rl_algorithm={algorithm}", f"marlhf.advantage_normalization={str(normalize).lower()}"])
        rl = build_magrpo(Run.of(config, "marlhf").rl, scripted_task())   # what build_marlhf builds on the reward
        assert rl.section.advantage_mode == mode and config.marlhf.advantage_mode == "mean"   # the file's: untouched
        for group in rl.sibling_groups(known_group_node())[0]:
            assert [s.advantage for s in group.samples] == pytest.approx(expected, abs=1e-12)


def test_marlhf_runs_with_marloo(tmp_path):
    algorithm = run_marlhf(tmp_path, "loo", ["marlhf.max_steps=2", "marlhf.rl_algorithm=marloo",
                                             "marlhf.pair_selection=all"])
    assert algorithm.rl.section.advantage_mode == "rloo" and algorithm.section.rl_algorithm == "marloo"
    logged = marlhf_train_events(tmp_path / "loo")
    assert [e["step"] for e in logged] == [1, 2] and all("reward_model/iteration" in e for e in logged)
    config = load_config(UPSTREAM / "marlhf_che_config.yaml", ["marlhf.rl_algorithm=marloo"])
    assert config.marlhf.rl_algorithm == "marloo"
    with pytest.raises(ConfigError, match="marlhf.rl_algorithm"):
        load_config(None, ["marlhf.rl_algorithm=ppo"])


# ---------------------------------------------------------------------------------------------- older MADPO schema
def test_upstreams_older_madpo_schema_is_read_in_our_keys():
    config = load_config(OLD_MADPO, [])
    section = config.madpo
    assert section.dpo_beta == 0.1                        # beta
    assert section.preference_pairs_per_sample == 16      # preference_pairs_per_item
    assert section.num_train_epochs == 4                  # dpo_epochs_per_iteration
    assert section.reference_model is True                # use_reference_model
    assert section.num_iterations == 1 and section.learning_rate == 2e-5 and section.rollout_buffer_size == 4
    assert config.reward_processor.shift == -4.0
    printed = config.to_yaml("madpo")
    assert "dpo_beta: 0.1" in printed and "beta: 0.1\n" not in printed.replace("dpo_beta", "")
    assert "preference:" not in printed and "use_reference_model" not in printed


@pytest.mark.parametrize("override,named", [
    ("preference.comparator.type=api", "preference.comparator.type='api'"),
    ("preference.comparator.model=gpt-x", "preference.comparator.model='gpt-x'"),
    ("preference.comparator.provider=openai", "preference.comparator.provider='openai'"),
    ("preference.temperature=0.3", "preference.temperature=0.3"),
])
def test_the_older_schemas_comparator_keys_plain_madpo_cannot_honour_are_named(override, named):
    with pytest.raises(ConfigError) as err:
        load_config(OLD_MADPO, [override])
    assert named in str(err.value) and "madpo_iter" in str(err.value)


def test_an_older_key_and_ours_with_different_values_in_one_file_is_an_error(tmp_path):
    path = tmp_path / "both.yaml"
    path.write_text(OLD_MADPO.read_text().replace("  beta: 0.1\n", "  beta: 0.1\n  dpo_beta: 0.5\n"))
    with pytest.raises(ConfigError, match="beta.*dpo_beta|dpo_beta.*beta"):
        load_config(path, [])


def test_an_override_of_ours_wins_over_the_older_key_and_num_iterations_stays_one():
    assert load_config(OLD_MADPO, ["madpo.dpo_beta=0.5"]).madpo.dpo_beta == 0.5
    with pytest.raises(ConfigError, match="madpo.num_iterations"):
        load_config(OLD_MADPO, ["madpo.num_iterations=2"])
    with pytest.raises(ConfigError, match="preference"):
        load_config(None, ["preference.comparator.type=self"])   # without a madpo section: an unknown key


def test_the_older_madpo_config_runs(tmp_path, monkeypatch):
    from envs.launch import train_main
    monkeypatch.chdir(ROOT)
    code = train_main("madpo", ["--config", str(OLD_MADPO), "--override", *OFFLINE,
                                *few_steps("madpo", tmp_path, "old")])
    assert code == 0
    lines = [json.loads(line) for line in (tmp_path / "old" / "metrics.jsonl").read_text().splitlines()]
    assert max(e.get("step", 0) for e in lines) == 2
