"""The command lines as a script uses them (issue 36): a new run never shares a folder with an earlier one, a section
another trainer reads is refused, a run resumed or evaluated with the wrong script names its trainer, a finished run
says so, Ctrl-C exits 130 without a traceback, and output folders that cannot be written are one `error:` line.

In-process through `envs.launch.train_main` (what every train_*.py runs) and `evaluate.main`; the refusals happen
before any model loads, so most tests here cost a fraction of a second. The runs that train use the tiny model.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import evaluate
import evaluate_strategy
from cooprl import checkpoint as ckpt
from cooprl.cli import INTERRUPTED, exit_status, find_latest_run, read_command_line
from cooprl.config import ConfigError, Run, load_config, trainer_of_file
from cooprl.plot import main as plot_main
from envs.launch import train_main
from tests.cli.test_bad_input import assert_one_error, base_config

ROOT = Path(__file__).resolve().parents[2]
UPSTREAM = ROOT / "tests" / "data" / "upstream_configs"
MISSING_MODEL = "agent_model.name=/no/such/model"   # a model that would fail to load: the error must come first


def cli(capsys, trainer: str, *argv: str) -> tuple[int, str]:
    """Run train_<trainer>.py's command line in-process; return (exit status, its stderr then its stdout)."""
    capsys.readouterr()
    code = train_main(trainer, list(argv))
    captured = capsys.readouterr()
    return code, captured.err + captured.out


def fake_run(folder: Path, trainer: str, checkpoint: bool = False, **overrides: str) -> Path:
    """Write a run folder as `train_<trainer>.py` leaves it (its config.yaml; a complete checkpoint-1 when asked),
    without training."""
    folder.mkdir(parents=True)
    config = load_config(None, [f"{k}={v}" for k, v in overrides.items()])
    (folder / "config.yaml").write_text(config.to_yaml(trainer), encoding="utf-8")
    if checkpoint:
        (folder / "checkpoints" / "checkpoint-1").mkdir(parents=True)
        (folder / "checkpoints" / "checkpoint-1" / "done").write_text("1")
    return folder


