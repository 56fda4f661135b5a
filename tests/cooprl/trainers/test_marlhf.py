"""MARLHF / MARLHF_ITER: the learned-reward task, training runs on the scripted task, exact resume, CLI smoke runs."""

import shutil
import statistics
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from cooprl.config import Run, load_config
from cooprl.models.loading import TINY_RANDOM
from cooprl.preferences.pairs import PreferencePair, open_pair_store, read_pairs, write_pairs
from cooprl.trainers.loop import seed_everything, train_loop
from cooprl.trainers.marlhf import MARLHF, build_marlhf, learned_reward_task
from tests.scripted import letter_reward, scripted_task
from tests.cli.test_cli_smoke import SMALL, events, run
from tests.cooprl.preferences.test_reward_model import tiny_reward_model

pytestmark = pytest.mark.slow   # end to end (trainers, command lines, subprocesses): not in `make test-fast`


class CountingRewardModel:
    """Stands in for a RewardModel: reward 10, 11, 12... in call order; remembers what it was shown."""

    model = torch.nn.Linear(1, 1)

    def __init__(self):
        self.seen = []

    def score(self, examples):
        self.seen += examples
        return [10.0 + len(self.seen) - len(examples) + i for i in range(len(examples))]


def test_learned_reward_task_scores_with_the_reward_model_and_keeps_the_task_reward():
    task = scripted_task()
    rm = CountingRewardModel()
    learned_task, learned = learned_reward_task(task, rm)
    joints = [["aaaa", "bb"], ["a", "aaaaaaaa"]]
    scores = learned_task.score(["item 0:", "item 1:"], joints)
    assert [s.total for s in scores] == [10.0, 11.0]
    assert [s.metrics["task_reward_mean"] for s in scores] == [(0.5 + 0) / 2, (0.125 + 1) / 2]
    assert scores[0].metrics["length"] == 6.0  # the task's own metrics are kept
    assert rm.seen == [(task.first_prompts("item 0:"), joints[0]), (task.first_prompts("item 1:"), joints[1])]
    assert learned_task.max_reward == task.max_reward and learned_task.train_items == task.train_items
    with learned.task_reward():
        assert [s.total for s in learned_task.score(["item 0:"], [["aaaa", "bb"]])] == [0.25]
    assert learned_task.score(["item 0:"], [["aaaa", "bb"]])[0].total == 12.0  # switched back on


def test_evaluation_uses_the_task_reward():
    task = scripted_task()
    learned_task, learned = learned_reward_task(task, CountingRewardModel())
    # an RL algorithm that scores through the (learned-reward) task it was built with
    rl = SimpleNamespace(
        models=[],
        team=[],
        evaluate=lambda items: {"r": learned_task.score(items, [["aaaaaaaa"] * 2])[0].total},
        train_step=lambda item, step: {"r": learned_task.score([item], [["aaaaaaaa"] * 2])[0].total},
    )
    algorithm = MARLHF(Run.of(load_config(), "marlhf"), task, rl, CountingRewardModel(), learned)
    assert algorithm.evaluate(["eval 0:"]) == {"r": letter_reward("aaaaaaaa")}
    algorithm.trained_iteration = 0  # skip the reward-model phase: the RL step sees the learned reward
    assert algorithm.train_step("item 0:", 1)["r"] == 10.0


