"""Centralized collaboration (one model writes aux and main in one answer): the code task's prompts, its scores
and parse metrics on hand-built joint answers, bounded generation stopping at `</main>`, the single-turn
check, and a 2-step centralized MAGRPO run through the real CLI followed by evaluate.py."""

import functools
import json

import pytest
import torch
from transformers import LogitsProcessor, LogitsProcessorList

from cooprl.checkpoint import list_checkpoints
from cooprl.config import ConfigError, Run, load_config
from cooprl.models.loading import TINY_RANDOM
from cooprl.rollout.generation import first_stop
from cooprl.trainers.magrpo import build_magrpo
from envs.code_generation.data import Problem
from envs.code_generation.prompts import centralized_prompt
from envs.code_generation.task import build_code_task
from tests.cli.test_cli_smoke import SMALL, events, run, trainer_overrides

pytestmark = pytest.mark.slow   # end to end (trainers, command lines, subprocesses): not in `make test-fast`

CENTRALIZED = ["magrpo.collaboration_mode=centralized", "magrpo.num_turns=1"]


def centralized_config(*overrides):
    return load_config(None, [*CENTRALIZED, f"agent_model.name={TINY_RANDOM}", "agent_model.device=cpu",
                              "agent_model.torch_dtype=float32", "wandb.mode=disabled", *overrides])


# ---------------------------------------------------------------- the task: prompts and configuration errors

@pytest.mark.parametrize("style", ["concat", "native"])
@pytest.mark.parametrize("answer", ["open", "bounded"])
def test_centralized_task_has_one_policy_and_the_joint_prompt(style, answer):
    task = build_code_task(Run.of(centralized_config(f"magrpo.centralized_prompt={style}",
                                                     f"magrpo.centralized_answer={answer}"), "magrpo"))
    item = task.train_items[0]
    assert task.num_agents == 1 and task.max_reward == 4.0
    assert task.first_prompts(item) == [centralized_prompt(item, style, answer)]
    assert task.stop_strings == [("</main>",) if answer == "bounded" else ()]
    with pytest.raises(RuntimeError, match="single-turn"):
        task.next_prompts(item, [[("p", "c")]], ["c"], None)


def test_centralized_with_more_than_one_turn_is_a_config_error():
    config = load_config(None, ["magrpo.collaboration_mode=centralized", "magrpo.num_turns=2"])
    with pytest.raises(ConfigError, match=r"centralized is single-turn: set magrpo.num_turns=1 \(got 2\)"):
        build_code_task(Run.of(config, "magrpo"))


def test_centralized_needs_the_two_roles():
    config = load_config(None, ["grpo.collaboration_mode=centralized", "grpo.num_turns=1"])
    with pytest.raises(ConfigError, match="grpo.num_agents must be 2, got 1"):
        build_code_task(Run.of(config, "grpo"))
    with pytest.raises(ConfigError, match="magrpo.num_agents=3"):
        build_code_task(Run.of(load_config(None, ["magrpo.num_agents=3"]), "magrpo"))


# ---------------------------------------------------------------- scores of hand-built joint answers

P = Problem("T/0", 'def add_one(x: int) -> int:\n    """Return x + 1."""\n',
            "def check(candidate):\n    assert candidate(1) == 2\n    assert candidate(5) == 6\n", "add_one")
AUX = "def aux(x):\n    return x + 1"
# main uses aux's value and does more than return it (not a thin wrapper): 4.0 when aux is there
MAIN = "def add_one(x):\n    y = aux(x)\n    if y is None:\n        return 0\n    return y"

SCORE_CASES = [
    # name, joint answer, total, parse_fallback, parse_missing_aux, parse_missing_main
    ("both tags", f"<auxiliary>\n{AUX}\n</auxiliary>\n<main>\n{MAIN}\n</main>\nDone!", 4.0, 0, 0, 0),
    ("missing closing tags", f"<auxiliary>\n{AUX}\n<main>\n```python\n{MAIN}\n```", 4.0, 0, 0, 0),
    ("labels only", f"Auxiliary:\n{AUX}\n\n**Main function:**\n{MAIN}\n", 4.0, 1, 0, 0),
    ("fences only", f"Helper:\n```python\n{AUX}\n```\nMain one:\n```python\n{MAIN}\n```", 4.0, 1, 0, 0),
    # aux never written: main is defined and parses (0.6 + 0.5) but its call to aux fails every test
    ("main only", f"<main>\n{MAIN}\n</main>", 1.1, 0, 1, 0),
    ("empty main", f"<auxiliary>\n{AUX}\n</auxiliary>\n<main>\n</main>", 0.4, 0, 0, 1),
    ("garbage", "I cannot help with that.", 0.0, 0, 1, 1),
]


@pytest.fixture(scope="module")
def open_task():
    return build_code_task(Run.of(centralized_config(), "magrpo"))


def test_joint_answers_get_the_two_agent_reward_and_parse_metrics(open_task):
    scores = open_task.score([P] * len(SCORE_CASES), [[case[1]] for case in SCORE_CASES])  # one sandbox batch
    for (name, _, total, fallback, missing_aux, missing_main), score in zip(SCORE_CASES, scores):
        assert score.total == total, name
        assert score.success == (total == 4.0), name
        parse = {k: score.metrics[k] for k in ("parse_fallback", "parse_missing_aux", "parse_missing_main")}
        assert parse == {"parse_fallback": fallback, "parse_missing_aux": missing_aux,
                         "parse_missing_main": missing_main}, name
    # the same cooperation metrics as the decentralized task
    assert scores[0].metrics["uses_aux"] == 1.0 and scores[0].metrics["cooperation_bonus"] == 1.5
    assert scores[0].metrics["level1_definitions"] == 1.0 and scores[0].metrics["pass_rate"] == 1.0


