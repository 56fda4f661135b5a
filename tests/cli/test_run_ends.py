"""Every way a run ends leaves it resumable, and a run is one run (issue 43): SIGTERM gets what Ctrl-C gets, a save
that cannot complete (a full disk) keeps the last checkpoint and is one `error:` line, a run folder has one writer,
another run's checkpoint is a new run held to that run's settings and W&B run, `latest` on a first run leaves no
folder, a policy_checkpoint_dir that cannot be written is refused before any model loads, and a run started with
init_from is evaluated and resumed after its source run is deleted.

In-process through `envs.launch.train_main`, as tests/cli/test_scripted_use.py runs the scripts; the runs that train
use the tiny model (2 steps). The signals are real (`os.kill` of this process, at the moment a patch chooses)."""

import errno
import os
import shutil
import signal
import sys

import pytest

import evaluate
from cooprl import checkpoint as ckpt
from cooprl import run_folders
from cooprl.config import load_config
from cooprl.stopping import INTERRUPTED, TERMINATED
from tests.cli.test_bad_input import assert_one_error, base_config
from tests.cli.test_scripted_use import MISSING_MODEL, cli, events, fake_run, run_with_read_only
from tests.cooprl.test_run_folders import holder


def steps(run_dir) -> list[int]:
    return [e["step"] for e in events(run_dir) if "turn_1/reward_mean" in e]


def checkpoints(run_dir) -> list[str]:
    return [p.name for p in ckpt.list_checkpoints(run_dir / "checkpoints")]


# ------------------------------------------------------------------------------------------------ refused at once
@pytest.mark.slow   # a child process holds the lock; the task is built twice
def test_a_second_writer_of_a_run_folder_is_one_error_line(tmp_path, capsys):
    run_dir = fake_run(tmp_path / "run", "magrpo", checkpoint=True, **{"agent_model.name": "/no/such/model"})
    proc = holder(run_dir)   # a run training into it
    try:
        assert_one_error(*cli(capsys, "magrpo", "--resume", str(run_dir)),
                         f"{run_dir.resolve()} is being trained by process {proc.pid}", "one writer at a time")
    finally:
        proc.kill()
        proc.wait()
    # its writer killed (kill -9): the lock it left is stale, and the resume goes on to load the model
    assert_one_error(*cli(capsys, "magrpo", "--resume", str(run_dir)), "model '/no/such/model'")


def test_resume_from_checkpoint_latest_on_a_first_run_is_one_error_and_no_folder(tmp_path, capsys):
    config = base_config(tmp_path)
    assert_one_error(*cli(capsys, "magrpo", "--config", str(config), "--override",
                          "checkpoint.resume_from_checkpoint=latest", MISSING_MODEL),
                     "checkpoint.resume_from_checkpoint: latest", "holds no complete checkpoint", "a first run")
    assert not (tmp_path / "run").exists()
    # an unnamed run (a new timestamped folder every time) likewise
    assert_one_error(*cli(capsys, "magrpo", "--config", str(config), "--override", "output.run_name=null",
                          "checkpoint.resume_from_checkpoint=latest", MISSING_MODEL), "holds no complete checkpoint")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base.yaml"]


def test_a_policy_checkpoint_dir_under_a_file_is_one_error_before_any_model_loads(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    for trainer, config in (("madpo_iter", "madpo_che_cpu"), ("marlhf_iter", "marlhf_che_cpu")):
        assert_one_error(*cli(capsys, trainer, "--config", f"configs/{config}.yaml", "--override",
                              f"output.base_dir={tmp_path}", f"{trainer}.policy_checkpoint_dir={blocker / 'snapshots'}",
                              MISSING_MODEL), f"{trainer}.policy_checkpoint_dir: {blocker} is a file")
    # a second run on the first one's snapshots
    (tmp_path / "snapshots" / "iteration_0").mkdir(parents=True)
    assert_one_error(*cli(capsys, "madpo_iter", "--config", "configs/madpo_che_cpu.yaml", "--override",
                          f"output.base_dir={tmp_path}", f"madpo_iter.policy_checkpoint_dir={tmp_path / 'snapshots'}",
                          MISSING_MODEL), "holds an earlier run's policy snapshots (iteration_0)", "--resume")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "snapshots"]


