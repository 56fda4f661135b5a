"""Unit tests of cooprl/trainers/loop.py with scripted algorithms, no model: the evaluation's generators, the metrics
file a resume cuts, the summary's verdict."""

import json

import pytest

from cooprl.config import Run
from cooprl.tracking import read_metrics
from cooprl.trainers.loop import MIN_STEPS_PER_QUARTER, _bar_fields, _truncate_metrics, summarize
from tests.cooprl.parallel.test_distributed import FakeCudaGenerators
from tests.cooprl.test_tracking import write


def test_evaluation_leaves_every_cuda_generator_as_it_was(tmp_path, monkeypatch):
    """The loop's evaluation seeds torch (every CUDA generator too) and must restore them all: GPU sampling draws from
    the CUDA generators, so a reseeded one would restart training's samples from the evaluation seed."""

    from cooprl.config import load_config
    from cooprl.task import Score, Task
    from cooprl.trainers.loop import Algorithm as LoopAlgorithm, train_loop
    cuda = FakeCudaGenerators(monkeypatch)
    seen = []

    class Algorithm(LoopAlgorithm):
        models: list = []

        def train_step(self, item, step):
            seen.append(("train", [int(s) for s in cuda.states.values()]))
            return {"turn_1/reward_mean": 0.0}

        def evaluate(self, items):
            seen.append(("eval", [int(s) for s in cuda.states.values()]))
            return {"eval/turn_1/reward_mean": 0.0}

        def state_dict(self):
            return {}

        def load_state_dict(self, state):
            pass

    task = Task(name="t", num_agents=1, train_items=["a", "b"], eval_items=["c"], first_prompts=lambda item: [item],
                score=lambda items, joints: [Score(0.0) for _ in joints], max_reward=1.0,
                next_prompts=lambda item, histories, joint, score: [h[-1][0] for h in histories])
    config = load_config(None, ["wandb.mode=disabled", f"output.base_dir={tmp_path}", "magrpo.max_steps=2",
                                "magrpo.eval_interval=1", "magrpo.eval_at_start=true"])
    train_loop(Run.of(config, "magrpo"), task, Algorithm(), tmp_path / "run")
    assert [kind for kind, _ in seen] == ["eval", "train", "eval", "train", "eval"]
    assert all(states == [10, 11] for kind, states in seen if kind == "train")   # as training left them
    assert all(states[0] == states[1] != 10 for kind, states in seen if kind == "eval")   # the evaluation seed
    assert [int(s) for s in cuda.states.values()] == [10, 11]


def test_a_resume_rewrites_the_file_so_the_next_event_is_not_glued_to_the_cut_line(tmp_path):
    write(tmp_path, '{"step": 3, "turn_1/rew')
    _truncate_metrics(tmp_path, 2)   # what a resume from step 2 does before it appends
    with (tmp_path / "metrics.jsonl").open("a", encoding="utf-8") as out:
        out.write(json.dumps({"step": 3, "turn_1/reward_mean": 3.0}) + "\n")
    assert [e["step"] for e in read_metrics(tmp_path)] == [0, 1, 2, 3]


def write_events(folder, events):
    (folder / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))


def test_one_step_against_one_step_is_no_verdict(tmp_path, capsys):
    write_events(tmp_path, [{"step": s, "turn_1/reward_mean": float(s)} for s in (1, 2)])
    summary = summarize(tmp_path, 2, {}, False)
    out = capsys.readouterr().out
    assert summary["learned"] is None
    assert "mean training reward: 1.000 (first 1 steps) -> 2.000 (last 1 steps): too few steps to judge" in out
    assert "learned" not in out.split("mean training reward")[1]


def test_enough_steps_get_a_verdict(tmp_path, capsys):
    steps = 4 * MIN_STEPS_PER_QUARTER
    write_events(tmp_path, [{"step": s, "turn_1/reward_mean": float(s)} for s in range(1, steps + 1)])
    assert summarize(tmp_path, steps, {}, False)["learned"] is True
    assert ": learned" in capsys.readouterr().out


def test_sft_summary_bar_and_verdict_follow_the_loss(tmp_path, capsys):
    # SFT logs no reward: the summary compares its loss (lower is better), per agent too
    write_events(tmp_path, [{"step": s, "nll_mean": 2.0 - 0.1 * s, "agent_0/nll": 2.0 - 0.1 * s,
                             "agent_1/nll": 2.0} for s in range(1, 9)])
    summary = summarize(tmp_path, 8, {}, False, loss_key="nll_mean")
    out = capsys.readouterr().out
    assert summary["learned"] is True and summary["nll_mean"] == {"first_quarter": pytest.approx(1.85),
                                                                   "last_quarter": pytest.approx(1.25)}
    assert "mean loss: 1.850 (first 2 steps) -> 1.250 (last 2 steps): learned" in out
    assert "agent_1/nll" in out and "reward" not in out
    assert _bar_fields({"nll_mean": 1.5}, loss_key="nll_mean") == {"loss": "1.500"}
    assert _bar_fields({"turn_1/reward_mean": 0.25}) == {"reward": "0.250"}


def test_ddp_with_more_processes_than_training_items_says_how_many_fit():
    from cooprl.config import ConfigError, load_config
    from cooprl.parallel.order import Ranks
    from cooprl.trainers.loop import step_plan
    run = Run.of(load_config(None, ["magrpo.parallel_training=ddp", "magrpo.update_schedule=items"]), "magrpo")
    with pytest.raises(ConfigError) as err:
        step_plan(run, 3, 1, Ranks(rank=0, world_size=4))
    assert str(err.value) == ("magrpo.parallel_training: ddp with 4 processes needs at least as many training items; "
                              "the training split has 3: launch at most 3 processes, or widen dataset.train_split")
