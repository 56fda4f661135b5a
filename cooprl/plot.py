"""Reward curves of a run: `python -m cooprl.plot RUN_DIR` writes RUN_DIR/rewards.png from metrics.jsonl."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from cooprl.tracking import read_metrics

LOSS_KEY = "nll_mean"   # what a trainer without a reward (SFT) logs instead (cooprl.trainers.sft)
# a run trained on a learned reward (MARLHF) logs it as turn_<t>/reward_mean, the task reward as this
# (cooprl.trainers.marlhf)
LEARNED_REWARD_TASK_KEY = "/task_reward_mean"
X_LABEL = "training step (dataset item; W&B's x-axis is env_step)"


def plot_run(run_dir: str | Path) -> Path:
    """Draw the training reward per turn (raw and a moving average) and the eval rewards against the training step;
    a run trained on a learned reward (MARLHF) gets the task reward there and the learned one on a second axis; a run
    without a training reward (SFT) gets its loss, with the eval rewards on a second axis. Return the PNG path."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    events = read_metrics(run_dir)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    turn_keys = _turn_keys(events, "/reward_mean")
    task_keys = _turn_keys(events, LEARNED_REWARD_TASK_KEY)
    axes = [ax]
    if task_keys:   # a learned reward trained (MARLHF): the task's reward beside the evaluations', the learned apart
        for key in task_keys:
            _curve(ax, events, key, f"train {key.split('/')[0]} task reward")
        ax.set_ylabel("task reward (raw)")
        axes.append(ax.twinx())
        for i, key in enumerate(turn_keys):
            _curve(axes[1], events, key, f"train {key.split('/')[0]} learned reward", color=f"C{len(task_keys) + i}")
        axes[1].set_ylabel("learned reward (the reward model's)")
        eval_ax = ax
    elif turn_keys:
        for key in turn_keys:
            _curve(ax, events, key, f"train {key.split('/')[0]}")
        ax.set_ylabel("reward (raw)")
        eval_ax = ax
    else:   # no reward in training: the loss, and the evaluations' rewards on their own scale
        _curve(ax, events, LOSS_KEY, "training loss")
        ax.set_ylabel("loss (NLL per completion token)")
        eval_ax = ax.twinx()
        eval_ax.set_ylabel("eval reward (raw)")
        axes.append(eval_ax)
    for key in sorted({k for e in events for k in e if k.startswith("eval/") and k.endswith("/reward_mean")}):
        points = _points(events, key)
        if points:
            eval_ax.plot(*zip(*points), "o--", label=key, color=None if eval_ax is ax else "tab:green")
    ax.set_xlabel(X_LABEL)
    ax.set_title(run_dir.name)
    ax.grid(alpha=0.3)
    handles = [line for axis in axes for line in axis.lines if not line.get_label().startswith("_")]
    if handles:
        ax.legend(handles=handles, fontsize=8)
    out = run_dir / "rewards.png"
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _turn_keys(events: list[dict[str, Any]], suffix: str) -> list[str]:
    """Return the training metrics `turn_<t><suffix>` the events hold, sorted."""
    return sorted({k for e in events for k in e if k.startswith("turn_") and k.endswith(suffix)})


def _curve(ax: Any, events: list[dict[str, Any]], key: str, label: str, color: str | None = None) -> None:
    """Plot `key` against the training step: a moving average over a tenth of the points, and the raw points."""
    points = _points(events, key)
    if not points:
        return
    steps, values = zip(*points)
    window = max(1, len(values) // 10)
    smooth = [sum(values[max(0, i - window + 1):i + 1]) / len(values[max(0, i - window + 1):i + 1])
              for i in range(len(values))]
    line, = ax.plot(steps, smooth, label=f"{label} (avg of {window})", color=color)
    ax.plot(steps, values, alpha=0.25, color=line.get_color(), label="_raw")


def main(argv: list[str] | None = None) -> int:
    """Redraw a run's rewards.png from the command line; return the exit status (2 after one `error:` line when
    the folder is missing or holds no metrics)."""
    parser = argparse.ArgumentParser(prog="python -m cooprl.plot", description=__doc__.splitlines()[0],
                                     epilog="example: python -m cooprl.plot runs/demo-magrpo-coop-cpu")
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run folder (holding the metrics.jsonl a run writes)")
    run_dir = Path(parser.parse_args(argv).run_dir)
    problem = _unplottable(run_dir)
    if problem:
        print(f"error: {run_dir}: {problem}", file=sys.stderr)
        return 2
    print(plot_run(run_dir))
    return 0


def _points(events: list[dict[str, Any]], key: str) -> list[tuple[int, float]]:
    """Return the (step, value) points of `key`: the events where it is a number (a damaged value is no point)."""
    return [(e["step"], e[key]) for e in events if "step" in e and _is_number(e.get(key))]


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _plotted_keys(events: list[dict[str, Any]]) -> list[str]:
    """Return the keys plot_run draws that hold at least one point: rewards per turn, eval rewards, SFT's loss."""
    keys = {k for e in events for k in e if k.endswith("/reward_mean") and k.startswith(("turn_", "eval/"))}
    return sorted(k for k in keys | {LOSS_KEY} if _points(events, k))


def _unplottable(run_dir: Path) -> str | None:
    """Return why `run_dir` has nothing to draw (None when its metrics.jsonl holds a reward or a loss to plot)."""
    if not run_dir.is_dir():
        return "no such folder" if not run_dir.exists() else "not a folder"
    try:
        events = read_metrics(run_dir)
    except (ValueError, OSError) as err:
        return f"metrics.jsonl cannot be read ({type(err).__name__})"
    if not events:
        return "holds no metrics (no metrics.jsonl, or an empty one: not a run folder, or a run that logged nothing)"
    if not _plotted_keys(events):
        return (f"metrics.jsonl holds no reward or loss to plot (no turn_<t>/reward_mean, eval/.../reward_mean or "
                f"{LOSS_KEY} with a number)")
    return None


if __name__ == "__main__":
    sys.exit(main())
