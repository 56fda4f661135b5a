"""2-step runs of train_magrpo.py and train_grpo.py through the real CLI with the tiny model, then evaluate.py."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tests.environment import child_env

pytestmark = pytest.mark.slow   # end to end (trainers, command lines, subprocesses): not in `make test-fast`

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["agent_model.name=offline:tiny-random", "agent_model.device=cpu", "agent_model.torch_dtype=float32",
         "dataset.name=coop", "dataset.type=coophumaneval", "dataset.train_split=train[16:]",
         "dataset.eval_split=test[:1]", "wandb.mode=disabled"]   # W&B offline in one test: its start costs ~1.7 s


def trainer_overrides(trainer, tmp_path, name):
    return [f"{trainer}.max_steps=2", f"{trainer}.num_generations=2", f"{trainer}.max_new_tokens=8",
            f"{trainer}.eval_num_samples=1", f"{trainer}.eval_interval=1", f"output.base_dir={tmp_path}",
            f"output.run_name={name}", "checkpoint.checkpoint_interval=1"]


def run(args, tmp_path):
    # one torch thread, as the test process has (conftest.py): two would contend with the other pytest worker
    env = child_env(PATH="/usr/bin:/bin", WANDB_MODE="offline", WANDB_SILENT="true", OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)


def events(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_train_magrpo_two_steps_then_evaluate(tmp_path):
    result = run(["train_magrpo.py", "--config", "configs/magrpo_che_config.yaml", "--override", *SMALL,
                  *trainer_overrides("magrpo", tmp_path, "m"), "wandb.mode=offline"], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = tmp_path / "m"
    assert {"config.yaml", "metrics.jsonl", "rewards.png", "checkpoints"} <= {p.name for p in run_dir.iterdir()}
    train = [e for e in events(run_dir) if "turn_1/reward_mean" in e]
    assert [e["step"] for e in train] == [1, 2]
    assert all("turn_2/reward_mean" in e or e["turn_1/early_terminations"] == 1 for e in train)
    assert any("eval/turn_1/pass@1" in e for e in events(run_dir))
    assert "Summary of" in result.stdout and "mean training reward" in result.stdout
    assert (run_dir / "wandb").is_dir()  # offline W&B run files
    evaluation = run(["evaluate.py", "--config", str(run_dir / "config.yaml"), "--checkpoint",
                      str(run_dir / "checkpoints"), "--output", str(tmp_path / "eval.json")], tmp_path)
    assert evaluation.returncode == 0, evaluation.stderr[-3000:]
    metrics = json.loads((tmp_path / "eval.json").read_text())
    assert "eval/turn_1/pass@1" in metrics and "eval/turn_1/level1_definitions" in metrics


def test_train_grpo_two_steps(tmp_path):
    result = run(["train_grpo.py", "--config", "configs/grpo_he_config.yaml", "--override", *SMALL,
                  *trainer_overrides("grpo", tmp_path, "g"), "grpo.num_turns=1"], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    train = [e for e in events(tmp_path / "g") if "turn_1/reward_mean" in e]
    assert len(train) == 2 and all(0.0 <= e["turn_1/reward_mean"] <= 2.1 for e in train)
    assert "turn_1/uses_aux" not in train[0]  # single agent: no cooperation terms


def test_unregistered_trainer_is_a_clear_error(capsys):
    # every trainer of the config is registered now: an unknown name still gets a clear message
    from envs.launch import train_main
    assert train_main("nope", ["--config", "configs/magrpo_che_cpu.yaml"]) == 2
    assert "error: unknown trainer 'nope'; choose one of magrpo, grpo" in capsys.readouterr().err