def events(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


# ------------------------------------------------------------------------------------------------ sections
def test_a_config_file_of_another_trainer_is_refused(capsys):
    line = assert_one_error(*cli(capsys, "grpo", "--config", "configs/magrpo_che_cpu.yaml", "--override",
                                 MISSING_MODEL),
                            "magrpo_che_cpu.yaml", "no grpo section", "use train_magrpo.py")
    assert "defaults" in line
    # a file of several trainers that are all others (the coder+tester file has magrpo, iac, maac, madpo)
    assert_one_error(*cli(capsys, "ac", "--config", "configs/coder_tester_cpu.yaml", "--override", MISSING_MODEL),
                     "no ac section", "magrpo, iac, maac, madpo")


def test_an_override_of_another_trainer_is_refused(capsys):
    assert_one_error(*cli(capsys, "magrpo", "--config", "configs/magrpo_che_cpu.yaml", "--override",
                          "grpo.num_generations=8", MISSING_MODEL),
                     "grpo.num_generations=8", "read by train_grpo.py, not by train_magrpo.py", "magrpo.*")
    # MARLHF with MAGRPO as its RL reads MAGRPO's keys from its own section: magrpo.* would be ignored
    assert_one_error(*cli(capsys, "marlhf", "--config", "configs/marlhf_che_cpu.yaml", "--override",
                          "magrpo.num_generations=8", MISSING_MODEL), "magrpo.num_generations=8", "marlhf.*")
    code, err = cli(capsys, "grpo", "--config", "configs/grpo_he_config.yaml", "--override", "iac.num_turns=1",
                    MISSING_MODEL)
    assert_one_error(code, err, "iac.num_turns=1", "train_iac.py")


CPU_CONFIGS = {"magrpo": "magrpo_che_cpu", "grpo": "grpo_che_cpu", "iac": "iac_che_cpu", "maac": "maac_che_cpu",
               "ac": "ac_che_cpu", "madpo": "madpo_che_cpu", "madpo_iter": "madpo_che_cpu",
               "marlhf": "marlhf_che_cpu", "marlhf_iter": "marlhf_che_cpu", "sft": "sft_che_cpu"}


@pytest.mark.slow   # seconds: every pair of scripts (not in `make test-fast`)
def test_every_script_refuses_every_other_trainer_s_file_and_override(capsys):
    # train_iac.py --config configs/marlhf_che_cpu.yaml trained IAC with its defaults (a full epoch, lr 2e-5, two
    # turns): the file's iac: section holds only what MARLHF reads for rl_algorithm: iac
    for script, own in CPU_CONFIGS.items():
        for other, config in CPU_CONFIGS.items():
            if config != own:
                assert cli(capsys, script, "--config", f"configs/{config}.yaml", "--print-config")[0] == 2, \
                    (script, config)
            if other != script:
                code, err = cli(capsys, script, "--config", f"configs/{own}.yaml", "--override",
                                f"{other}.logging_steps=2", "--print-config")
                assert code == 2 and "error:" in err, (script, other)
    assert_one_error(*cli(capsys, "iac", "--config", "configs/marlhf_che_cpu.yaml", "--print-config"),
                     "its iac section is what marlhf's rl_algorithm: iac reads",
                     "use train_marlhf.py --override marlhf.rl_algorithm=iac")
    assert_one_error(*cli(capsys, "maac", "--config", "configs/marlhf_che_cpu.yaml", "--print-config"),
                     "no maac section", "use train_marlhf.py")


def test_a_marlhf_run_s_config_is_not_trained_by_its_rl_algorithm_s_script(tmp_path, capsys):
    # a MARLHF run with rl_algorithm: iac saves a full iac: section beside marlhf:
    run_dir = fake_run(tmp_path / "run", "marlhf", **{"marlhf.rl_algorithm": "iac"})
    assert_one_error(*cli(capsys, "iac", "--config", str(run_dir / "config.yaml"), "--print-config"),
                     "would drop the marlhf section")
    assert cli(capsys, "marlhf", "--config", str(run_dir / "config.yaml"), "--print-config")[0] == 0


@pytest.mark.slow   # seconds: every shared and upstream config (not in `make test-fast`)
def test_sections_a_run_reads_pass(capsys):
    # shared files: each script's own section is there; MARLHF with IAC reads iac.* too
    for trainer, config in [("madpo", "madpo_che_cpu"), ("madpo_iter", "madpo_che_cpu"), ("marlhf", "marlhf_che_cpu"),
                            ("marlhf_iter", "marlhf_che_cpu"), ("iac", "coder_tester_cpu")]:
        code, err = cli(capsys, trainer, "--config", f"configs/{config}.yaml", "--print-config")
        assert code == 0, err
    code, err = cli(capsys, "marlhf", "--config", "configs/marlhf_che_cpu.yaml", "--override",
                    "marlhf.rl_algorithm=iac", "iac.critic_type=v", "--print-config")
    assert code == 0, err
    # upstream's files load as they did, each with the trainer it is for
    for path in sorted(UPSTREAM.glob("*.yaml")):
        code, err = cli(capsys, trainer_of_file(path), "--config", str(path), "--print-config")
        assert code == 0, f"{path.name}: {err}"


def test_evaluate_and_strategies_refuse_sections_they_do_not_read(capsys):
    assert evaluate.main(["--config", "configs/magrpo_che_cpu.yaml", "--trainer", "grpo", "--override",
                          MISSING_MODEL]) == 2
    assert_one_error(2, capsys.readouterr().err, "no grpo section", "evaluate.py --trainer magrpo")
    assert evaluate.main(["--config", "configs/magrpo_che_cpu.yaml", "--override", "iac.num_turns=1",
                          MISSING_MODEL]) == 2
    assert_one_error(2, capsys.readouterr().err, "iac.num_turns=1", "not by evaluate.py --trainer magrpo")
    # a strategy reads no trainer section: magrpo.max_new_tokens would be ignored (budget.max_new_tokens is its)
    assert evaluate_strategy.main(["--strategy", "direct", "--config", "configs/magrpo_che_cpu.yaml", "--override",
                                   "magrpo.max_new_tokens=8", MISSING_MODEL]) == 2
    assert_one_error(2, capsys.readouterr().err, "magrpo.max_new_tokens=8", "evaluate_strategy.py")


# ------------------------------------------------------------------------------------------------ wrong script
@pytest.mark.parametrize("maker,script", [("magrpo", "grpo"), ("maac", "iac"), ("marlhf", "iac")])
def test_resuming_with_the_wrong_script_names_the_trainer(tmp_path, capsys, maker, script):
    run_dir = fake_run(tmp_path / "run", maker, checkpoint=True, **{"marlhf.rl_algorithm": "iac"})
    assert_one_error(*cli(capsys, script, "--resume", str(run_dir), "--override", MISSING_MODEL),
                     f"is a run of {maker}, not {script}", f"use train_{maker}.py --resume {run_dir}")


def test_resuming_or_evaluating_a_checkpoint_folder_names_its_run(tmp_path, capsys):
    run_dir = fake_run(tmp_path / "run", "magrpo", checkpoint=True)
    for folder in (run_dir / "checkpoints", run_dir / "checkpoints" / "checkpoint-1"):
        assert_one_error(*cli(capsys, "magrpo", "--resume", str(folder)), "not a run folder",
                         f"it is in the run {run_dir}: --resume {run_dir}")
        assert evaluate.main(["--run", str(folder)]) == 2
        assert_one_error(2, capsys.readouterr().err, f"it is in the run {run_dir}: --run {run_dir}")


def test_resuming_a_run_with_another_config_file_is_refused(tmp_path, capsys):
    # a resumed run reads its own config.yaml: a --config beside --resume RUN_DIR would be dropped without a word
    run_dir = fake_run(tmp_path / "run", "magrpo", checkpoint=True)
    assert_one_error(*cli(capsys, "magrpo", "--config", "configs/magrpo_che_cpu.yaml", "--resume", str(run_dir),
                          "--override", MISSING_MODEL), "--config configs/magrpo_che_cpu.yaml with --resume",
                     "drop --config")


def test_resuming_with_changed_settings_is_refused_before_any_model_loads(tmp_path, capsys):
    # a run trained with LoRA r=16 resumed with r=8 failed on the checkpoint after loading; another seed, data set,
    # learning rate or G trained on silently and rewrote config.yaml, which then described only the second half
    run_dir = fake_run(tmp_path / "run", "magrpo", checkpoint=True, **{"agent_model.lora": "{r: 16}"})
    line = assert_one_error(*cli(capsys, "magrpo", "--resume", str(run_dir), "--override", "agent_model.lora.r=8",
                                 "magrpo.max_steps=9", "--print-config"),
                            f"resuming {run_dir}", "agent_model.lora.r 16 -> 8", f"agent_model.init_from={run_dir}")
    assert "max_steps" not in line   # what a resume may change is not named
    for change in ["seed=3", "dataset.train_split=train[:3]", "magrpo.learning_rate=0.1", "magrpo.num_generations=3",
                   "magrpo.num_agents=1", "code_reward.cooperation=verified"]:
        assert_one_error(*cli(capsys, "magrpo", "--resume", str(run_dir), "--override", change, "--print-config"),
                         change.split("=")[0])
    # how far it trains, evaluation, logging, saving and devices may change
    assert cli(capsys, "magrpo", "--resume", str(run_dir), "--override", "magrpo.max_steps=9",
               "magrpo.eval_interval=2", "wandb.mode=disabled", "agent_model.device=cpu",
               "checkpoint.checkpoint_interval=3", "output.save_final_model=true", "--print-config")[0] == 0
    # the same check when the config file itself resumes (checkpoint.resume_from_checkpoint), before models load
    from cooprl.run_folders import new_run_folder
    config = load_config(run_dir / "config.yaml", [f"output.base_dir={tmp_path}", "output.run_name=run",
                                                   "checkpoint.resume_from_checkpoint=latest", "seed=7"])
    with pytest.raises(ConfigError, match="seed 42 -> 7"):
        new_run_folder(config, "run", "magrpo")


def test_evaluating_with_the_wrong_trainer_names_the_trainer(tmp_path, capsys):
    run_dir = fake_run(tmp_path / "run", "madpo", checkpoint=True)
    assert evaluate.main(["--run", str(run_dir), "--trainer", "iac", "--override", MISSING_MODEL]) == 2
    assert_one_error(2, capsys.readouterr().err, "is a run of madpo, not iac", "without --trainer")


def test_evaluating_a_run_without_a_checkpoint_names_only_given_options(tmp_path, capsys):
    run_dir = fake_run(tmp_path / "run", "magrpo")
    assert evaluate.main(["--run", str(run_dir), "--override", MISSING_MODEL]) == 2
    line = assert_one_error(2, capsys.readouterr().err, f"--run {run_dir}", "no complete checkpoint",
                            f"--config {run_dir / 'config.yaml'}")
    assert "--checkpoint" not in line and "resume_from_checkpoint" not in line


# ------------------------------------------------------------------------------------------------ --resume latest
def test_resume_latest_is_the_newest_run_of_the_trainer_and_dataset(tmp_path, capsys):
    config = base_config(tmp_path)   # run_name: run
    older = fake_run(tmp_path / "run", "magrpo", checkpoint=True)
    newer = fake_run(tmp_path / "run-2", "magrpo", checkpoint=True)   # what a second run of the config writes
    other_trainer = fake_run(tmp_path / "run-3", "grpo", checkpoint=True)
    other_data = fake_run(tmp_path / "run-4", "magrpo", checkpoint=True, **{"dataset.name": "humaneval",
                                                                             "dataset.type": "humaneval"})
    for i, folder in enumerate([older, newer, other_trainer, other_data]):
        os.utime(folder / "config.yaml", (1000 + i, 1000 + i))
    run = Run.of(load_config(config), "magrpo")
    assert find_latest_run(run) == newer
    # unnamed runs: the newest <trainer>-<dataset>-<time> folder
    unnamed = load_config(config, ["output.run_name=null", f"output.base_dir={tmp_path / 'u'}"])
    first = fake_run(tmp_path / "u" / "magrpo-coop-20260101-000000", "magrpo", checkpoint=True)
    second = fake_run(tmp_path / "u" / "magrpo-coop-20260102-000000", "magrpo", checkpoint=True)
    os.utime(first / "config.yaml", (2000, 2000))
    os.utime(second / "config.yaml", (1000, 1000))   # started first, resumed last: the newest
    assert find_latest_run(Run.of(unnamed, "magrpo")) == first
    # the newest run stopped before its first save: said, not silently replaced by an older one
    os.utime(fake_run(tmp_path / "run-5", "magrpo") / "config.yaml", (5000, 5000))
    code, err = exit_status(lambda: read_command_line(
        "magrpo", "", ["--config", str(config), "--resume", "latest", "--print-config"])), capsys.readouterr().err
    assert_one_error(code, err, "newest run of magrpo", "run-5", "no complete checkpoint")


# ------------------------------------------------------------------------------------------------ output folders
def test_an_output_folder_that_is_a_file_is_one_error_line(tmp_path, capsys):
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("x")
    config = base_config(tmp_path)
    assert_one_error(*cli(capsys, "magrpo", "--config", str(config), "--override", f"output.base_dir={blocker}",
                          MISSING_MODEL), "output.base_dir", "not_a_folder is a file, not a folder")
    assert_one_error(*cli(capsys, "magrpo", "--config", str(config), "--override", f"output.base_dir={blocker}/runs",
                          MISSING_MODEL), "output.base_dir: ", "not_a_folder is a file")
    assert_one_error(*cli(capsys, "magrpo", "--config", str(config), "--override", "output.run_name=not_a_folder",
                          MISSING_MODEL), "output.run_name: ", "not_a_folder is a file")
    # W&B's folder: wandb wrote to /tmp/wandb instead, without a word
    assert_one_error(*cli(capsys, "magrpo", "--config", str(config), "--override", "wandb.mode=offline",
                          f"wandb.dir={blocker}", MISSING_MODEL), "wandb.dir", "is a file")
    assert_one_error(*cli(capsys, "magrpo", "--config", str(config), "--override",
                          f"output.save_path={blocker / 'final'}", MISSING_MODEL), "output.save_path", "is a file")
    # evaluate.py --output: said before the evaluation, not after it
    assert evaluate.main(["--config", str(config), "--output", str(blocker / "eval.json"), "--override",
                          MISSING_MODEL]) == 2
    assert_one_error(2, capsys.readouterr().err, "--output", "is a file")


def test_evaluate_writes_its_output_into_a_folder_it_creates(tmp_path, capsys, monkeypatch):
    # --output new/eval.json passed the check (the folder can be created), then failed after the whole evaluation
    monkeypatch.setattr(evaluate, "evaluate_checkpoint", lambda run, checkpoint, samples: {"eval/x": 1.0})
    out = tmp_path / "new" / "deeper" / "eval.json"
    assert evaluate.main(["--config", str(base_config(tmp_path)), "--output", str(out)]) == 0
    assert json.loads(out.read_text()) == {"eval/x": 1.0}


def run_with_read_only(readonly: Path, command: list[str]) -> subprocess.CompletedProcess:
    """Run `command` with the folder `readonly` read-only: a read-only mount for root (root writes through permission
    bits), the permission bits for another user."""
    if os.geteuid() == 0:
        script = f"mount -t tmpfs -o ro none {readonly} && exec \"$@\""
        command = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *command]
    else:
        readonly.chmod(0o555)
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "WANDB_MODE": "disabled"})


