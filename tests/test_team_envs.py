"""The planner+coder and coder+tester teams (issue 18): scripted agents with known answers get exact rewards
(the tester's too), the self-tests reward's formula on a known matrix, and the config picks the environment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from cooprl.config import ConfigError, load_config
from cooprl.generation import Completion
from cooprl.rollout import RolloutSettings, rollout, sample_returns
from envs.coder_tester.config import CoderTesterConfig
from envs.coder_tester.task import build_coder_tester_task
from envs.planner_coder.config import PlannerCoderConfig
from envs.planner_coder.task import build_planner_coder_task, plan_text, revise_target, with_plan
from envs.train import environment_of
from rewards.self_tests import discrimination_reward, example_asserts, reliability, self_tests_rewards, support

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = {"task_id": "T/0", "entry_point": "add",
           "prompt": 'def add(a, b):\n    """Return a + b.\n    >>> add(1, 2)\n    3\n    """\n',
           "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(0, 0) == 0\n"
                   "    assert candidate(-1, 1) == 0\n    assert candidate(2, 5) == 7\n",
           "canonical_solution": "    return a + b\n"}
RIGHT, ALMOST = "    return a + b\n", "    return abs(a) + b\n"   # ALMOST fails candidate(-1, 1) only: 3/4
TESTS = "1, 2) == 3\nassert add(2, 2) == 5\nassert add(-1, 1) == 0\n"  # valid, rejects the reference, valid


@pytest.fixture
def data(tmp_path) -> Path:
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps(PROBLEM) + "\n" + json.dumps({**PROBLEM, "task_id": "T/1"}) + "\n")
    return path


def _config(name: str, task_config: type, data: Path, *overrides: str):
    return load_config(ROOT / "configs" / name, [f"dataset.path={data}", "dataset.train_split=train[:1]",
                                                  "dataset.eval_split=train[1:]", *overrides], task_config=task_config)


def scripted(texts: dict[int, list[str]]):
    """Return a sampler whose agent a answers texts[a][i] for its i-th sample of a call (in order)."""
    def sample(agent, prompts, n):
        out, answers = [], iter(texts[agent])
        for prompt in prompts:
            out.append([Completion(next(answers), torch.tensor([1]), torch.tensor([2]), False) for _ in range(n)])
        return out
    return sample


def test_self_tests_formula_on_a_known_matrix():
    matrix = [[1, 0, 1], [1, 0, 0], [0, 0, 0]]
    assert reliability(matrix) == [2 / 3, 0.0, 1 / 3]
    assert support(matrix) == [1.0, 0.666667, 0.0]                  # (2/3 + 1/3) / 1, (2/3) / 1
    # a code that does not parse neither runs nor counts in the reliabilities: weights 1, 0, 1/2
    assert self_tests_rewards([1.1, 1.1, 0.6], matrix, [True, True, False]) == [2.1, 1.766667, 0.6]
    assert support([[0, 0], [0, 0]]) == [0.0, 0.0] and support([[], []]) == [0.0, 0.0]
    # tester: a valid test that kills the one wrong code (1.0), one it lets pass (0.5), one the reference fails (-1)
    assert discrimination_reward([1, 1, 0], [[0, 1, 1]]) == round((1.0 + 0.5 - 1.0) / 3, 6)
    assert discrimination_reward([1], []) == 0.5 and discrimination_reward([], [[1]]) == 0.0


def test_planner_coder_scripted_rewards(data):
    config = _config("planner_coder_cpu.yaml", PlannerCoderConfig, data, "magrpo.num_generations=2")
    task = build_planner_coder_task(config, "magrpo")
    problem = task.train_items[0]
    sample = scripted({0: [" Add the numbers.\n2. Return it."] * 2, 1: [RIGHT, ALMOST]})
    root = rollout([problem], task, sample, RolloutSettings(num_turns=1, samples_per_turn=[2]))[0]
    assert [s.total for s in root.scores] == [2.1, 1.85]              # 0.6 + 0.5 + 4/4 and + 3/4
    assert root.sample_prompts[1][0].endswith('    """\n    # Plan:\n    # 1. Add the numbers.\n    # 2. Return it.\n')
    assert sample_returns(root, 0) == sample_returns(root, 1) == [2.1, 1.85]   # shared reward
    assert plan_text(" a\n\n2. b\n3. c\n4. d", 400) == "1. a\n2. b\n3. c" and plan_text("x" * 9, 4) == "1.xx"
    assert with_plan(problem, "P", "1. a") == "P    # Plan:\n    # 1. a\n"