def test_bounded_answer_is_scored_after_the_prompts_opening_tag():
    task = build_code_task(Run.of(centralized_config("magrpo.centralized_answer=bounded"), "magrpo"))
    # the prompt ended with <auxiliary>, so the answer starts inside the aux section
    [score] = task.score([P], [[f"\n{AUX}\n</auxiliary>\n<main>\n{MAIN}\n</main>"]])
    assert score.total == 4.0 and score.metrics["parse_fallback"] == 0.0


# ---------------------------------------------------------------- bounded generation stops at </main>

class ForceTokens(LogitsProcessor):
    """Makes row r of the batch emit `forced[r % len(forced)]` token by token, then repeat its last token."""

    def __init__(self, forced):
        self.forced, self.prompt_width = forced, None

    def __call__(self, input_ids, scores):
        self.prompt_width = self.prompt_width or input_ids.shape[1]  # the first call sees the bare prompts
        step = input_ids.shape[1] - self.prompt_width
        out = torch.full_like(scores, float("-inf"))
        for row in range(scores.shape[0]):
            tokens = self.forced[row % len(self.forced)]
            out[row, tokens[min(step, len(tokens) - 1)]] = 0.0
        return out


FORCED_TEXTS = ["x</main>yyyyyyyy", "def aux(x):\n    return x\n</main>yyyyyyyy"]
BUDGET = 40


def forced_samples(answer, monkeypatch):
    """Return the centralized agent, its forced token sequences and two samples for one prompt."""
    config = centralized_config(f"magrpo.centralized_answer={answer}", f"magrpo.max_new_tokens={BUDGET}")
    task = build_code_task(Run.of(config, "magrpo"))
    agent = build_magrpo(Run.of(config, "magrpo"), task).team[0]
    forced = [agent.tokenizer(text, add_special_tokens=False)["input_ids"] for text in FORCED_TEXTS]
    processor = LogitsProcessorList([ForceTokens(forced)])
    monkeypatch.setattr(agent.model, "generate", functools.partial(agent.model.generate, logits_processor=processor))
    return agent, forced, agent.sample(task.first_prompts(task.train_items[0]), 2)[0]


def test_bounded_generation_stops_each_row_at_its_first_closing_main_tag(monkeypatch):
    agent, forced, samples = forced_samples("bounded", monkeypatch)
    assert agent.params.stop_strings == ("</main>",)
    for tokens, completion, text in zip(forced, samples, FORCED_TEXTS):
        # the shortest prefix of the forced tokens whose text holds </main>
        k = next(k for k in range(1, len(tokens) + 1)
                 if first_stop(agent.tokenizer.decode(tokens[:k]), ["</main>"]) is not None)
        assert completion.completion_ids.tolist() == tokens[:k]
        assert completion.text == text.split("</main>")[0] + "</main>"
        assert not completion.truncated


def test_open_generation_runs_past_closing_main_tag(monkeypatch):
    # the control: the same forced tokens without the stop string run to the joint budget
    agent, _, samples = forced_samples("open", monkeypatch)
    assert agent.params.stop_strings == ()
    for completion, text in zip(samples, FORCED_TEXTS):
        assert len(completion.completion_ids) == BUDGET and completion.truncated
        assert completion.text.startswith(text)


# ---------------------------------------------------------------- the CLI: train 2 steps, then evaluate.py

def test_centralized_magrpo_two_steps_then_evaluate(tmp_path):
    result = run(["train_magrpo.py", "--config", "configs/magrpo_che_config.yaml", "--override", *SMALL,
                  *trainer_overrides("magrpo", tmp_path, "c"), *CENTRALIZED, "magrpo.centralized_answer=bounded",
                  "magrpo.rollout_buffer_size=1"],   # an update at every step (one node per step here)
                 tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = tmp_path / "c"
    train = [e for e in events(run_dir) if "turn_1/reward_mean" in e]
    assert [e["step"] for e in train] == [1, 2]
    for e in train:
        assert 0.0 <= e["turn_1/reward_mean"] <= 4.0
        assert {"turn_1/uses_aux", "turn_1/parse_fallback", "turn_1/parse_missing_main"} <= set(e)
        assert "turn_2/reward_mean" not in e
        assert "agent_0/loss" in e and "agent_1/loss" not in e  # one model, one optimizer
    checkpoint = list_checkpoints(run_dir / "checkpoints")[-1]
    assert sorted(p.name for p in checkpoint.iterdir() if p.name.startswith("agent_")) == ["agent_0"]
    evaluation = run(["evaluate.py", "--config", str(run_dir / "config.yaml"), "--checkpoint",
                      str(run_dir / "checkpoints"), "--output", str(tmp_path / "eval.json")], tmp_path)
    assert evaluation.returncode == 0, evaluation.stderr[-3000:]
    metrics = json.loads((tmp_path / "eval.json").read_text())
    assert {"eval/turn_1/pass@1", "eval/turn_1/parse_missing_aux", "eval/turn_1/uses_aux"} <= set(metrics)
    assert 0.0 <= metrics["eval/turn_1/reward_mean"] <= 4.0
