"""A second environment (envs/arithmetic) plugs into the library without touching it: its own config section,
its own Task, the shared trainers, loop and command line."""

import ast
import json
from pathlib import Path

import pytest

from cooprl.config import ConfigError, Run, load_config
from envs.arithmetic.config import ArithmeticConfig
from envs.arithmetic.task import build_arithmetic_task, joint_reward, said_number
from envs.launch import train_main as main

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "arithmetic_cpu.yaml"


def test_rewards_of_known_answers():
    assert [said_number(t) for t in ("7", " I say 12.", "-3 and 4", "none", "")] == [7, 12, -3, 0, 0]
    assert joint_reward(10, ["4", "6"]).total == 1.0 and joint_reward(10, ["4", "6"]).success
    assert joint_reward(10, ["4", "3"]).total == pytest.approx(0.7)
    assert joint_reward(10, ["nothing", "x"]).total == 0.0                 # 10 away
    assert joint_reward(3, ["40", "2"]).total == 0.0 and joint_reward(3, ["40", "2"]).metrics == {"miss": 39.0}


def test_its_config_section_is_read_next_to_the_librarys():
    config = load_config(CONFIG, ["arithmetic.num_train=5"], task_config=ArithmeticConfig)
    assert config.task.arithmetic.num_train == 5 and config.magrpo.num_generations == 2
    task = build_arithmetic_task(Run.of(config, "magrpo"))
    assert (len(task.train_items), len(task.eval_items), task.num_agents) == (5, 4, 2)
    assert task.train_items == build_arithmetic_task(Run.of(config, "magrpo")).train_items   # fixed by arithmetic.seed
    with pytest.raises(ConfigError, match="arithmetic.num_trian: unknown key; did you mean arithmetic.num_train"):
        load_config(CONFIG, ["arithmetic.num_trian=5"], task_config=ArithmeticConfig)
    # the code task's sections mean nothing here, and this task's nothing to the code task
    with pytest.raises(ConfigError, match="dataset: unknown key"):
        load_config(CONFIG, ["dataset.name=coop"], task_config=ArithmeticConfig)
    with pytest.raises(ConfigError, match="arithmetic: unknown key"):
        load_config(CONFIG)


def test_the_environment_imports_only_the_library():
    for path in (ROOT / "envs" / "arithmetic").glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        modules = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        modules |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert {m.split(".")[0] for m in modules} <= {"cooprl", "envs", "__future__", "dataclasses", "random", "re",
                                                      "sys", "typing"}, path
        assert not any(m.startswith(("envs.code_generation", "rewards")) for m in modules), path


@pytest.mark.slow
@pytest.mark.parametrize("trainer", ["magrpo", "iac"])
def test_trainers_run_on_it_through_its_command_line(trainer, tmp_path, capsys):
    import torch
    torch.set_num_threads(1)
    code = main(trainer, ["--config", str(CONFIG), "--override", f"output.base_dir={tmp_path}",
                          f"{trainer}.max_steps=2"])
    assert code == 0, capsys.readouterr().err
    events = [json.loads(line) for line in (tmp_path / "arithmetic-cpu" / "metrics.jsonl").read_text().splitlines()]
    steps = [e for e in events if "turn_1/reward_mean" in e]
    assert [e["step"] for e in steps] == [1, 2]
    assert all(0.0 <= e["turn_1/reward_mean"] <= 1.0 for e in steps)
    assert [e["step"] for e in events if "eval/turn_1/reward_mean" in e] == [0, 2]
    assert (tmp_path / "arithmetic-cpu" / "checkpoints" / "checkpoint-2").is_dir()
