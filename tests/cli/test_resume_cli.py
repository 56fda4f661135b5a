"""Resuming through the command line, as a user does it: `--resume RUN_DIR` after Ctrl-C, `--resume latest` after a
SIGKILL (an unnamed run, as the reference configs make them), and both end where an uninterrupted run ends."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.environment import child_env

pytestmark = pytest.mark.slow   # end to end (trainers, command lines, subprocesses): not in `make test-fast`

ROOT = Path(__file__).resolve().parents[2]
STEPS = 6
SMALL = ["agent_model.name=offline:tiny-random", "agent_model.device=cpu", "agent_model.torch_dtype=float32",
         "dataset.name=coop", "dataset.type=coophumaneval", "dataset.train_split=train[16:]",
         "dataset.eval_split=test[:1]", "wandb.mode=disabled", f"magrpo.max_steps={STEPS}",
         "magrpo.num_generations=2", "magrpo.max_new_tokens=6", "magrpo.num_turns=1", "magrpo.eval_interval=0",
         "magrpo.eval_num_samples=1", "checkpoint.checkpoint_interval=1", "checkpoint.checkpoint_total_limit=null"]
ENV = child_env(PATH="/usr/bin:/bin", WANDB_SILENT="true", OMP_NUM_THREADS="1")


def start(args):
    return subprocess.Popen([sys.executable, "train_magrpo.py", *args], cwd=ROOT, env=ENV, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def interrupt_after_first_checkpoint(proc, base: Path, sig: int) -> None:
    """Send `sig` as soon as a run folder under `base` holds its first checkpoint."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if list(base.glob("*/checkpoints/checkpoint-1/done")):
            proc.send_signal(sig)
            break
        time.sleep(0.01)
    proc.communicate(timeout=300)


def rewards(run_dir: Path) -> list[tuple[int, float]]:
    events = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [(e["step"], e["turn_1/reward_mean"]) for e in events if "turn_1/reward_mean" in e]


def test_resume_after_ctrl_c_and_after_sigkill(tmp_path):
    # Ctrl-C: the loop saves a checkpoint after the step it is in and stops; --resume RUN_DIR continues it
    named = tmp_path / "named"
    proc = start(["--config", "configs/magrpo_che_config.yaml", "--override", *SMALL, f"output.base_dir={named}",
                  "output.run_name=run"])
    interrupt_after_first_checkpoint(proc, named, signal.SIGINT)
    assert proc.returncode == 130   # as shells report SIGINT: `train && evaluate` stops here (after the save)
    run_dir = named / "run"
    stopped_at = len(rewards(run_dir))
    assert 1 <= stopped_at < STEPS, "the run ended before Ctrl-C reached it"
    resumed = subprocess.run([sys.executable, "train_magrpo.py", "--resume", str(run_dir)], cwd=ROOT, env=ENV,
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    after_ctrl_c = rewards(run_dir)
    assert [s for s, _ in after_ctrl_c] == list(range(1, STEPS + 1))

    # SIGKILL: no chance to save; --resume latest finds the newest run of this trainer and dataset (the reference
    # configs leave run_name null: every launch makes a new timestamped folder) and its newest checkpoint
    unnamed = tmp_path / "unnamed"
    args = ["--config", "configs/magrpo_che_config.yaml", "--override", *SMALL, f"output.base_dir={unnamed}"]
    proc = start(args)
    interrupt_after_first_checkpoint(proc, unnamed, signal.SIGKILL)
    (killed,) = list(unnamed.iterdir())
    assert len(rewards(killed)) < STEPS, "the run ended before SIGKILL reached it"
    resumed = subprocess.run([sys.executable, "train_magrpo.py", *args[:2], "--resume", "latest", *args[2:]],
                             cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert list(unnamed.iterdir()) == [killed]   # continued in place, no new folder
    # both interrupted runs end exactly where the other one does (same config and seed; resume is bit-for-bit)
    assert rewards(killed) == after_ctrl_c


def dry_run(trainer, default_config, argv):
    """Return the exit status of a trainer script's command line that stops before training."""
    from cooprl.cli import exit_status, read_command_line
    return exit_status(lambda: read_command_line(trainer, default_config, argv))


def test_resume_errors_are_one_line(tmp_path, capsys):
    code = dry_run("magrpo", "configs/magrpo_che_config.yaml", ["--resume", str(tmp_path)])
    assert code == 2 and "not a run folder" in capsys.readouterr().err
    code = dry_run("magrpo", "configs/magrpo_che_config.yaml",
                   ["--resume", "latest", "--override", f"output.base_dir={tmp_path}"])
    assert code == 2 and "no run of magrpo on this dataset under" in capsys.readouterr().err


def test_ctrl_c_in_the_evaluation_before_training_exits_130_without_a_traceback(tmp_path):
    # a real SIGINT while the starting models are evaluated (no step trained yet): one warning, nothing saved, 130
    args = ["--config", "configs/magrpo_che_config.yaml", "--override", *SMALL, "dataset.eval_split=test[:8]",
            "magrpo.eval_num_samples=8", "magrpo.max_new_tokens=64", "magrpo.eval_at_start=true",
            f"output.base_dir={tmp_path}", "output.run_name=run"]
    proc = start(args)
    seen = []
    for line in proc.stderr:   # the log line that says the evaluation began
        seen.append(line)
        if "evaluating at step 0" in line:
            time.sleep(0.2)
            proc.send_signal(signal.SIGINT)
            break
    _, rest = proc.communicate(timeout=300)
    err = "".join(seen) + rest
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err and "interrupted during the evaluation before training" in err
    assert not list((tmp_path / "run").glob("checkpoints/checkpoint-*"))
