"""The planner+coder and coder+tester teams (issue 18): scripted agents with known answers get exact rewards
(the tester's too), the self-tests reward's formula on a known matrix, and the config picks the environment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from cooprl.config import ConfigError, Run, load_config, read_yaml
from cooprl.rollout.generation import Completion
from cooprl.rollout.tree import RolloutSettings, rollout, sample_returns
from cooprl.trainers import build_algorithm
from envs.coder_tester.config import CoderTesterConfig
from envs.coder_tester.task import build_coder_tester_task
from envs.planner_coder.config import PlannerCoderConfig
from envs.planner_coder.task import build_planner_coder_task, plan_text, revise_target, with_plan
from envs import ENVIRONMENTS, environment_of
from envs.arithmetic.config import ArithmeticConfig
from rewards.self_tests import example_asserts

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = {"task_id": "T/0", "entry_point": "add",
           "prompt": 'def add(a, b):\n    """Return a + b.\n    >>> add(1, 2)\n    3\n    """\n',
           "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(0, 0) == 0\n"
                   "    assert candidate(-1, 1) == 0\n    assert candidate(2, 5) == 7\n",
           "canonical_solution": "    return a + b\n"}
RIGHT, ALMOST = "    return a + b\n", "    return abs(a) + b\n"   # ALMOST fails candidate(-1, 1) only: 3/4
TESTS = "0, 3) == 3\nassert add(2, 2) == 5\nassert add(-1, 1) == 0\n"  # valid, rejects the reference, valid


@pytest.fixture
def data(tmp_path) -> Path:
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps(PROBLEM) + "\n" + json.dumps({**PROBLEM, "task_id": "T/1"}) + "\n")
    return path


def _config(name: str, task_config: type, data: Path, *overrides: str):
    # the scripted answers below are written for prompts that end after the docstring (bodies carry their indentation)
    return load_config(ROOT / "configs" / name, [f"dataset.path={data}", "dataset.train_split=train[:1]",
                                                  "dataset.eval_split=train[1:]", "code_prompt.open_body=false",
                                                  *overrides], task_config=task_config)


def scripted(texts: dict[int, list[str]]):
    """Return a sampler whose agent a answers texts[a][i] for its i-th sample of a call (in order)."""
    def sample(agent, prompts, n):
        out, answers = [], iter(texts[agent])
        for _ in prompts:
            out.append([Completion(next(answers), torch.tensor([1]), torch.tensor([2]), False) for _ in range(n)])
        return out
    return sample


def test_planner_coder_scripted_rewards(data):
    config = _config("planner_coder_cpu.yaml", PlannerCoderConfig, data, "magrpo.num_generations=2")
    task = build_planner_coder_task(Run.of(config, "magrpo"))
    problem = task.train_items[0]
    sample = scripted({0: [" Add the numbers.\n2. Return it."] * 2, 1: [RIGHT, ALMOST]})
    root = rollout([problem], task, sample, RolloutSettings(num_turns=1, samples_per_turn=[2]))[0]
    assert [s.total for s in root.scores] == [2.1, 1.85]              # 0.6 + 0.5 + 4/4 and + 3/4
    assert root.sample_prompts[1][0].endswith('    """\n    # Plan:\n    # 1. Add the numbers.\n    # 2. Return it.\n')
    assert sample_returns(root, 0) == sample_returns(root, 1) == [2.1, 1.85]   # shared reward
    assert plan_text(" a\n\n2. b\n3. c\n4. d", 400) == "1. a\n2. b\n3. c" and plan_text("x" * 9, 4) == "1.xx"
    assert with_plan(problem, "P", "1. a") == "P    # Plan:\n    # 1. a\n"


