"""Unit tests of cooprl/plot.py: what the plot of a run's metrics draws, and what it refuses."""

from cooprl.plot import main as plot_main
from tests.cooprl.trainers.test_loop import write_events


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


def test_the_plot_refuses_metrics_with_nothing_to_draw(tmp_path, capsys):
    # events without a reward or a loss, or whose values are no numbers: one error line, exit 2, no empty plot
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "foo": 1}\n{"step": 2, "turn_1/reward_mean": "a"}\n',
                                            encoding="utf-8")
    assert plot_main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "no reward or loss to plot" in err and "Traceback" not in err
    assert not (tmp_path / "rewards.png").exists()