@pytest.mark.cli   # a command line in a child process (a read-only mount, or another user's permissions)
def test_a_read_only_output_folder_is_one_error_line(tmp_path):
    config = base_config(tmp_path)
    readonly = tmp_path / "readonly"
    readonly.mkdir()
    result = run_with_read_only(readonly, [sys.executable, "train_magrpo.py", "--config", str(config), "--override",
                                           f"output.base_dir={readonly / 'runs'}", MISSING_MODEL])
    assert_one_error(result.returncode, result.stderr, "output.base_dir", f"{readonly} is read-only")


def test_ctrl_c_in_evaluate_and_evaluate_strategy_is_one_line_and_130(tmp_path, capsys, monkeypatch):
    # a bare KeyboardInterrupt traceback before
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(evaluate, "evaluate_checkpoint", interrupted)
    assert evaluate.main(["--config", str(base_config(tmp_path))]) == INTERRUPTED
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.strip() == "interrupted (Ctrl-C); nothing was written"
    monkeypatch.setattr(evaluate_strategy, "evaluate", interrupted)
    assert evaluate_strategy.main(["--strategy", "direct", "--config", str(base_config(tmp_path))]) == INTERRUPTED
    err = capsys.readouterr().err
    assert "Traceback" not in err and "interrupted (Ctrl-C)" in err and "the same command goes on" in err