def test_summary_judges_a_learned_reward_run_by_the_task_reward(tmp_path, capsys):
    # the learned reward went up while the task reward went down: the verdict must follow the task reward
    import json
    from cooprl.trainers.loop import summarize
    rows = [{"step": k, "turn_1/reward_mean": float(k), "turn_1/task_reward_mean": 9.0 - k} for k in range(1, 9)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    from cooprl.trainers.marlhf import MARLHF
    summary = summarize(tmp_path, 8, {}, interrupted=False, task_reward=MARLHF.task_reward_key)
    assert summary["learned"] is False
    assert (
        "mean training task reward: 7.500 (first 2 steps) -> 1.500 (last 2 steps): did not improve"
        in capsys.readouterr().out
    )


def scripted_pairs(task, tag: str = "") -> list[PreferencePair]:
    """Return one pair per training item of the scripted task (answers of different lengths, so scores differ)."""
    return [PreferencePair(f"{tag}{item}", task.first_prompts(item), ["a" * (k + 2), "ab" * (k + 1)],
                           ["b" * (k + 1), "ba"], 1.0, 0.0) for k, item in enumerate(task.train_items)]


@pytest.mark.parametrize("normalize", [True, False])
def test_learned_reward_is_standardized_over_the_answers_of_the_pairs(tmp_path, normalize):
    task, rm = scripted_task(), tiny_reward_model()
    config = load_config(None, ["marlhf.reward_model_learning_rate=1e-3", f"marlhf.normalize_reward={normalize}"])
    learned_task, learned = learned_reward_task(task, rm)
    rl = SimpleNamespace(models=[], state_dict=dict, load_state_dict=lambda state: None)
    algorithm = MARLHF(Run.of(config, "marlhf"), task, rl, rm, learned)
    algorithm.start_run(tmp_path, 0, len(task.train_items))
    pairs = scripted_pairs(task)
    write_pairs(algorithm.store.path(0), pairs)
    metrics = algorithm.learn_reward(0, 1)
    assert metrics["reward_model/train_pairs"] > 0
    items, joints = [p.item_id for p in pairs] * 2, [p.chosen for p in pairs] + [p.rejected for p in pairs]
    rewards = [s.total for s in learned_task.score(items, joints)]
    raw = rm.score([(task.first_prompts(item), joint) for item, joint in zip(items, joints)])
    if not normalize:
        assert rewards == raw and "reward_model/score_std" not in metrics
        return
    assert statistics.fmean(rewards) == pytest.approx(0.0, abs=1e-5)
    assert statistics.pstdev(rewards) == pytest.approx(1.0, abs=1e-5)
    assert statistics.pstdev(raw) < 0.5  # the raw scores' scale is not already 1: the test is not vacuous
    assert metrics["reward_model/score_mean"] == pytest.approx(statistics.fmean(raw), abs=1e-7)
    assert metrics["reward_model/score_std"] == pytest.approx(statistics.pstdev(raw), abs=1e-7)
    # a checkpoint keeps mean and std: a resumed run (whose reward model is not retrained) gives the same rewards
    resumed_task, resumed = learned_reward_task(task, rm)
    MARLHF(Run.of(config, "marlhf"), task, rl, rm, resumed).load_state_dict(algorithm.state_dict())
    assert [s.total for s in resumed_task.score(items, joints)] == rewards


def marlhf_config(tmp_path: Path, name: str, trainer: str, overrides: list[str]):
    return load_config(None, [
        f"agent_model.name={TINY_RANDOM}", "agent_model.device=cpu", "agent_model.temperature=1.0",
        "agent_model.top_p=1.0", f"{trainer}.max_new_tokens=6", f"{trainer}.num_generations=2",
        f"{trainer}.preference_num_candidates=4", f"{trainer}.learning_rate=1e-2",
        f"{trainer}.reward_model_learning_rate=1e-3", f"{trainer}.reward_max_length=64", f"{trainer}.eval_interval=0",
        f"{trainer}.eval_num_samples=1", "wandb.mode=disabled", f"output.base_dir={tmp_path}",
        f"output.run_name={name}", "checkpoint.checkpoint_total_limit=null",
        f"{trainer}.rollout_buffer_size=1",   # MAGRPO on the learned reward: one update per node, so every step
        *overrides])


def run_marlhf(tmp_path: Path, name: str, overrides: list[str], trainer: str = "marlhf"):
    config = marlhf_config(tmp_path, name, trainer, overrides)
    seed_everything(config.seed)
    task = scripted_task()
    algorithm = build_marlhf(Run.of(config, trainer), task)
    train_loop(Run.of(config, trainer), task, algorithm, tmp_path / name)
    return algorithm


def train_events(run_dir: Path):
    return [e for e in events(run_dir) if "turn_1/reward_mean" in e]


def test_marlhf_collects_pairs_trains_the_reward_model_then_rl(tmp_path):
    algorithm = run_marlhf(tmp_path, "m", ["marlhf.max_steps=3", "marlhf.pair_selection=all"])
    logged = train_events(tmp_path / "m")
    assert [e["step"] for e in logged] == [1, 2, 3]
    pairs = read_pairs(tmp_path / "m" / "preferences" / "iteration_0.jsonl")
    assert len({p.item_id for p in pairs}) == 3 and all(p.chosen_reward > p.rejected_reward for p in pairs)
    for e in logged:  # the reward model's figures ride along every step of its iteration
        assert e["preferences/new_pairs"] == len(pairs) and 0.0 <= e["reward_model/eval_accuracy"] <= 1.0
        assert e["reward_model/train_pairs"] + e["reward_model/eval_pairs"] == len(pairs)
        assert 0.0 <= e["turn_1/task_reward_mean"] <= 1.0 and "agent_1/loss" in e
    assert len(algorithm.models) == 3 and algorithm.models[2] is algorithm.reward_model.model
    assert (tmp_path / "m" / "checkpoints" / "checkpoint-3" / "agent_2" / "value_head.safetensors").is_file()


def _assert_same_runs(a_dir: Path, b_dir: Path, a, b):
    a_events, b_events = train_events(a_dir), train_events(b_dir)
    assert [e["step"] for e in b_events] == [e["step"] for e in a_events]
    for key in ("turn_1/reward_mean", "turn_1/task_reward_mean", "agent_0/loss", "agent_1/loss",
                "reward_model/train_loss", "reward_model/iteration", "reward_model/score_std", "env_step"):
        assert [e.get(key) for e in a_events] == [e.get(key) for e in b_events], key
    for m1, m2 in zip(a.models, b.models):
        for p1, p2 in zip(m1.parameters(), m2.parameters()):
            assert torch.equal(p1, p2)


def test_marlhf_iter_resumes_exactly_at_and_within_an_iteration(tmp_path):
    common = ["marlhf_iter.max_steps=2", "marlhf_iter.num_iterations=2", "marlhf_iter.comparator_policy=copy",
              "marlhf_iter.preference_replay_mode=lambda_decay", "checkpoint.checkpoint_interval=1"]
    straight = run_marlhf(tmp_path, "straight", common, "marlhf_iter")
    logged = train_events(tmp_path / "straight")
    assert [e["reward_model/iteration"] for e in logged] == [0, 0, 1, 1]
    assert (
        logged[2]["reward_model/train_pairs"] + logged[2]["reward_model/eval_pairs"]
        > logged[2]["preferences/new_pairs"]
    )
    sources = {p.source for p in read_pairs(tmp_path / "straight" / "preferences" / "iteration_1.jsonl")}
    assert sources & {"comparator", "policy>comparator", "comparator>policy"}
    # at the iteration boundary (pairs file read back), inside iteration 1 (RM from checkpoint)
    for resume_at in (2, 3):
        name = f"resumed_{resume_at}"
        shutil.copytree(tmp_path / "straight", tmp_path / name)
        for later in range(resume_at + 1, 5):
            shutil.rmtree(tmp_path / name / "checkpoints" / f"checkpoint-{later}")
        resumed = run_marlhf(tmp_path, name, common + ["checkpoint.resume_from_checkpoint=latest"], "marlhf_iter")
        _assert_same_runs(tmp_path / "straight", tmp_path / name, straight, resumed)


def test_a_fresh_run_moves_earlier_pairs_aside_and_a_resumed_run_reads_its_own(tmp_path):
    common = ["marlhf_iter.max_steps=1", "marlhf_iter.num_iterations=2", "marlhf_iter.pair_selection=all",
              "checkpoint.checkpoint_interval=1"]
    run_dir = tmp_path / "f"
    stale = scripted_pairs(scripted_task(), "stale ")   # an earlier run's, with the same run_name
    write_pairs(run_dir / "preferences" / "iteration_0.jsonl", stale)
    run_marlhf(tmp_path, "f", common, "marlhf_iter")
    (moved,) = run_dir.glob("preferences.old-*")
    assert read_pairs(moved / "iteration_0.jsonl") == stale
    own = read_pairs(run_dir / "preferences" / "iteration_0.jsonl")
    assert own and not any(p.item_id.startswith("stale") for p in own)
    assert train_events(run_dir)[0]["preferences/new_pairs"] == len(own)
    # resumed at the iteration boundary, the run reads iteration 1's pairs file back (here: planted pairs)
    shutil.rmtree(run_dir / "checkpoints" / "checkpoint-2")
    planted = scripted_pairs(scripted_task(), "planted ")[:5]
    write_pairs(run_dir / "preferences" / "iteration_1.jsonl", planted)
    run_marlhf(tmp_path, "f", common + ["checkpoint.resume_from_checkpoint=latest"], "marlhf_iter")
    last = train_events(run_dir)[-1]
    assert last["step"] == 2 and last["preferences/new_pairs"] == 5
    assert last["reward_model/train_pairs"] + last["reward_model/eval_pairs"] == 5
    assert read_pairs(run_dir / "preferences" / "iteration_1.jsonl") == planted
    assert len(list(run_dir.glob("preferences.old-*"))) == 1   # a resume moves nothing


def test_marlhf_with_iac_as_the_rl_algorithm(tmp_path):
    algorithm = run_marlhf(tmp_path, "iac", ["marlhf.max_steps=1", "marlhf.rl_algorithm=iac",
                                             "iac.rollout_buffer_size=1"])
    logged = train_events(tmp_path / "iac")
    assert "reward_model/train_pairs" in logged[0] and any(k.endswith("value_loss") for k in logged[0])
    assert len(algorithm.models) == 5  # two actors, two critics, the reward model


# ------------------------------------------------------------------------------------------------ CLI
def cli_overrides(trainer, tmp_path, name):
    return [f"{trainer}.max_steps=2", f"{trainer}.num_generations=2", f"{trainer}.preference_num_candidates=2",
            f"{trainer}.max_new_tokens=8", f"{trainer}.eval_num_samples=1", f"{trainer}.eval_interval=1",
            f"output.base_dir={tmp_path}", f"output.run_name={name}", "checkpoint.checkpoint_interval=1"]


def test_train_marlhf_cli_in_a_used_folder_collects_its_own_pairs_in_a_fresh_folder(tmp_path):
    # a new run with an earlier run's run_name: it writes a fresh folder (h-2, cooprl.run_folders) and collects its
    # own pairs there; the earlier run's pairs stay where they were
    stale = [PreferencePair(f"p{i}", ["Write aux.", "Write main."], [f"def aux():\n    return {i}", "good"],
                            [f"def aux():\n    return {i}", "bad"], 1.0, 0.0) for i in range(6)]
    write_pairs(tmp_path / "h" / "preferences" / "iteration_0.jsonl", stale)
    result = run(["train_marlhf.py", "--config", "configs/marlhf_che_config.yaml", "--override", *SMALL,
                  *cli_overrides("marlhf", tmp_path, "h"), "marlhf.reward_max_length=128"], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "holds an earlier run: this run writes" in result.stderr and str(tmp_path / "h-2") in result.stderr
    logged = train_events(tmp_path / "h-2")
    assert [e["step"] for e in logged] == [1, 2] and "turn_1/task_reward_mean" in logged[0]
    evaluation = [e for e in events(tmp_path / "h-2") if "eval/turn_1/pass@1" in e]
    assert evaluation and all("eval/turn_1/task_reward_mean" not in e for e in evaluation)  # task reward only
    assert read_pairs(tmp_path / "h" / "preferences" / "iteration_0.jsonl") == stale   # untouched
    own = read_pairs(tmp_path / "h-2" / "preferences" / "iteration_0.jsonl")
    assert logged[0]["preferences/new_pairs"] == len(own) and not any(p in stale for p in own)
    assert "Summary of" in result.stdout


def test_a_fresh_run_in_a_folder_with_pairs_moves_them_aside(tmp_path):
    # train_loop called on a folder of the caller's choice (no run_folders in between): a fresh run (step 0) must
    # not train on pairs an earlier run left there; a resumed one (step > 0) reads them back
    stale = [PreferencePair("p", ["a", "b"], ["x", "good"], ["x", "bad"], 1.0, 0.0)]
    write_pairs(tmp_path / "preferences" / "iteration_0.jsonl", stale)
    assert read_pairs(open_pair_store(tmp_path, 3).path(0)) == stale
    store = open_pair_store(tmp_path, 0)
    assert not store.path(0).exists()
    (moved,) = tmp_path.glob("preferences.old-*")
    assert read_pairs(moved / "iteration_0.jsonl") == stale


def test_train_marlhf_iter_cli_one_iteration_centralized_with_a_copy_comparator(tmp_path):
    result = run(["train_marlhf_iter.py", "--config", "configs/marlhf_iter_che_config.yaml", "--override", *SMALL,
                  *cli_overrides("marlhf_iter", tmp_path, "i"), "marlhf_iter.num_iterations=1",
                  "marlhf_iter.collaboration_mode=centralized", "marlhf_iter.comparator_policy=copy"], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    logged = train_events(tmp_path / "i")
    assert [e["step"] for e in logged] == [1, 2] and all(e["reward_model/iteration"] == 0 for e in logged)
    assert "turn_1/parse_fallback" in logged[0] and "agent_1/loss" not in logged[0]  # one joint actor
    assert (tmp_path / "i" / "preferences" / "iteration_0.jsonl").is_file()
    assert any("eval/turn_1/pass@1" in e for e in events(tmp_path / "i"))


def test_marlhf_passes_the_epoch_end_to_its_rl_algorithm():
    # upstream's RL trainers flush their buffers at an epoch's end; under MARLHF the loop calls MARLHF's end_epoch
    from types import SimpleNamespace

    from cooprl.trainers.marlhf import MARLHF
    from cooprl.metrics import Metrics
    flushed = Metrics({"x": 1.0})
    rl = SimpleNamespace(end_epoch=lambda: flushed)
    assert MARLHF.end_epoch(SimpleNamespace(rl=rl)) is flushed
    from cooprl.trainers.loop import Algorithm
    # an RL algorithm without buffers: the base's no-op
    assert dict(MARLHF.end_epoch(SimpleNamespace(rl=Algorithm()))) == {}


@pytest.mark.slow
def test_marlhf_iter_of_a_sequential_team_refuses_a_comparator_that_writes_joint_answers_itself(tmp_path):
    # as MADPO_ITER: the follower answers its predecessor's text; a comparator's joint answers would not be the team's
    import dataclasses

    from cooprl.config import ConfigError
    task = dataclasses.replace(scripted_task(),
                               follow_prompt=lambda item, agent, prompt, earlier: f"{earlier[0]} {prompt}")
    refused = marlhf_config(tmp_path, "r", "marlhf_iter", ["marlhf_iter.comparator_policy=copy"])
    with pytest.raises(ConfigError, match="marlhf_iter: this task is a sequential team .* marlhf_iter.comparator_"
                                          "policy=current marlhf_iter.comparator_candidate_budget=shared"):
        build_marlhf(Run.of(refused, "marlhf_iter"), task)
    shared = marlhf_config(tmp_path, "s", "marlhf_iter", ["marlhf_iter.comparator_policy=current",
                                                          "marlhf_iter.comparator_candidate_budget=shared"])
    assert build_marlhf(Run.of(shared, "marlhf_iter"), task).comparator is None   # the policies' own candidates