def test_main_sees_the_aux_code_of_its_own_joint_action(data):
    from envs.code_generation.config import CodeTaskConfig
    from envs.code_generation.task import build_code_task
    config = _config("magrpo_che_cpu.yaml", CodeTaskConfig, data, "magrpo.num_generations=2",
                     "aux_main.main_sees_aux=true")
    task = build_code_task(Run.of(config, "magrpo"))
    problem = task.train_items[0]
    auxes = ["a, b):\n    return a + b\n", "x):\n    return x\n"]
    sample = scripted({0: auxes, 1: ["    return aux(a, b)\n", "    return a + b\n"]})
    root = rollout([problem], task, sample, RolloutSettings(num_turns=1, samples_per_turn=[2]))[0]
    main_prompts = root.sample_prompts[1]
    # the g-th main sample read the g-th aux code (rebuilt with its `def aux(` prefix), then its usual prompt
    assert main_prompts[0].startswith("The helper function `aux` is defined as follows:\n\ndef aux(a, b):\n"
                                      "    return a + b\n\nA helper function `aux(...)` is already defined")
    assert "def aux(x):\n    return x" in main_prompts[1] and "return a + b" not in main_prompts[1].split("\n\n")[1]
    assert main_prompts[0].endswith(problem.prompt.lstrip("\n"))
    # the reward is the team's as before: the first pair calls aux and passes every test (the bonus fires)
    assert root.scores[0].total > root.scores[1].total
    cross = _config("magrpo_che_cpu.yaml", CodeTaskConfig, data, "aux_main.main_sees_aux=true",
                    "magrpo.joint_mode=cross")
    with pytest.raises(ConfigError,
                       match="magrpo.joint_mode=cross: .* sequential team .* set magrpo.joint_mode=aligned"):
        run = Run.of(cross, "magrpo")
        build_algorithm(run, build_code_task(run))   # refused before any model loads
    with pytest.raises(ConfigError, match="num_agents 2"):
        build_code_task(Run.of(_config("magrpo_che_cpu.yaml", CodeTaskConfig, data, "aux_main.main_sees_aux=true",
                                       "magrpo.num_agents=1"), "magrpo"))
    with pytest.raises(ConfigError, match="aux\\+main team"):
        build_planner_coder_task(Run.of(_config("planner_coder_cpu.yaml", PlannerCoderConfig, data,
                                                "aux_main.main_sees_aux=true"), "magrpo"))


def test_open_body_prompts_end_inside_the_function(data):
    from envs.code_generation.config import CodeTaskConfig
    from envs.code_generation.data import Problem
    from envs.code_generation.prompts import open_body
    from envs.code_generation.task import build_code_task
    # the docstring's own indentation, a line break added where the prompt has none, trailing blanks replaced
    assert open_body(Problem("a", 'def f(x):\n  """Doc."""\n', "", "f")).prompt == 'def f(x):\n  """Doc."""\n  '
    assert open_body(Problem("b", 'def f(x):\n    """Doc."""', "", "f")).prompt == 'def f(x):\n    """Doc."""\n    '
    assert open_body(Problem("c", 'def f(x):\n    """Doc."""\n\n', "", "f")).prompt.endswith('"""\n\n    ')

    def first_turn(*overrides):
        task = build_code_task(Run.of(_config("magrpo_che_cpu.yaml", CodeTaskConfig, data, "magrpo.num_generations=1",
                                              *overrides), "magrpo"))
        return task, task.first_prompts(task.train_items[0])

    task, prompts = first_turn("code_prompt.open_body=true")
    assert prompts[1].endswith('    """\n    ') and prompts[0].endswith("def aux(")   # main's, not aux's
    # a continuation of the open body scores exactly as the same code after the docstring-ending prompt
    opened = rollout(task.train_items[:1], task, scripted({0: ["a, b):\n    return a + b\n"],
                                                           1: ["return aux(a, b)\n"]}),
                     RolloutSettings(num_turns=1, samples_per_turn=[1]))[0].scores[0]
    plain_task, plain_prompts = first_turn()
    assert plain_prompts[1].endswith('    """\n')
    plain = rollout(plain_task.train_items[:1], plain_task,
                    scripted({0: ["a, b):\n    return a + b\n"], 1: ["    return aux(a, b)\n"]}),
                    RolloutSettings(num_turns=1, samples_per_turn=[1]))[0].scores[0]
    assert opened.details[1] == plain.details[1] == PROBLEM["prompt"] + "    return aux(a, b)\n"   # the same program
    assert opened.total == plain.total == 3.0 and opened.metrics == plain.metrics
    team = build_coder_tester_task(Run.of(_config("coder_tester_cpu.yaml", CoderTesterConfig, data,
                                                  "code_prompt.open_body=true"), "magrpo"))
    assert team.first_prompts(team.train_items[0])[0].endswith('    """\n    ')
    with pytest.raises(ConfigError, match="code_prompt.open_body: the planner"):
        build_planner_coder_task(Run.of(_config("planner_coder_cpu.yaml", PlannerCoderConfig, data,
                                                "code_prompt.open_body=true"), "magrpo"))