def test_python_m_envs_without_a_trainer_is_a_usage_error(monkeypatch, capsys):
    import runpy
    for argv, status in ([], 2), (["--config", "x.yaml"], 2), (["--help"], 0):
        monkeypatch.setattr(sys, "argv", ["envs", *argv])
        with pytest.raises(SystemExit) as done:
            runpy.run_module("envs", run_name="__main__")
        assert done.value.code == status and "usage: python -m envs TRAINER" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ plot
@pytest.mark.slow   # seconds: matplotlib draws (not in `make test-fast`)
def test_plot_command_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as help_exit:
        plot_main(["--help"])
    assert help_exit.value.code == 0 and "RUN_DIR" in capsys.readouterr().out
    assert plot_main([str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err.strip() == f"error: {tmp_path / 'nope'}: no such folder"
    assert plot_main([str(tmp_path)]) == 2   # a folder without metrics: an error, not an empty plot
    assert "holds no metrics" in capsys.readouterr().err and not (tmp_path / "rewards.png").exists()
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "turn_1/reward_mean": 0.5}) + "\n")
    assert plot_main([str(tmp_path)]) == 0 and (tmp_path / "rewards.png").is_file()


def test_two_commands_started_at_once_get_two_folders(tmp_path, monkeypatch):
    # both looked before either wrote: each saw `run` free, and both trained into it (two step-0 evaluations, every
    # step twice in metrics.jsonl, one run's checkpoints over the other's), each exiting 0
    from cooprl import run_folders
    free = run_folders.fresh_folder
    monkeypatch.setattr(run_folders, "fresh_folder", lambda folder: folder if folder.name == "run" else free(folder))
    config = load_config(None, [f"output.base_dir={tmp_path}"])
    first = run_folders.new_run_folder(config, "run", "magrpo")
    second = run_folders.new_run_folder(config, "run", "magrpo")
    assert (first, second) == (tmp_path / "run", tmp_path / "run-2")


