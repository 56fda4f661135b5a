"""cooprl/parallel/torchrun.py: Ctrl-C under torchrun (2 processes, gloo on CPU) saves a checkpoint and ends in one
line with exit status 130, where plain torchrun printed its SignalException traceback."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cooprl import checkpoint as ckpt
from cooprl.parallel.torchrun import SHUTDOWN_TIMEOUT_S, command_for, with_shutdown_timeout
from tests.cooprl.parallel.test_scale_out import DDP_OVERRIDES, TORCHRUN

ROOT = Path(__file__).resolve().parents[3]
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(Path.home()), "OMP_NUM_THREADS": "1",
       "WANDB_MODE": "disabled", "PYTHONPATH": str(ROOT)}


def test_the_shutdown_timeout_is_long_enough_for_a_step_and_a_save_unless_given():
    assert with_shutdown_timeout(["--nproc_per_node=2", "train.py"]) == [
        f"--shutdown-timeout={SHUTDOWN_TIMEOUT_S}", "--nproc_per_node=2", "train.py"]
    for given in (["--shutdown-timeout=5"], ["--shutdown_timeout", "5"]):
        assert with_shutdown_timeout([*given, "train.py"]) == [*given, "train.py"]


def test_the_command_that_goes_on_is_this_launcher_with_as_many_processes_per_node(monkeypatch):
    # the resume hint said `python train_magrpo.py` under torchrun, which a ddp run refuses (no launcher)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert command_for("train_magrpo.py", 1) == "python train_magrpo.py"
    assert command_for("train_iac.py", 4) == "python -m cooprl.parallel.torchrun --nproc_per_node 4 train_iac.py"
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    assert command_for("train_magrpo.py", 16) == ("python -m cooprl.parallel.torchrun --nproc_per_node 8 (on each of "
                                                  "the 2 nodes, with torchrun's rendezvous flags) train_magrpo.py")


def test_a_process_of_plain_torchrun_says_at_its_start_what_its_signals_will_do(monkeypatch):
    # its traceback comes from torchrun's own process: what a training process can do is say so, and name the wrapper
    from cooprl.parallel.torchrun import STARTED_HERE, plain_torchrun_warning
    for name in ("TORCHELASTIC_RUN_ID", STARTED_HERE, "ACCELERATE_MIXED_PRECISION"):
        monkeypatch.delenv(name, raising=False)
    assert plain_torchrun_warning() == ""   # no launcher
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")
    assert plain_torchrun_warning().startswith("started by plain torchrun: after Ctrl-C or SIGTERM it kills a step")
    assert "python -m cooprl.parallel.torchrun takes the same arguments" in plain_torchrun_warning()
    for launcher in (STARTED_HERE, "ACCELERATE_MIXED_PRECISION"):   # this wrapper; accelerate launch
        monkeypatch.setenv(launcher, "1")
        assert plain_torchrun_warning() == ""
        monkeypatch.delenv(launcher)


@pytest.mark.parametrize("sig,status,said", [(signal.SIGTERM, 143, "terminated (SIGTERM)"),
                                              (signal.SIGINT, 130, "interrupted (Ctrl-C)")])
def test_the_launcher_s_signal_exception_is_one_line_and_the_shell_s_status(monkeypatch, capsys, sig, status, said):
    # what torchrun's agent raises in its own process once its processes stopped (the test below runs it for real)
    import torch.distributed.run
    from torch.distributed.elastic.multiprocessing.api import SignalException

    from cooprl.parallel.torchrun import main
    seen = []

    def stopped(argv):
        seen.append(argv)
        assert os.environ["COOPRL_TORCHRUN"] == "1"   # its processes know which launcher started them
        raise SignalException(f"Process 1 got signal: {sig}", sigval=sig)
    monkeypatch.setattr(torch.distributed.run, "main", stopped)
    monkeypatch.setenv("COOPRL_TORCHRUN", "")   # main() sets it: given back after the test
    assert main(["--nproc_per_node=2", "train_magrpo.py"]) == status
    assert seen == [[f"--shutdown-timeout={SHUTDOWN_TIMEOUT_S}", "--nproc_per_node=2", "train_magrpo.py"]]
    assert capsys.readouterr().err == (f"{said}: each process stopped as one process stops (a checkpoint after its "
                                       "step); rank 0's log above says what was kept and how to continue\n")


@pytest.mark.distributed
@pytest.mark.skipif(not TORCHRUN.exists(), reason="torchrun is not in the interpreter's folder")
def test_ctrl_c_under_torchrun_saves_and_is_one_line_130(tmp_path):
    args = ["--standalone", "--nproc_per_node=2", "train_magrpo.py", "--config", "configs/magrpo_che_config.yaml",
            "--override", *DDP_OVERRIDES, f"output.base_dir={tmp_path}", "output.run_name=run", "magrpo.max_steps=8",
            "checkpoint.checkpoint_interval=1", "checkpoint.checkpoint_total_limit=null"]
    # a terminal's Ctrl-C goes to the launcher's process group (torchrun's processes have sessions of their own)
    proc = subprocess.Popen([sys.executable, "-m", "cooprl.parallel.torchrun", *args], cwd=ROOT, env=ENV, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline and proc.poll() is None:
        if (tmp_path / "run" / "checkpoints" / "checkpoint-1" / "done").is_file():
            os.killpg(proc.pid, signal.SIGINT)
            break
        time.sleep(0.05)
    _, err = proc.communicate(timeout=400)
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err and "SignalException" not in err
    assert "interrupted (Ctrl-C): each process stopped as one process stops" in err
    saved = [int(p.name.split("-")[1]) for p in ckpt.list_checkpoints(tmp_path / "run" / "checkpoints")]
    assert 1 <= saved[-1] < 8, "the run ended before Ctrl-C reached it"
    # rank 0's log names this launcher with as many processes (plain python refuses a ddp run)
    assert (f"to continue: python -m cooprl.parallel.torchrun --nproc_per_node 2 train_magrpo.py --resume "
            f"{tmp_path / 'run'}") in err
    assert not list((tmp_path / "run" / "checkpoints").glob(".checkpoint-*"))
    # the same launcher goes on from the checkpoint
    resumed = subprocess.run([sys.executable, "-m", "cooprl.parallel.torchrun", "--standalone", "--nproc_per_node=2",
                              "train_magrpo.py", "--resume", str(tmp_path / "run")], cwd=ROOT, env=ENV,
                             capture_output=True, text=True, timeout=400)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert ckpt.list_checkpoints(tmp_path / "run" / "checkpoints")[-1].name == "checkpoint-8"