@pytest.mark.cli   # a child process on a read-only mount (root writes through permission bits)
def test_a_read_only_policy_checkpoint_dir_is_one_error_line(tmp_path):
    readonly = tmp_path / "readonly"
    readonly.mkdir()
    result = run_with_read_only(readonly, [
        sys.executable, "train_madpo_iter.py", "--config", "configs/madpo_che_cpu.yaml", "--override",
        f"output.base_dir={tmp_path}", f"madpo_iter.policy_checkpoint_dir={readonly / 'snapshots'}", MISSING_MODEL])
    assert_one_error(result.returncode, result.stderr, "madpo_iter.policy_checkpoint_dir", f"{readonly} is read-only")


def test_another_run_s_checkpoint_with_other_settings_is_refused_before_any_model_loads(tmp_path, capsys):
    config = base_config(tmp_path)
    other = tmp_path / "other"   # a run of this config (its model would not load: refused before loading it)
    (other / "checkpoints" / "checkpoint-1").mkdir(parents=True)
    (other / "checkpoints" / "checkpoint-1" / "done").write_text("1")
    (other / "config.yaml").write_text(load_config(config, [MISSING_MODEL]).to_yaml("magrpo"))
    # the checkpoint, its checkpoints folder or its run folder: each names the run, each change is refused
    for spec, change, said in (
            (other / "checkpoints" / "checkpoint-1", "magrpo.num_generations=3", "magrpo.num_generations 2 -> 3"),
            (other / "checkpoints", "magrpo.learning_rate=0.5", "magrpo.learning_rate 0.01 -> 0.5"),
            (other, "dataset.train_split=train[:3]", "dataset.train_split 'train[16:]' -> 'train[:3]'")):
        assert_one_error(*cli(capsys, "magrpo", "--config", str(config), "--override", MISSING_MODEL, change,
                              f"checkpoint.resume_from_checkpoint={spec}"), f"resuming {other.resolve()}: {said}")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("sig,status,said", [(signal.SIGTERM, TERMINATED, "terminated (SIGTERM)"),
                                              (signal.SIGINT, INTERRUPTED, "interrupted (Ctrl-C)")])
def test_a_signal_while_models_load_is_one_line_and_gives_the_folder_back(tmp_path, capsys, monkeypatch, sig, status,
                                                                         said):
    import cooprl.train

    def signalled_while_loading(*args, **kwargs):
        os.kill(os.getpid(), sig)
        pytest.fail("the signal did not stop the command")
    monkeypatch.setattr(cooprl.train, "build_algorithm", signalled_while_loading)
    code, err = cli(capsys, "magrpo", "--config", str(base_config(tmp_path)))
    assert code == status and status in (130, 143) and "Traceback" not in err
    assert err.strip().splitlines()[-1] == said
    assert not (tmp_path / "run").exists()   # nothing written: the folder is free for the same command
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL   # the command line gave back the handler it set


# ------------------------------------------------------------------------------------------------ runs that train
def terminate_at(monkeypatch, step: int, sig=signal.SIGTERM):
    """Send `sig` to this process while training step `step` (a real signal, as `timeout` or SLURM sends it)."""
    from cooprl.trainers.magrpo import MAGRPO
    original = MAGRPO.train_step

    def train_step(algorithm, item, at):
        if at == step:
            os.kill(os.getpid(), sig)
        return original(algorithm, item, at)
    monkeypatch.setattr(MAGRPO, "train_step", train_step)


@pytest.mark.slow
def test_sigterm_saves_a_checkpoint_and_exits_143_as_ctrl_c_saves_and_exits_130(tmp_path, capsys, monkeypatch, caplog):
    config = base_config(tmp_path)   # 2 steps, a checkpoint every step
    with monkeypatch.context() as patch:
        terminate_at(patch, 1)
        code, err = cli(capsys, "magrpo", "--config", str(config), "--override", "magrpo.eval_at_start=false",
                        "checkpoint.checkpoint_interval=0")
    assert code == TERMINATED and "Traceback" not in err
    run_dir = tmp_path / "run"
    assert checkpoints(run_dir) == ["checkpoint-1"] and steps(run_dir) == [1]   # saved though the interval is 0
    assert "SIGTERM: saving a checkpoint after this step" in caplog.text
    continued = f"interrupted (SIGTERM) at step 1 of 2; to continue: python train_magrpo.py --resume {run_dir}"
    assert continued in caplog.text
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    # Ctrl-C the same way: 130
    with monkeypatch.context() as patch:
        terminate_at(patch, 2, signal.SIGINT)
        code, err = cli(capsys, "magrpo", "--resume", str(run_dir))
    assert code == INTERRUPTED and "Traceback" not in err and checkpoints(run_dir) == ["checkpoint-1", "checkpoint-2"]
    code, err = cli(capsys, "magrpo", "--resume", str(run_dir))
    assert code == 0, err
    assert steps(run_dir) == [1, 2]
    # every start and resume recorded with the code that made it
    versions = (run_dir / run_folders.VERSIONS).read_text().splitlines()
    assert [line.split('"started": ')[1].split(",")[0] for line in versions] == [
        '"new"', '"resumed at step 1"', '"resumed at step 2"']