def test_a_new_run_refuses_a_save_path_with_an_earlier_run_s_final_models(tmp_path):
    # the new agent_0/ replaced the earlier one beside the earlier agent_1/: a folder of two runs' agents
    from cooprl.run_folders import new_run_folder
    (tmp_path / "final" / "agent_1").mkdir(parents=True)
    config = load_config(None, [f"output.base_dir={tmp_path}", f"output.save_path={tmp_path / 'final'}",
                                "output.save_final_model=true"])
    with pytest.raises(ConfigError, match="output.save_path: .* holds an earlier run's final models"):
        new_run_folder(config, "run", "grpo")
    assert not (tmp_path / "run").exists()   # refused before the folder is claimed


def test_a_run_that_stops_before_writing_leaves_its_folder_free(tmp_path, capsys):
    # a model that would not load left an empty folder behind; now the claimed folder is given back
    config = base_config(tmp_path)
    assert_one_error(*cli(capsys, "magrpo", "--config", str(config), "--override",
                          f"agent_model.init_from={config}"), "agent_model.init_from", "is not a folder")
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------------------------------------ runs that train
@pytest.mark.slow
def test_a_second_run_of_a_config_gets_its_own_folder_and_a_finished_run_says_so(tmp_path, capsys, caplog):
    config = base_config(tmp_path)   # run_name: run, 2 steps, a checkpoint every step
    assert cli(capsys, "magrpo", "--config", str(config), "--override", "magrpo.eval_at_start=false")[0] == 0
    first = tmp_path / "run"
    before = {p.name: (p / "done").stat().st_mtime_ns for p in ckpt.list_checkpoints(first / "checkpoints")}
    first_metrics = (first / "metrics.jsonl").read_text()
    # the same command with fewer steps: a new run, in a folder of its own, said in the log
    code, err = cli(capsys, "magrpo", "--config", str(config), "--override", "magrpo.max_steps=1",
                    "magrpo.eval_at_start=false")
    assert code == 0, err
    second = tmp_path / "run-2"
    assert f"this run writes {second}" in caplog.text
    assert [p.name for p in ckpt.list_checkpoints(second / "checkpoints")] == ["checkpoint-1"]
    assert {p.name: (p / "done").stat().st_mtime_ns for p in ckpt.list_checkpoints(first / "checkpoints")} == before
    assert (first / "metrics.jsonl").read_text() == first_metrics   # the earlier run's files are untouched
    assert max(e["step"] for e in events(second)) == 1
    # evaluate.py --run takes the second run's own checkpoint
    assert evaluate.main(["--run", str(second), "--samples", "1"]) == 0
    assert f"{second / 'checkpoints' / 'checkpoint-1'} on 1 problems" in capsys.readouterr().err
    # resuming the finished first run: said, exit 0, nothing evaluated or appended
    code, err = cli(capsys, "magrpo", "--resume", str(first))
    assert code == 0, err
    assert f"{first.resolve()} is finished: 2 of 2 steps" in err
    # a smaller max_steps: said as such ("2 of 1 steps" before)
    err = cli(capsys, "magrpo", "--resume", str(first), "--override", "magrpo.max_steps=1")[1]
    assert "is finished: 2 steps trained and evaluated, more than the 1 asked" in err
    assert (first / "metrics.jsonl").read_text() == first_metrics