def test_centralized_teams_score_one_answer_like_the_two_agents(data):
    # one model writes both parts; split, they get exactly the decentralized team's reward
    config = _config("planner_coder_cpu.yaml", PlannerCoderConfig, data, "magrpo.collaboration_mode=centralized")
    task = build_planner_coder_task(Run.of(config, "magrpo"))
    problem = task.train_items[0]
    assert task.num_agents == 1 and task.first_prompts(problem)[0].endswith('    """\n    # Plan:\n    # 1.')
    answer = " Add the numbers.\n    # 2. Return it.\n" + ALMOST
    assert task.score([problem], [[answer]])[0].total == 1.85
    from envs.planner_coder.task import split_joint_answer
    assert split_joint_answer(problem, answer) == [" Add the numbers.\n2. Return it.", ALMOST]

    config = _config("coder_tester_cpu.yaml", CoderTesterConfig, data, "magrpo.collaboration_mode=centralized")
    task = build_coder_tester_task(Run.of(config, "magrpo"))
    team = build_coder_tester_task(Run.of(_config("coder_tester_cpu.yaml", CoderTesterConfig, data), "magrpo"))
    answers = [RIGHT + "\nassert add(" + TESTS, ALMOST + "\nassert add(" + TESTS]
    central = task.score([problem, problem], [[a] for a in answers])
    apart = team.score([problem, problem], [[RIGHT, TESTS], [ALMOST, TESTS]])
    assert [s.total for s in central] == [s.total for s in apart]
    assert [s.metrics["tester_reward"] for s in central] == [s.metrics["tester_reward"] for s in apart]
    assert "\nassert " not in task.stop_strings[0] and task.first_prompts(problem)[0].endswith('    """\n')
    with pytest.raises(ConfigError, match="single-turn"):
        build_coder_tester_task(
            Run.of(
                _config(
                    "coder_tester_cpu.yaml",
                    CoderTesterConfig,
                    data,
                    "magrpo.collaboration_mode=centralized",
                    "magrpo.num_turns=2",
                ),
                "magrpo",
            )
        )
    with pytest.raises(ConfigError, match="reward_sharing=shared"):
        build_coder_tester_task(Run.of(_config("coder_tester_cpu.yaml", CoderTesterConfig, data,
                                               "magrpo.collaboration_mode=centralized",
                                               "coder_tester.reward_sharing=individual"), "magrpo"))


def test_planner_coder_self_tests_and_decide(data):
    config = _config("planner_coder_cpu.yaml", PlannerCoderConfig, data, "code_reward.type=self_tests",
                     "planner_coder.revise=decide")
    task = build_planner_coder_task(Run.of(config, "magrpo"))
    problem = task.train_items[0]
    assert example_asserts(problem) == ["assert add(1, 2) == 3"]
    sample = scripted({0: ["x", "y"], 1: [RIGHT, "    return 3\n"]})
    root = rollout([problem], task, sample, RolloutSettings(num_turns=1, samples_per_turn=[2]))[0]
    # the pool: the check's asserts the prompt does not show (held out: (0, 0), (-1, 1), (2, 5)), never the example,
    # which the constant 3 passes (it got full support from it before)
    assert [s.total for s in root.scores] == [2.1, 1.1]
    assert [s.metrics["hidden_reward"] for s in root.scores] == [2.1, 1.35]
    assert revise_target(root.scores[0].details[2]) == "plan"
    broken = task.score([problem], [["x", "    return (\n"]])[0]
    assert revise_target(broken.details[2]) == "code"
    nxt = task.next_prompts(problem, [[("p", "x")], [(root.sample_prompts[1][0], "    return (\n")]], ["x", "    "
                                                                                                            "return ("],
                            broken)
    assert "write your plan again unchanged" in nxt[0] and "Feedback on your code" in nxt[1]