def signal_at_call(monkeypatch, owner, name: str, nth: int, *signals: int) -> None:
    """Patch `owner.name` to send this process `signals` (real ones, one after the other) at its `nth` call."""
    original, calls = getattr(owner, name), []

    def patched(*args, **kwargs):
        calls.append(1)
        if len(calls) == nth:
            for sig in signals:
                os.kill(os.getpid(), sig)
        return original(*args, **kwargs)
    monkeypatch.setattr(owner, name, patched)


def test_sigterm_in_evaluate_and_evaluate_strategy_is_one_line_and_143(tmp_path, capsys, monkeypatch):
    # no TerminateAsInterrupt there: the default action ended them with no message (Ctrl-C gave one line and 130)
    import evaluate_strategy
    signal_at_call(monkeypatch, evaluate, "evaluate_checkpoint", 1, signal.SIGTERM)
    assert evaluate.main(["--config", str(base_config(tmp_path))]) == TERMINATED
    assert capsys.readouterr().err.strip() == "terminated (SIGTERM); nothing was written"
    signal_at_call(monkeypatch, evaluate_strategy, "evaluate", 1, signal.SIGTERM)
    assert evaluate_strategy.main(["--strategy", "direct", "--config", str(base_config(tmp_path))]) == TERMINATED
    err = capsys.readouterr().err
    assert "Traceback" not in err and "terminated (SIGTERM); the problems done are kept in" in err
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


@pytest.mark.slow
def test_sigterm_in_the_evaluations_of_a_run_is_143_and_keeps_what_was_trained(tmp_path, capsys, monkeypatch, caplog):
    from cooprl.trainers.magrpo import MAGRPO
    config = base_config(tmp_path)
    # the evaluation before training: nothing trained, nothing saved, the same command starts afresh
    with monkeypatch.context() as patch:
        signal_at_call(patch, MAGRPO, "evaluate", 1, signal.SIGTERM)
        code, err = cli(capsys, "magrpo", "--config", str(config), "--override", "magrpo.eval_at_start=true")
    assert code == TERMINATED and "Traceback" not in err
    assert "interrupted during the evaluation before training: nothing was trained or saved" in caplog.text
    assert checkpoints(tmp_path / "run") == []
    # the final evaluation of a 1-step run: its checkpoint is saved first, and a resume evaluates it once
    with monkeypatch.context() as patch:
        signal_at_call(patch, MAGRPO, "evaluate", 1, signal.SIGTERM)
        code, err = cli(capsys, "magrpo", "--config", str(config), "--override", "magrpo.eval_at_start=false",
                        "magrpo.max_steps=1", "output.run_name=final")
    assert code == TERMINATED and "Traceback" not in err
    run_dir = tmp_path / "final"
    assert checkpoints(run_dir) == ["checkpoint-1"]
    assert not any(key.startswith("eval/") for event in events(run_dir) for key in event)
    assert f"interrupted (SIGTERM) at step 1 of 1; to continue: python train_magrpo.py --resume {run_dir}" in (
        caplog.text)
    code, err = cli(capsys, "magrpo", "--resume", str(run_dir))
    assert code == 0, err
    assert [e["step"] for e in events(run_dir) if "eval/turn_1/reward_mean" in e] == [1]


@pytest.mark.slow
@pytest.mark.parametrize("second,status", [(signal.SIGINT, INTERRUPTED), (signal.SIGTERM, TERMINATED)])
def test_a_second_signal_stops_at_once_and_the_newest_checkpoint_goes_on(tmp_path, capsys, monkeypatch, caplog,
                                                                          second, status):
    # the first asks for a checkpoint after the step, the second stops in the step: its status, one line, and the
    # checkpoint of the step before is where --resume goes on
    from cooprl.trainers.magrpo import MAGRPO
    with monkeypatch.context() as patch:
        signal_at_call(patch, MAGRPO, "train_step", 2, signal.SIGINT, second)
        code, err = cli(capsys, "magrpo", "--config", str(base_config(tmp_path)), "--override",
                        "magrpo.eval_at_start=false")
    assert code == status and "Traceback" not in err
    assert err.strip().splitlines()[-1] == ("terminated (SIGTERM)" if second == signal.SIGTERM else
                                            "interrupted (Ctrl-C)")
    run_dir = tmp_path / "run"
    assert checkpoints(run_dir) == ["checkpoint-1"] and steps(run_dir) == [1]
    assert not list((run_dir / "checkpoints").glob(".checkpoint-*"))
    assert ("stopped at once, in the step in progress (not saved); its newest checkpoint is checkpoint-1: to "
            f"continue, python train_magrpo.py --resume {run_dir}") in caplog.text
    code, err = cli(capsys, "magrpo", "--resume", str(run_dir))
    assert code == 0, err
    assert steps(run_dir) == [1, 2] and checkpoints(run_dir) == ["checkpoint-1", "checkpoint-2"]


