"""What a command line prints and how many threads it takes (cooprl/console.py), the summary's verdict and SFT's loss
(cooprl/trainers/loop.py), the plot's axes (cooprl/plot.py), the sandbox's short start-up line: unit tests, no run."""

import argparse
import json
import logging

import pytest

from cooprl import console
from cooprl.trainers.loop import MIN_STEPS_PER_QUARTER, _bar_fields, summarize


# ------------------------------------------------------------------------------------------------ torch threads
@pytest.mark.parametrize("cpus, threads", [(1, 1), (2, 1), (3, 1), (4, 2), (8, 4), (64, 4)])
def test_default_threads_are_half_the_cpus_at_most_four(cpus, threads):
    assert console.default_torch_threads(cpus) == threads


def test_the_threads_option_wins_then_the_environment_then_the_default():
    assert console.choose_torch_threads(3, {"OMP_NUM_THREADS": "2"}, cpus=16) == console.Threads(3, "--torch-threads")
    chosen = console.choose_torch_threads(None, {"OMP_NUM_THREADS": "2"}, cpus=16)
    assert chosen.count == 2 and chosen.source.startswith("OMP_NUM_THREADS=2")
    for unusable in ({}, {"OMP_NUM_THREADS": "0"}, {"OMP_NUM_THREADS": "lots"}, {"OMP_NUM_THREADS": ""}):
        chosen = console.choose_torch_threads(None, unusable, cpus=16)
        assert chosen.count == 4 and chosen.source.startswith("default: half of 16 CPU(s), at most 4"), unusable
    assert console.choose_torch_threads(None, {}, cpus=16).describe().startswith("torch threads: 4 (default")


@pytest.mark.parametrize("bad", ["0", "-1", "two", "1.5", ""])
def test_a_thread_count_that_is_no_whole_number_is_refused(bad):
    with pytest.raises(argparse.ArgumentTypeError, match="whole number of threads"):
        console.positive_int(bad)


# ------------------------------------------------------------------------------------------------ the run's log file
def test_the_run_log_keeps_records_until_the_run_folder_opens(tmp_path):
    handler = console.RunLog()
    logger = logging.getLogger("cooprl.test_console_runlog")
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    try:
        logger.debug("before the run folder: %d", 1)
        handler.open(tmp_path / "train.log")
        logger.info("after it")
        handler.close_file()
    finally:
        logger.removeHandler(handler)
    lines = (tmp_path / "train.log").read_text().splitlines()
    assert [line.split(": ", 1)[1] for line in lines] == ["before the run folder: 1", "after it"]
    assert "DEBUG cooprl.test_console_runlog" in lines[0]


# ------------------------------------------------------------------------------------------------ the sandbox's line
def test_the_sandbox_start_up_line_is_short_and_keeps_the_bound_and_what_is_missing():
    from rewards.sandbox import _short_isolation
    report = {"have": ["net-ns (no interfaces, no loopback)", "private root: read-only 6 paths (interpreter, ...)",
                       "scratch /tmp,/var/tmp (tmpfs 64 MiB each)", "seccomp: no keyring syscalls",
                       "memory and processes per program as a whole: cgroup v2 /sys/fs/cgroup/x/slot-N (memory.max)"],
              "missing": ["pid-ns"]}
    line = _short_isolation(report)
    assert line == ("isolation: net-ns, private root, scratch, seccomp; memory and processes per program as a whole: "
                    "cgroup v2; missing: pid-ns")
    assert _short_isolation({"have": [], "missing": []}).endswith("rlimits per process; missing: nothing")


# ------------------------------------------------------------------------------------------------ the summary's verdict
def write_events(folder, events):
    (folder / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))


def test_one_step_against_one_step_is_no_verdict(tmp_path, capsys):
    write_events(tmp_path, [{"step": s, "turn_1/reward_mean": float(s)} for s in (1, 2)])
    summary = summarize(tmp_path, 2, {}, False)
    out = capsys.readouterr().out
    assert summary["learned"] is None
    assert "mean training reward: 1.000 (first 1 steps) -> 2.000 (last 1 steps): too few steps to judge" in out
    assert "learned" not in out.split("mean training reward")[1]


def test_enough_steps_get_a_verdict(tmp_path, capsys):
    steps = 4 * MIN_STEPS_PER_QUARTER
    write_events(tmp_path, [{"step": s, "turn_1/reward_mean": float(s)} for s in range(1, steps + 1)])
    assert summarize(tmp_path, steps, {}, False)["learned"] is True
    assert ": learned" in capsys.readouterr().out


def test_sft_summary_bar_and_verdict_follow_the_loss(tmp_path, capsys):
    # SFT logs no reward: the summary compares its loss (lower is better), per agent too
    write_events(tmp_path, [{"step": s, "nll_mean": 2.0 - 0.1 * s, "agent_0/nll": 2.0 - 0.1 * s,
                             "agent_1/nll": 2.0} for s in range(1, 9)])
    summary = summarize(tmp_path, 8, {}, False, loss_key="nll_mean")
    out = capsys.readouterr().out
    assert summary["learned"] is True and summary["nll_mean"] == {"first_quarter": pytest.approx(1.85),
                                                                   "last_quarter": pytest.approx(1.25)}
    assert "mean loss: 1.850 (first 2 steps) -> 1.250 (last 2 steps): learned" in out
    assert "agent_1/nll" in out and "reward" not in out
    assert _bar_fields({"nll_mean": 1.5}, loss_key="nll_mean") == {"loss": "1.500"}
    assert _bar_fields({"turn_1/reward_mean": 0.25}) == {"reward": "0.250"}


# ------------------------------------------------------------------------------------------------ the plot
def drawn_figure(monkeypatch, run_dir):
    """Draw rewards.png of `run_dir`; return the figure as it was before it was closed."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from cooprl.plot import plot_run
    figures = []
    close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig=None: (figures.append(fig), close(fig)))
    assert plot_run(run_dir).is_file()
    return figures[0]


def test_the_plot_of_sft_draws_its_loss_curve(tmp_path, monkeypatch):
    write_events(tmp_path, [{"step": s, "env_step": 4 * s, "nll_mean": 2.0 / s} for s in range(1, 6)]
                 + [{"step": 5, "env_step": 20, "eval/turn_1/reward_mean": 1.2}])
    figure = drawn_figure(monkeypatch, tmp_path)
    loss_axis = figure.axes[0]
    assert loss_axis.get_ylabel().startswith("loss")
    assert max(len(line.get_xdata()) for line in loss_axis.lines) == 5   # a curve, not a single eval dot
    assert loss_axis.get_xlabel().startswith("training step")


def test_the_plot_s_x_axis_is_the_training_step_as_the_readme_says(tmp_path, monkeypatch):
    from cooprl.plot import X_LABEL
    from tests.project.test_docs import README
    write_events(tmp_path, [{"step": s, "env_step": 8 * s, "turn_1/reward_mean": 0.1 * s} for s in range(1, 4)])
    axis = drawn_figure(monkeypatch, tmp_path).axes[0]
    assert axis.get_xlabel() == X_LABEL and X_LABEL.startswith("training step")
    assert sorted({x for line in axis.lines for x in line.get_xdata()}) == [1, 2, 3]   # steps, not env_steps
    text = " ".join(README.split())
    assert "`RUN_DIR/rewards.png`, drawn at the end, plots them by training step" in text
    assert "W&B's x-axis is `env_step` (joint actions scored)" in text