@pytest.mark.parametrize("sharing", ["shared", "individual"])
def test_coder_tester_scripted_rewards(data, sharing):
    config = _config("coder_tester_cpu.yaml", CoderTesterConfig, data, "magrpo.num_generations=2",
                     f"coder_tester.reward_sharing={sharing}")
    task = build_coder_tester_task(Run.of(config, "magrpo"))
    problem = task.train_items[0]
    sample = scripted({0: [RIGHT, ALMOST], 1: [TESTS, "0, 0) == 0\nassert add(-1, 1) == 0\n"]})
    root = rollout([problem], task, sample, RolloutSettings(num_turns=1, samples_per_turn=[2]))[0]
    # wrong codes: ALMOST and the reference's mutant a - b (rewards/mutants.py). Tester 1: add(0,3)==3 rejects a - b
    # only: 0.5; add(2,2)==5 rejects the reference: -1; add(-1,1)==0 rejects both: 1.0 -> 0.5/3. Tester 2:
    # add(0,0)==0 both pass: 0; add(-1,1)==0: 1.0 -> 0.5
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
    task = build_coder_tester_task(Run.of(config, "magrpo"))
    problem = task.train_items[0]
    tests = "1, 2) == 3\n" + TESTS.split("\n", 1)[1]   # the prompt's example, then TESTS' other two
    scores = task.score([problem, problem], [[RIGHT, tests], [ALMOST, tests]])
    # pool: the held-out add(0,0)==0, add(-1,1)==0, add(2,5)==7 (weight 1; the tester's add(-1,1)==0 is one of them),
    # and add(2,2)==5 (no code passes it: weight 0); add(1,2)==3 calls the example only: out. ALMOST passes 2 of 3
    assert [s.metrics["coder_reward"] for s in scores] == [2.1, round(1.1 + 1 / 1.5, 6)]


def test_trainers_that_need_one_reward_refuse_individual_rewards(data):
    from cooprl.trainers.madpo import build_madpo
    config = _config("coder_tester_cpu.yaml", CoderTesterConfig, data, "coder_tester.reward_sharing=individual")
    with pytest.raises(ConfigError, match="MADPO ranks joint answers by the team's one reward"):
        build_madpo(Run.of(config, "madpo"), build_coder_tester_task(Run.of(config, "madpo")))
    config = _config("planner_coder_cpu.yaml", PlannerCoderConfig, data)
    cross = _config("planner_coder_cpu.yaml", PlannerCoderConfig, data, "magrpo.joint_mode=cross")
    with pytest.raises(ConfigError, match="magrpo.joint_mode=cross: .* sequential team"):
        build_algorithm(Run.of(cross, "magrpo"), build_planner_coder_task(Run.of(cross, "magrpo")))
    # a sequential team with cross joint actions is never rolled out: the rollout refuses it too
    team = build_planner_coder_task(Run.of(cross, "magrpo"))
    with pytest.raises(ValueError, match="aligned"):
        rollout(team.train_items[:1], team, scripted({0: ["p"] * 2, 1: ["c"] * 2}),
                RolloutSettings(num_turns=1, samples_per_turn=[2], joint_mode="cross"))


def test_the_config_names_its_environment():
    def named(name: str) -> str:
        return environment_of(read_yaml(ROOT / "configs" / name)).name
    assert named("planner_coder_cpu.yaml") == "planner_coder"
    assert named("coder_tester_cpu.yaml") == "coder_tester"
    assert named("arithmetic_cpu.yaml") == "arithmetic"
    assert named("magrpo_che_cpu.yaml") == "code_generation"
    assert ENVIRONMENTS["arithmetic"].config is ArithmeticConfig


# ---------------------------------------------------------------------------------------------- learnable variants
def _team_task(kind: str):
    """The two team shapes on tests/learnable.py's character model: `sequential` (agent 1 answers after agent 0,
    seeing its text; shared reward: the mean lowercase share, as planner+coder) and `individual` (each agent its
    own reward: agent 0 the lowercase share, agent 1 the uppercase share, as coder+tester's individual rewards)."""
    import dataclasses
    import string
    from cooprl.task import Score
    from tests.learnable import HEAD, lowercase_reward, lowercase_task
    base = lowercase_task(2)
    if kind == "sequential":
        return dataclasses.replace(base, follow_prompt=lambda item, a, prompt, earlier: f"{prompt}{earlier[0][:HEAD]}|")

    def upper(text: str) -> float:
        return sum(c in string.ascii_uppercase for c in text[:HEAD]) / HEAD

    def score(items, joints):
        return [Score((lowercase_reward(j[0]) + upper(j[1])) / 2, {"agent0_lower": lowercase_reward(j[0]),
                                                                    "agent1_upper": upper(j[1])},
                      agent_rewards=[lowercase_reward(j[0]), upper(j[1])]) for j in joints]
    return dataclasses.replace(base, score=score, agent_rewards=True)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sequential", "individual"])