@pytest.mark.slow
def test_sigterm_during_the_final_save_waits_for_it_and_the_run_ends_finished(tmp_path, capsys, monkeypatch):
    # as Ctrl-C there (tests/cli/test_scripted_use.py): cut short, the finished run would lose its final checkpoint
    with monkeypatch.context() as patch:
        signal_at_call(patch, ckpt, "save_checkpoint", 1, signal.SIGTERM)
        code, err = cli(capsys, "magrpo", "--config", str(base_config(tmp_path)), "--override",
                        "magrpo.max_steps=1", "magrpo.eval_at_start=false")
    assert code == 0 and "Traceback" not in err
    assert checkpoints(tmp_path / "run") == ["checkpoint-1"]
    assert "is finished" in cli(capsys, "magrpo", "--resume", str(tmp_path / "run"))[1]


def no_space_for(part: str):
    """Return a save_model that fails with a full disk (ENOSPC) when writing into a folder whose path holds `part`."""
    original = ckpt.save_model

    def save_model(model, folder, weights=None):
        if part in str(folder):
            raise OSError(errno.ENOSPC, "No space left on device")
        return original(model, folder, weights)
    return save_model


@pytest.mark.slow
def test_a_full_disk_at_a_save_keeps_the_last_checkpoint_and_is_one_error_line(tmp_path, capsys, monkeypatch):
    config = base_config(tmp_path)   # 2 steps, a checkpoint every step: the second save is the final one
    run_dir = tmp_path / "run"
    with monkeypatch.context() as patch:
        patch.setattr(ckpt, "save_model", no_space_for(".checkpoint-2-"))
        line = assert_one_error(*cli(capsys, "magrpo", "--config", str(config), "--override",
                                     "magrpo.eval_at_start=false"),
                                f"{run_dir / 'checkpoints' / 'checkpoint-2'} could not be saved: no space left on the "
                                "device (it needs about ", "the newest complete checkpoint, checkpoint-1, is kept",
                                f"free space and run python train_magrpo.py --resume {run_dir}")
    assert " MiB free" in line or " GiB free" in line or " KiB free" in line
    assert checkpoints(run_dir) == ["checkpoint-1"]
    assert not list((run_dir / "checkpoints").glob(".checkpoint-*"))   # nothing half-written
    ckpt.check_checkpoint(run_dir / "checkpoints" / "checkpoint-1")
    # a kill -9 mid-save leaves its temporary folder: the next start removes it
    (run_dir / "checkpoints" / ".checkpoint-2-killed" / "agent_0").mkdir(parents=True)
    code, err = cli(capsys, "magrpo", "--resume", str(run_dir))
    assert code == 0, err
    assert checkpoints(run_dir) == ["checkpoint-1", "checkpoint-2"] and steps(run_dir) == [1, 2]
    assert not list((run_dir / "checkpoints").glob(".checkpoint-*"))
    # the final models: the final checkpoint, saved just before, holds them
    with monkeypatch.context() as patch:
        patch.setattr(ckpt, "save_model", no_space_for(f"{os.sep}final{os.sep}"))
        import cooprl.train
        patch.setattr(cooprl.train, "save_model", ckpt.save_model)
        assert_one_error(*cli(capsys, "magrpo", "--config", str(config), "--override", "magrpo.max_steps=1",
                              "magrpo.eval_at_start=false", "output.save_final_model=true"),
                         "final/agent_0 could not be saved: no space left", "the run's final checkpoint holds the "
                         f"same weights (python evaluate.py --run {tmp_path / 'run-2'} reads it)")
    assert checkpoints(tmp_path / "run-2") == ["checkpoint-1"]