class StopIn:
    """Patches a trainer's `evaluate` to raise KeyboardInterrupt (Ctrl-C) at its `nth` call (1: the evaluation before
    training, 2: the final one of a 1-step run)."""

    def __init__(self, monkeypatch, nth: int):
        from cooprl.trainers.magrpo import MAGRPO
        self.calls, self.original = 0, MAGRPO.evaluate

        def evaluate(algorithm, items):
            self.calls += 1
            if self.calls == nth:
                raise KeyboardInterrupt
            return self.original(algorithm, items)
        monkeypatch.setattr(MAGRPO, "evaluate", evaluate)


def interrupted_cli(capsys, *argv: str) -> tuple[int, str]:
    try:
        return cli(capsys, "magrpo", *argv)
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C escaped the command line (a traceback for the user)")


@pytest.mark.slow
def test_ctrl_c_during_the_final_save_waits_for_it(tmp_path, capsys, monkeypatch):
    # a real SIGINT while the final checkpoint is written: it stopped the save (a KeyboardInterrupt in it), so the
    # finished run had no final checkpoint and a resume trained its last steps again
    import signal
    original = ckpt.save_checkpoint

    def save_with_ctrl_c(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)
        return original(*args, **kwargs)
    monkeypatch.setattr(ckpt, "save_checkpoint", save_with_ctrl_c)
    code, err = interrupted_cli(capsys, "--config", str(base_config(tmp_path)), "--override", "magrpo.max_steps=1",
                                "magrpo.eval_at_start=false")
    assert code == 0 and "Traceback" not in err   # the run finished: trained, evaluated and saved
    assert [p.name for p in ckpt.list_checkpoints(tmp_path / "run" / "checkpoints")] == ["checkpoint-1"]
    monkeypatch.setattr(ckpt, "save_checkpoint", original)
    assert "is finished" in cli(capsys, "magrpo", "--resume", str(tmp_path / "run"))[1]


