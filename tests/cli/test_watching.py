"""Watching a run from its command line (issue 36): the start-up block and the torch threads it chose, quiet
libraries, the evaluation's bar, log lines that do not run through the bar, wall and step time in metrics.jsonl, the
results and the next command at the end; SFT's loss; --help of every script; the grpo and ac CPU configs; the
smaller truths (cuda without CUDA, demo_coop.py without init_from, the install's metadata, the tested versions)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tests.environment import child_env

pytestmark = pytest.mark.cli

ROOT = Path(__file__).resolve().parents[2]
TINY = ["agent_model.name=offline:tiny-random", "agent_model.device=cpu", "agent_model.torch_dtype=float32",
        "dataset.name=coop", "dataset.type=coophumaneval", "dataset.train_split=train[16:]",
        "dataset.eval_split=test[:2]", "wandb.mode=disabled"]
SCRIPTS = sorted(p.name for p in ROOT.glob("train_*.py"))


def run(args, env_extra=None, timeout=600):
    """Run a script of the checkout as a user does, without OMP_NUM_THREADS unless `env_extra` sets it."""
    env = child_env(PATH="/usr/bin:/bin", WANDB_MODE="offline", WANDB_SILENT="true", **(env_extra or {}))
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)


def events(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


# ------------------------------------------------------------------------------------------------ a run, watched
@pytest.fixture(scope="module")
def watched(tmp_path_factory):
    """A 2-step MAGRPO run of the tiny model with an evaluation after each step, OMP_NUM_THREADS unset."""
    base = tmp_path_factory.mktemp("watched")
    result = run(["train_magrpo.py", "--config", "configs/magrpo_che_config.yaml", "--override", *TINY,
                  "magrpo.max_steps=2", "magrpo.num_generations=2", "magrpo.max_new_tokens=8", "magrpo.num_turns=1",
                  "magrpo.eval_num_samples=2", "magrpo.eval_interval=1", f"output.base_dir={base}",
                  "output.run_name=w"])
    assert result.returncode == 0, result.stderr[-3000:]
    return result, base / "w"


def test_the_start_says_what_will_run_and_the_threads_it_chose(watched):
    result, run_dir = watched
    block = result.stderr.split("what will run:")[1]
    for row in ("trainer                 magrpo", "model                   offline:tiny-random (embedded",
                "init_from               none", "team                    code:coop, 2 agent(s)",
                "data                    69 training items, 2 of 2 eval problems", "steps                   2",
                "samples per prompt (G)  2", "turns                   1", "LoRA                    none (full "
                                                                          "fine-tuning)",
                "device                  cpu", "reward                  code reward: hidden_tests, cooperation seed",
                f"run folder              {run_dir}"):
        assert row in block, row
    # OMP_NUM_THREADS unset: half the CPUs this process may use, at most 4 (not torch's every core)
    cpus = len(os.sched_getaffinity(0))
    assert f"torch threads           {max(1, min(4, cpus // 2))} (default: half of {cpus} CPU(s), at most 4" in block


def test_the_run_is_quiet_and_keeps_its_details_in_train_log(watched):
    result, run_dir = watched
    err = result.stderr
    assert "Loading weights" not in err and "FutureWarning" not in err and "DeprecationWarning" not in err
    sandbox = [line for line in err.splitlines() if "cooprl.sandbox: sandbox:" in line]
    assert len(sandbox) == 1 and len(sandbox[0]) < 400, sandbox
    log = (run_dir / "train.log").read_text()
    assert "DEBUG cooprl.sandbox" in log and "rlimits AS" in log   # the whole report, at debug level
    assert "what will run:" in log


def test_evaluation_shows_a_bar_and_log_lines_stay_off_the_training_bar(watched):
    result, _ = watched
    lines = result.stderr.replace("\r", "\n").splitlines()
    assert any(re.search(r"evaluating: 100%.*(answer/s|s/answer)", line) for line in lines)   # a bar with its rate
    # a log line written while the training bar is drawn starts its own line (tqdm's write), not after the bar
    for line in result.stderr.split("\n"):
        if "evaluating at step 1" in line:
            assert "step/s" not in line, line


def test_metrics_record_wall_time_and_step_time(watched):
    _, run_dir = watched
    found = events(run_dir)
    assert all(isinstance(e["wall_time"], float) for e in found)
    assert [e["wall_time"] for e in found] == sorted(e["wall_time"] for e in found)
    train = [e for e in found if "turn_1/reward_mean" in e]
    assert len(train) == 2 and all(e["time/step_s"] > 0 for e in train)
    assert all(e["time/eval_s"] > 0 for e in found if "eval/turn_1/reward_mean" in e)


def test_the_end_says_where_the_results_are_and_what_to_run_next(watched):
    result, run_dir = watched
    out = result.stdout
    assert f"metrics      {run_dir / 'metrics.jsonl'}" in out and f"plot         {run_dir / 'rewards.png'}" in out
    assert f"log          {run_dir / 'train.log'}" in out
    assert f"python evaluate.py --run {run_dir}" in out


def test_the_threads_option_and_evaluate_py_say_their_threads(watched, capsys):
    import evaluate
    _, run_dir = watched
    assert evaluate.main(["--run", str(run_dir), "--samples", "1", "--torch-threads", "1"]) == 0
    err = capsys.readouterr().err
    assert "torch threads: 1 (--torch-threads)" in err
    assert re.search(r"evaluating: 100%.*answer", err.replace("\r", "\n"))   # evaluate.py's bar
    with pytest.raises(SystemExit) as exit_status:
        evaluate.main(["--run", str(run_dir), "--torch-threads", "0"])
    assert exit_status.value.code == 2
    assert "--torch-threads: expected a whole number of threads >= 1" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ SFT
def test_sft_shows_its_loss_and_ends_with_a_summary(tmp_path, capsys):
    from envs.launch import train_main
    code = train_main("sft", ["--config", "configs/sft_che_cpu.yaml", "--override", *TINY, "sft.max_steps=2",
                              "sft.batch_size=2", "sft.max_new_tokens=4", "sft.eval_num_samples=1",
                              "sft.eval_num_generations=1", f"output.base_dir={tmp_path}", "output.run_name=s"])
    captured = capsys.readouterr()
    assert code == 0, captured.err[-3000:]
    assert "loss=" in captured.err and "reward=nan" not in captured.err
    assert "Summary of" in captured.out and "mean loss:" in captured.out and "too few steps to judge" in captured.out
    assert f"python evaluate.py --run {tmp_path / 's'}" in captured.out
    assert all("time/step_s" in e for e in events(tmp_path / "s") if "nll_mean" in e)


def test_sft_cpu_config_does_not_warn_about_its_own_settings(caplog):
    # 5 of the coop set's 69 reference completions are longer than the config's 128 new tokens (the cap its RL
    # phase samples and evaluates with): a note, not a warning
    import logging
    import torch
    from cooprl.trainers.sft import TokenizedDemonstration, note_long_demonstrations
    demos = [TokenizedDemonstration([], [torch.zeros(n), torch.zeros(8)], str(n)) for n in [100] * 64 + [166] * 5]
    with caplog.at_level(logging.INFO, logger="cooprl.trainers.sft"):
        assert note_long_demonstrations(demos, 128, "sft") == 5
        assert note_long_demonstrations(demos[:3] + demos[-5:], 128, "sft") == 5
    levels = [r.levelname for r in caplog.records]
    assert levels == ["INFO", "WARNING"], levels
    assert "5 of 69 demonstrated completions are longer than sft.max_new_tokens=128" in caplog.records[0].getMessage()


# ------------------------------------------------------------------------------------------------ --help
@pytest.mark.parametrize("script", SCRIPTS + ["evaluate.py", "evaluate_strategy.py"])
def test_help_shows_an_example_and_where_the_keys_are(script, capsys, monkeypatch):
    import runpy
    monkeypatch.setattr(sys, "argv", [script, "--help"])
    with pytest.raises(SystemExit) as exit_status:
        runpy.run_path(str(ROOT / script), run_name="__main__")   # the script as `python SCRIPT --help` runs it
    out = capsys.readouterr().out
    assert exit_status.value.code == 0, out
    example = out.split("example")[1].splitlines()[1].strip()
    assert example.startswith(f"python {script} "), example
    assert "docs/config.md" in out and "--torch-threads" in out
    config = re.search(r"--config (\S+)", example)
    assert config is None or (ROOT / config.group(1)).is_file(), example


# ------------------------------------------------------------------------------------------------ CPU configs
def test_every_trainer_has_a_cpu_config_in_the_readme():
    from cooprl.config import TRAINER_SECTIONS
    from tests.project.test_docs import README, table_rows
    scripts = " ".join(row[1] for row in table_rows(README, "cpu-configs"))
    missing = [t for t in TRAINER_SECTIONS if f"`train_{t}.py`" not in scripts]
    assert not missing, missing


@pytest.mark.parametrize("trainer", ["grpo", "ac"])
def test_the_single_agent_cpu_configs_train_a_step(trainer, tmp_path, capsys):
    from envs.launch import train_main
    code = train_main(
        trainer,
        [
            "--config",
            f"configs/{trainer}_che_cpu.yaml",
            "--override",
            *TINY,
            f"{trainer}.max_steps=1",
            f"{trainer}.max_new_tokens=6",
            f"{trainer}.eval_num_samples=1",
            f"output.base_dir={tmp_path}",
            "output.run_name=one",
        ],
    )
    assert code == 0, capsys.readouterr().err[-3000:]
    train = [e for e in events(tmp_path / "one") if "turn_1/reward_mean" in e]
    assert len(train) == 1 and 0.0 <= train[0]["turn_1/reward_mean"] <= 2.1


# ------------------------------------------------------------------------------------------------ smaller truths
def test_cuda_without_cuda_says_so(tmp_path, capsys, monkeypatch):
    import torch
    from envs.launch import train_main
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    code = train_main("magrpo", ["--config", "configs/magrpo_che_cpu.yaml", "--override", *TINY,
                                 "agent_model.device=cuda", f"output.base_dir={tmp_path}"])
    err = capsys.readouterr().err
    line = [line for line in err.splitlines() if line.startswith("error: ")]
    assert code == 2 and len(line) == 1, err[-2000:]
    assert "CUDA is not available on this machine" in line[0] and "use auto or cpu" in line[0]
    assert "cuda:0..cuda:0" not in line[0]


def test_demo_coop_on_a_run_without_init_from_says_what_it_needs(tmp_path):
    run_dir = tmp_path / "plain"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text("agent_model: {name: offline:tiny-random}\n")
    (run_dir / "metrics.jsonl").write_text(json.dumps({"step": 1, "eval/turn_1/reward_mean": 1.0}) + "\n")
    result = run(["bench/demo_coop.py", str(run_dir)], {"OMP_NUM_THREADS": "1"})
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert f"error: {run_dir}: made without agent_model.init_from" in result.stderr
    assert "--override agent_model.init_from=SFT_RUN_DIR" in result.stderr
    missing = run(["bench/demo_coop.py", str(tmp_path / "nothing")], {"OMP_NUM_THREADS": "1"})
    assert missing.returncode == 2 and "not a run folder" in missing.stderr and "Traceback" not in missing.stderr


def test_the_package_metadata_builds_without_deprecation_warnings(tmp_path):
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        (tmp_path / name).write_bytes((ROOT / name).read_bytes())
    (tmp_path / "meta").mkdir()
    code = "import setuptools.build_meta as b; b.prepare_metadata_for_build_wheel('meta')"
    result = subprocess.run([sys.executable, "-W", "always", "-c", code], cwd=tmp_path, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Deprecat" not in result.stdout + result.stderr, (result.stdout + result.stderr)[-2000:]
    metadata = next((tmp_path / "meta").glob("*/METADATA")).read_text()
    assert "License-Expression: Apache-2.0" in metadata


def test_the_readme_s_tested_versions_are_the_installed_ones():
    from importlib.metadata import version
    from tests.project.test_docs import README
    tested = " ".join(README.split("**Tested versions**")[1].split("the floors")[0].split())
    for package in ("torch", "transformers", "peft", "accelerate"):
        assert f"{package} {version(package).split('+')[0]}" in tested, (package, tested)


def test_config_docs_say_max_steps_counts_per_iteration_of_the_iter_trainers():
    row = next(line for line in (ROOT / "docs" / "config.md").read_text().splitlines()
               if line.startswith("| `<trainer>.max_steps` |"))
    assert "The _iter trainers (madpo_iter, marlhf_iter) count it per iteration" in row
    assert "num_iterations x max_steps steps" in row


# ------------------------------------------------------------------------------------------------ strategies
def strategy_row(k, passed=True):
    return {"task_id": f"p{k}", "passed": passed, "cost": {"calls": 1, "tokens_in": 10 * k, "tokens_out": 5},
            "seconds": 1.0, "metrics": {}}


def test_strategy_plot_numbers_problems_on_whole_ticks():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import evaluate_strategy
    figure = evaluate_strategy.draw("direct", [strategy_row(k) for k in (1, 2, 3)])
    try:
        ticks = [t for t in figure.axes[0].get_xticks() if 1 <= t <= 3]
        assert ticks and all(float(t).is_integer() for t in figure.axes[0].get_xticks()), ticks
    finally:
        plt.close(figure)


def test_cosplay_ut_accuracy_is_never_nan():
    import evaluate_strategy
    from strategies import cosplay
    metrics = [{"ut_acc": None, "code_acc": 0.0, "bon": False, "signal": False}] * 2
    assert cosplay.summarize(metrics)["UT_acc_%"] is None
    rows = [dict(strategy_row(k), metrics=m) for k, m in enumerate(metrics, 1)]
    table = dict(evaluate_strategy.summary("cosplay", rows))
    assert table["UT_acc_%"] == "n/a (no problem measured it)" and table["code_acc_%"] == "0.0"
    assert "nan" not in " ".join(table.values())