@pytest.fixture(scope="module")
def source_run(tmp_path_factory):
    """A finished 2-step MAGRPO run of the tiny model with offline W&B (full fine-tuning, a checkpoint every step)."""
    base = tmp_path_factory.mktemp("source")
    code = __import__("envs.launch", fromlist=["train_main"]).train_main(
        "magrpo", ["--config", str(base_config(base)), "--override", "magrpo.eval_at_start=false",
                   "wandb.mode=offline"])
    assert code == 0
    return base / "run"


@pytest.mark.slow
def test_another_run_s_checkpoint_starts_a_new_run_with_its_own_w_and_b_run(source_run, tmp_path, capsys,
                                                                                monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    source = shutil.copytree(source_run, tmp_path / "source")
    before = {p: p.stat().st_mtime_ns for p in source.rglob("*") if p.is_file()}
    checkpoint = source / "checkpoints" / "checkpoint-1"
    code, err = cli(capsys, "magrpo", "--config", str(base_config(tmp_path)), "--override",
                    "magrpo.eval_at_start=false", "wandb.mode=offline", "output.run_name=fork",
                    f"checkpoint.resume_from_checkpoint={checkpoint}")
    assert code == 0, err
    fork = tmp_path / "fork"
    assert steps(fork) == [2] and checkpoints(fork) == ["checkpoint-2"]
    saved = ckpt.load_trainer_state(fork / "checkpoints" / "checkpoint-2")
    original = ckpt.load_trainer_state(source / "checkpoints" / "checkpoint-2")
    assert saved["wandb_id"] and saved["wandb_id"] != original["wandb_id"]   # its own W&B run
    assert not list((source / "wandb").glob(f"*-{saved['wandb_id']}"))
    assert {p: p.stat().st_mtime_ns for p in source.rglob("*") if p.is_file()} == before   # nothing written there
    # from its final checkpoint, with as many steps: nothing to train, and no folder left behind
    code, err = cli(capsys, "magrpo", "--config", str(base_config(tmp_path)), "--override", "wandb.mode=offline",
                    "magrpo.eval_at_start=false", "output.run_name=fork2",
                    f"checkpoint.resume_from_checkpoint={source / 'checkpoints' / 'checkpoint-2'}")
    assert code == 0 and "is finished" in err, err
    assert not (tmp_path / "fork2").exists()


@pytest.mark.slow
def test_a_run_started_with_init_from_outlives_its_source(source_run, tmp_path, capsys):
    source = shutil.copytree(source_run, tmp_path / "source")
    config = base_config(tmp_path)
    code, err = cli(capsys, "magrpo", "--config", str(config), "--override", "magrpo.eval_at_start=false",
                    f"agent_model.init_from={source}", "magrpo.max_steps=1", "output.run_name=child")
    assert code == 0, err
    child = tmp_path / "child"
    shutil.rmtree(source)
    assert evaluate.main(["--run", str(child), "--samples", "1"]) == 0
    evaluated = capsys.readouterr().err
    assert "Traceback" not in evaluated and f"{child / 'checkpoints' / 'checkpoint-1'} on 1 problems" in evaluated
    code, err = cli(capsys, "magrpo", "--resume", str(child), "--override", "magrpo.max_steps=2")
    assert code == 0, err
    assert steps(child) == [1, 2]
    assert f"{source} (deleted: the checkpoint holds every weight)" in (child / "train.log").read_text()
    # a LoRA run's checkpoints hold its adapters, not the weights under them: refused, naming the folder
    lora = fake_run(tmp_path / "lora", "magrpo", checkpoint=True, **{"agent_model.lora": "{r: 16}",
                                                                      "agent_model.init_from": str(source)})
    assert_one_error(*cli(capsys, "magrpo", "--resume", str(lora)), f"agent_model.init_from: {source} was deleted",
                     "this LoRA run's checkpoints hold its adapters", "restore that folder")


def test_a_full_disk_outside_a_save_is_one_error_line(tmp_path, capsys, monkeypatch):
    # metrics.jsonl, train.log: the disk filled between two saves; any other OSError stays a bug's traceback
    import cooprl.train

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "run" / "metrics.jsonl"))
    monkeypatch.setattr(cooprl.train, "build_algorithm", full)
    assert_one_error(*cli(capsys, "magrpo", "--config", str(base_config(tmp_path))),
                     f"no space left on the device writing {tmp_path / 'run' / 'metrics.jsonl'}", "--resume")

    def broken(*args, **kwargs):
        raise OSError(errno.EIO, "Input/output error")
    monkeypatch.setattr(cooprl.train, "build_algorithm", broken)
    with pytest.raises(OSError, match="Input/output error"):
        cli(capsys, "magrpo", "--config", str(base_config(tmp_path)))