@pytest.mark.slow
def test_ctrl_c_in_the_evaluation_before_training_exits_130_without_saving(tmp_path, capsys, monkeypatch, caplog):
    StopIn(monkeypatch, 1)
    code, err = interrupted_cli(capsys, "--config", str(base_config(tmp_path)), "--override",
                                "magrpo.eval_at_start=true")
    assert code == INTERRUPTED and "Traceback" not in err
    assert "interrupted during the evaluation before training" in caplog.text
    assert not ckpt.list_checkpoints(tmp_path / "run" / "checkpoints")


@pytest.mark.slow
def test_ctrl_c_in_the_final_evaluation_saves_and_a_resume_evaluates_once(tmp_path, capsys, monkeypatch):
    config = base_config(tmp_path)
    stop = StopIn(monkeypatch, 1)   # without the evaluation before training the first one is the final one
    code, err = interrupted_cli(capsys, "--config", str(config), "--override", "magrpo.max_steps=1",
                                "magrpo.eval_at_start=false")
    assert code == INTERRUPTED and "Traceback" not in err
    run_dir = tmp_path / "run"
    assert [p.name for p in ckpt.list_checkpoints(run_dir / "checkpoints")] == ["checkpoint-1"]
    assert not any(k.startswith("eval/") for e in events(run_dir) for k in e)
    stop.calls = -100   # no more interruptions
    code, err = cli(capsys, "magrpo", "--resume", str(run_dir))
    assert code == 0, err
    assert [e["step"] for e in events(run_dir) if "eval/turn_1/reward_mean" in e] == [1]   # evaluated, once
    code, err = cli(capsys, "magrpo", "--resume", str(run_dir))
    assert code == 0 and "is finished" in err
    assert [e["step"] for e in events(run_dir) if "eval/turn_1/reward_mean" in e] == [1]