def test_planner_coder_self_tests_and_decide(data):
    config = _config("planner_coder_cpu.yaml", PlannerCoderConfig, data, "code_reward.type=self_tests",
                     "planner_coder.revise=decide")
    task = build_planner_coder_task(config, "magrpo")
    problem = task.train_items[0]
    assert example_asserts(problem) == ["assert add(1, 2) == 3"]
    sample = scripted({0: ["x", "y"], 1: [RIGHT, "    return 3\n"]})
    root = rollout([problem], task, sample, RolloutSettings(num_turns=1, samples_per_turn=[2]))[0]
    # the one example: both pass it (weight 1): both get full support; the hidden reward is only logged
    assert [s.total for s in root.scores] == [2.1, 2.1]
    assert [s.metrics["hidden_reward"] for s in root.scores] == [2.1, 1.35]
    assert revise_target(root.scores[0].details[2]) == "plan"
    broken = task.score([problem], [["x", "    return (\n"]])[0]
    assert revise_target(broken.details[2]) == "code"
    nxt = task.next_prompts(problem, [[("p", "x")], [(root.sample_prompts[1][0], "    return (\n")]], ["x", "    return ("],
                            broken)
    assert "write your plan again unchanged" in nxt[0] and "Feedback on your code" in nxt[1]


@pytest.mark.parametrize("sharing", ["shared", "individual"])
def test_coder_tester_scripted_rewards(data, sharing):
    config = _config("coder_tester_cpu.yaml", CoderTesterConfig, data, "magrpo.num_generations=2",
                     f"coder_tester.reward_sharing={sharing}")
    task = build_coder_tester_task(config, "magrpo")
    problem = task.train_items[0]
    sample = scripted({0: [RIGHT, ALMOST], 1: [TESTS, "0, 0) == 0\n"]})
    root = rollout([problem], task, sample, RolloutSettings(num_turns=1, samples_per_turn=[2]))[0]
    # tester 1: add(1,2)==3 valid, ALMOST passes it: 0.5; add(2,2)==5 rejects the reference: -1; add(-1,1)==0 valid,
    # kills ALMOST: 1.0 -> 0.5/3. Tester 2: add(0,0)==0 valid, ALMOST passes: 0.5
    tester = [round(0.5 / 3, 6), 0.5]
    assert [s.metrics["tester_reward"] for s in root.scores] == tester
    assert [s.metrics["coder_reward"] for s in root.scores] == [2.1, 1.85]
    assert [s.total for s in root.scores] == [round(2.1 + tester[0], 6), round(1.85 + tester[1], 6)]
    assert root.scores[0].metrics["tests_valid"] == pytest.approx(2 / 3)
    if sharing == "individual":
        assert task.agent_rewards and root.scores[0].agent_rewards == [2.1, tester[0]]
        assert sample_returns(root, 0) == [2.1, 1.85] and sample_returns(root, 1) == tester
    else:
        assert not task.agent_rewards and sample_returns(root, 1) == [s.total for s in root.scores]


def test_coder_tester_self_tests_uses_the_groups_tests(data):
    config = _config("coder_tester_cpu.yaml", CoderTesterConfig, data, "code_reward.type=self_tests")
    task = build_coder_tester_task(config, "magrpo")
    problem = task.train_items[0]
    scores = task.score([problem, problem], [[RIGHT, TESTS], [ALMOST, TESTS]])
    # pool: add(1,2)==3, add(2,2)==5, add(-1,1)==0; RIGHT passes [1,0,1], ALMOST [1,0,0]: weights 1, 0, 0.5
    assert [s.metrics["coder_reward"] for s in scores] == [2.1, round(1.1 + 1 / 1.5, 6)]


def test_trainers_that_need_one_reward_refuse_individual_rewards(data):
    from cooprl.trainers.madpo import build_madpo
    config = _config("coder_tester_cpu.yaml", CoderTesterConfig, data, "coder_tester.reward_sharing=individual")
    with pytest.raises(ConfigError, match="MADPO ranks joint answers by the team's one reward"):
        build_madpo(config, "madpo", build_coder_tester_task(config, "madpo"))
    config = _config("planner_coder_cpu.yaml", PlannerCoderConfig, data)
    with pytest.raises(ConfigError, match="joint_mode=cross"):
        build_planner_coder_task(load_config(ROOT / "configs" / "planner_coder_cpu.yaml",
                                             [f"dataset.path={data}", "magrpo.joint_mode=cross"],
                                             task_config=PlannerCoderConfig), "magrpo")


def test_the_config_names_its_environment():
    assert environment_of(ROOT / "configs" / "planner_coder_cpu.yaml") == "envs.planner_coder.train"
    assert environment_of(ROOT / "configs" / "coder_tester_cpu.yaml") == "envs.coder_tester.train"
    assert environment_of(ROOT / "configs" / "arithmetic_cpu.yaml") == "envs.arithmetic.train"
    assert environment_of(ROOT / "configs" / "magrpo_che_cpu.yaml") == "envs.code_generation.train"
