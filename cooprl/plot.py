"""Reward curves of a run: `python -m cooprl.plot RUN_DIR` writes RUN_DIR/rewards.png from metrics.jsonl."""

from __future__ import annotations

import sys
from pathlib import Path

from cooprl.tracking import read_metrics


def plot_run(run_dir: str | Path) -> Path:
    """Draw the training reward per turn (raw and a moving average) and eval rewards; return the PNG path."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    events = read_metrics(run_dir)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    turn_keys = sorted({k for e in events for k in e if k.startswith("turn_") and k.endswith("/reward_mean")})
    for key in turn_keys:
        points = [(e["step"], e[key]) for e in events if e.get(key) is not None]
        if not points:
            continue
        steps, values = zip(*points)
        window = max(1, len(values) // 10)
        smooth = [sum(values[max(0, i - window + 1):i + 1]) / len(values[max(0, i - window + 1):i + 1])
                  for i in range(len(values))]
        line, = ax.plot(steps, smooth, label=f"train {key.split('/')[0]} (avg of {window})")
        ax.plot(steps, values, alpha=0.25, color=line.get_color())
    for key in sorted({k for e in events for k in e if k.startswith("eval/") and k.endswith("/reward_mean")}):
        points = [(e["step"], e[key]) for e in events if e.get(key) is not None]
        if points:
            ax.plot(*zip(*points), "o--", label=key)
    ax.set_xlabel("training step (dataset item)")
    ax.set_ylabel("reward (raw)")
    ax.set_title(run_dir.name)
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=8)
    out = run_dir / "rewards.png"
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m cooprl.plot RUN_DIR")
    print(plot_run(sys.argv[1]))