def test_a_learnable_variant_of_each_team_learns(tmp_path, kind):
    from cooprl.trainers.loop import seed_everything, train_loop
    from cooprl.trainers.magrpo import build_magrpo
    from tests.learnable import build_char_model
    torch.set_num_threads(1)
    model = build_char_model(tmp_path / "model", seed=0)
    t = "magrpo"
    config = load_config(None, [f"agent_model.name={model}", "agent_model.device=cpu",
                                "agent_model.torch_dtype=float32",
                                "wandb.mode=disabled", f"output.base_dir={tmp_path}", "output.run_name=run", "seed=0",
                                f"{t}.max_new_tokens=6", f"{t}.num_turns=1", f"{t}.learning_rate=1e-2",
                                f"{t}.max_steps=16", f"{t}.num_train_epochs=4", f"{t}.eval_interval=0",
                                f"{t}.eval_num_samples=2", f"{t}.temperature=1.0", f"{t}.top_p=1.0",
                                f"{t}.num_generations=4", f"{t}.rollout_buffer_size=1", f"{t}.weight_decay=0.0"])
    seed_everything(config.seed)
    task = _team_task(kind)
    summary = train_loop(Run.of(config, t), task, build_magrpo(Run.of(config, t), task), tmp_path / "run")
    events = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    keys = ["turn_1/reward_mean"] if kind == "sequential" else ["turn_1/agent0_lower", "turn_1/agent1_upper"]
    for key in keys:   # each agent learns its own target
        curve = [e[key] for e in events if key in e]
        assert sum(curve[-4:]) / 4 > sum(curve[:4]) / 4 + 0.1, (key, curve)
    assert summary["final_eval"]["eval/turn_1/reward_mean"] > 0.3


@pytest.mark.slow
@pytest.mark.parametrize("trainer", ["magrpo", "iac", "maac", "madpo"])
def test_each_team_config_trains_through_the_command_line(tmp_path, trainer):
    # the README's commands, on the tiny random model for one step: each team with each trainer it names
    from envs.launch import train_main as main
    torch.set_num_threads(1)
    for team in ("planner_coder", "coder_tester"):
        extra = [f"{trainer}.num_generations=2"] if trainer != "madpo" else [f"{trainer}.preference_num_candidates=2"]
        argv = ["--config", str(ROOT / "configs" / f"{team}_cpu.yaml"), "--override",
                "agent_model.name=offline:tiny-random", "critic_model.name=null", f"{trainer}.max_steps=1",
                f"{trainer}.max_new_tokens=8", f"{trainer}.eval_num_samples=1", "dataset.eval_split=test[:1]",
                "wandb.mode=disabled", f"output.base_dir={tmp_path}", f"output.run_name={team}-{trainer}", *extra]
        assert main(trainer, argv) == 0, (team, trainer)
        events = [
            json.loads(line) for line in (tmp_path / f"{team}-{trainer}" / "metrics.jsonl").read_text().splitlines()
        ]
        assert any(e.get("step") == 1 and "turn_1/reward_mean" in e for e in events), (team, trainer)


def test_the_asserts_later_turns_show_leave_the_self_tests_pool(data):
    # issue 42: the self-tests' held-out pool leaves out what any turn's level (or expert) feedback can show
    from envs.code_generation.self_tests import feedback_slice_of
    two_turns = _config("planner_coder_cpu.yaml", PlannerCoderConfig, data, "magrpo.num_turns=2",
                        "external.mode=level_feedback", "external.sandbox_slice=2")
    assert feedback_slice_of(Run.of(two_turns, "magrpo")) == 2
    one_turn = _config("planner_coder_cpu.yaml", PlannerCoderConfig, data, "magrpo.num_turns=1",
                       "external.mode=level_feedback")
    assert feedback_slice_of(Run.of(one_turn, "magrpo")) is None
    plain = _config("planner_coder_cpu.yaml", PlannerCoderConfig, data, "magrpo.num_turns=2", "external.mode=plain")
    assert feedback_slice_of(Run.of(plain, "magrpo")) is None
