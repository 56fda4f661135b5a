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


def test_the_plot_of_a_learned_reward_run_draws_the_task_reward_and_labels_the_learned_one(tmp_path, monkeypatch):
    # MARLHF's rewards.png drew the learned reward as "train turn_1" on a "reward (raw)" axis, and no task reward
    write_events(tmp_path, [{"step": s, "env_step": s, "turn_1/reward_mean": 0.5 - 0.1 * s,
                             "turn_1/task_reward_mean": 1.0 + s} for s in range(1, 4)]
                 + [{"step": 3, "env_step": 3, "eval/turn_1/reward_mean": 2.5}])
    task_axis, learned_axis = drawn_figure(monkeypatch, tmp_path).axes
    assert task_axis.get_ylabel() == "task reward (raw)" and learned_axis.get_ylabel().startswith("learned reward")
    curves = {line.get_label(): list(line.get_ydata()) for axis in (task_axis, learned_axis) for line in axis.lines}
    assert curves["train turn_1 task reward (avg of 1)"] == [2.0, 3.0, 4.0]
    assert curves["train turn_1 learned reward (avg of 1)"] == __import__("pytest").approx([0.4, 0.3, 0.2])
    assert curves["eval/turn_1/reward_mean"] == [2.5]   # the evaluation's task reward, beside the training's
    assert [line for line in learned_axis.lines if "eval" in line.get_label()] == []
    labels = [text.get_text() for text in task_axis.get_legend().get_texts()]
    assert {"train turn_1 task reward (avg of 1)", "train turn_1 learned reward (avg of 1)"} <= set(labels)
