"""Does every trainer learn? Each trainer on the embedded SmolLM2 and the shipped coop set, with its CPU config,
for a fixed budget of steps; one row per trainer and the training curves side by side.

    python bench/learning.py                          # every trainer, the budget below
    python bench/learning.py --trainers magrpo,iac --steps 16
    python bench/learning.py --trainers magrpo@8,magrpo_dapo@8   # rows with their own budget, in their own folders
    python bench/learning.py --report                 # only rebuild the table and the figure from finished runs

Each trainer runs in its own process through its `train_*.py` (the command a user types), in
`bench/learning/<trainer>/`. Runs are resumable: a trainer whose run folder has a checkpoint is continued with
`--resume`, a finished one is not rerun, so the whole bench can be started in the background, stopped and started
again. A row named `<row>@<n>` is row <row> with a budget of n steps, in `bench/learning/<row>@<n>/` (a shorter set
that leaves the 16-step rows as they are). The table (`bench/learning/results.md`) has, per trainer: the share of
the steps' agent updates with a nonzero gradient (a tied group's is zero), mean training reward of the first and
last quarter of the steps, the evaluation reward before the first step and after the last (`eval_at_start`), the
eval pass rate, `calls_aux` and `uses_aux` of the last quarter, wall time and peak memory (the process's max RSS).
The figure
(`bench/learning/learning.png`) draws each trainer's training reward per step.

GRPO and AC have no CPU config of their own: they run the MAGRPO and IAC CPU configs' settings with one agent, and
their prompts end inside the function body (`code_prompt.open_body`: the single-agent prompt otherwise rarely gets a
function body from the 135M model, see bench/function_rate.py).

Rows that are not one trainer: `sft` (supervised fine-tuning on the coop set's reference pairs, its config's two
epochs; its calls_aux/uses_aux are its final evaluation's, SFT samples nothing in training), `sft+magrpo` and
`sft+madpo` (those trainers started from the `sft` row's agents, `agent_model.init_from`; run after it), and the team
environments `planner_coder` and `coder_tester` (MAGRPO with their CPU configs), `magrpo_shared_policy` (the
`magrpo` row with `agent_model.shared_policy`: one model plays both agents); and the policy-gradient objectives
on MAGRPO's and GRPO's rows (`<trainer>_resample`: `tied_groups: resample`, `_dapo`: `loss_type: dapo`, `_clip2`:
`num_iterations: 2`, clipped at 0.2; their figure: `learning_objectives.png`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "learning"
TRAINERS = ["magrpo", "grpo", "iac", "maac", "ac", "madpo", "madpo_iter", "marlhf", "marlhf_iter"]
# the policy-gradient objectives (issue 44), each on MAGRPO and GRPO with the trainer row's config, seed and steps:
# dynamic sampling of tied groups, the token-level (DAPO) loss, two clipped passes per rollout
OBJECTIVES = {"resample": ["tied_groups=resample", "max_resamples=2"], "dapo": ["loss_type=dapo"],
              "clip2": ["num_iterations=2", "epsilon=0.2"]}
OBJECTIVE_ROWS = {f"{trainer}_{name}": trainer for trainer in ("magrpo", "grpo") for name in OBJECTIVES}
EXTRA_ROWS = ["sft", "sft+magrpo", "sft+madpo", "planner_coder", "coder_tester", "magrpo_shared_policy",
              *OBJECTIVE_ROWS]
ROWS = TRAINERS + EXTRA_ROWS
# (config file, overrides) per trainer; the step budget is added by --steps
_GRPO = ["grpo.learning_rate=3e-4", "grpo.max_new_tokens=80", "grpo.update_schedule=items",
         "grpo.rollout_buffer_size=1",
         "grpo.eval_interval=0", "grpo.eval_num_samples=4", "grpo.weight_decay=0.0", "grpo.max_grad_norm=1.0",
         "grpo.num_turns=1", "code_prompt.open_body=true"]
_AC = ["ac.num_turns=2", "ac.num_generations=2", "ac.update_schedule=episodes", "ac.rollout_buffer_size=2",
       "ac.learning_rate=3e-4", "ac.critic_learning_rate=1e-3", "ac.max_new_tokens=80", "ac.eval_interval=0",
       "ac.eval_num_samples=4", "ac.weight_decay=0.0", "ac.max_grad_norm=1.0", "ac.discount=0.9",
       "ac.early_termination_threshold=-0.2", "code_prompt.open_body=true"]
# the RL rows started from the SFT row evaluate as it does (8 problems x 2 samples, 128 new tokens): their start
# policy is the SFT row's final one, whose evaluation with the same settings and seed gives the same numbers
# (tests/cooprl/trainers/test_sft.py), so they skip their own: the row's "before" is the SFT row's last evaluation
# RL from SFT'd agents: a smaller learning rate than the CPU configs' 3e-4, which undid the SFT'd syntax (Makefile demo-
# coop)
_FROM_SFT = ["eval_num_samples=8", "eval_num_generations=2", "max_new_tokens=128", "eval_at_start=false",
             "learning_rate=5e-5"]
RUNS = {
    "magrpo": ("configs/magrpo_che_cpu.yaml", []),
    "grpo": ("configs/grpo_che_cpu.yaml", _GRPO),   # (a file without a grpo: section is refused by train_grpo.py)
    "iac": ("configs/iac_che_cpu.yaml", []),
    "maac": ("configs/maac_che_cpu.yaml", []),
    "ac": ("configs/ac_che_cpu.yaml", _AC),
    "madpo": ("configs/madpo_che_cpu.yaml", []),
    "madpo_iter": ("configs/madpo_che_cpu.yaml", []),
    "marlhf": ("configs/marlhf_che_cpu.yaml", []),
    "marlhf_iter": ("configs/marlhf_che_cpu.yaml", []),
    "sft": ("configs/sft_che_cpu.yaml", []),
    "sft+magrpo": ("configs/magrpo_che_cpu.yaml", [f"magrpo.{key}" for key in _FROM_SFT]),
    "sft+madpo": ("configs/madpo_che_cpu.yaml", [f"madpo.{key}" for key in _FROM_SFT]),
    "planner_coder": ("configs/planner_coder_cpu.yaml", []),
    "coder_tester": ("configs/coder_tester_cpu.yaml", []),
    "magrpo_shared_policy": ("configs/magrpo_che_cpu.yaml", ["agent_model.shared_policy=true"]),
}
RUNS.update({row_name: (RUNS[trainer][0], [*RUNS[trainer][1], *[f"{trainer}.{key}" for key in OBJECTIVES[name]]])
             for row_name, trainer in OBJECTIVE_ROWS.items() for name in [row_name.split("_", 1)[1]]})
STARTS_FROM = {"sft+magrpo": "sft", "sft+madpo": "sft"}   # row -> the row whose agents it starts from (init_from)
FULL_CONFIG = ("sft",)                                     # rows that train their config's epochs, not --steps
COLUMNS = 10                                               # of the table


def budget_of(row_name: str, steps: int) -> tuple[str, int]:
    """Return the row that `row_name` runs and its step budget: `<row>@<n>` is row <row> with n steps, in its own run
    folder (a shorter set next to the 16-step rows), any other name runs with `steps`."""
    row_name, _, budget = row_name.partition("@")
    return row_name, int(budget) if budget.isdigit() else steps


def trainer_of(row_name: str) -> str:
    """Return the trainer (train_<trainer>.py, its config section) of table row `row_name`."""
    row_name = budget_of(row_name, 0)[0]
    if row_name in ("planner_coder", "coder_tester", "magrpo_shared_policy"):
        return "magrpo"
    if row_name in OBJECTIVE_ROWS:
        return OBJECTIVE_ROWS[row_name]
    return row_name.split("+")[-1]
ITERATIVE = ("madpo_iter", "marlhf_iter")   # their budget is steps per iteration (2 iterations)


def run_folder(trainer: str) -> Path:
    """Return the run folder of `trainer`'s bench run."""
    return OUT / trainer


def finished(trainer: str) -> bool:
    """Return whether `trainer`'s run ended (its summary is on file)."""
    return (run_folder(trainer) / "bench.json").is_file()


def run(name: str, steps: int, extra: list[str] = ()) -> dict:
    """Run (or continue) row `name` for `steps` steps, `extra` overrides last; return its wall seconds and peak memory,
    also kept on file."""
    folder = run_folder(name)
    trainer = trainer_of(name)
    base, steps = budget_of(name, steps)
    config, overrides = RUNS[base]
    budget = steps // 2 if trainer in ITERATIVE else steps
    if base in STARTS_FROM:
        if not finished(STARTS_FROM[base]):
            raise SystemExit(f"{name}: starts from the {STARTS_FROM[base]} row's agents; run that row first")
        overrides = [*overrides, f"agent_model.init_from={run_folder(STARTS_FROM[base])}"]
    if base not in FULL_CONFIG:
        overrides = [*overrides, f"{trainer}.max_steps={budget}"]
    command = [sys.executable, f"train_{trainer}.py", "--config", config, "--override", *overrides,
               f"output.base_dir={OUT}", f"output.run_name={name}",
               "checkpoint.checkpoint_interval=1", "checkpoint.checkpoint_total_limit=1", "wandb.mode=disabled",
               *[item.replace("<trainer>", trainer) for item in extra]]
    if (folder / "checkpoints").is_dir() and any((folder / "checkpoints").iterdir()):
        command = [sys.executable, f"train_{trainer}.py", "--resume", str(folder)]   # continue where it stopped
    elif folder.exists():   # a try that saved nothing: a new run would take <name>-2, and this bench reads <name>
        shutil.rmtree(folder)
    start = time.time()
    child = subprocess.Popen(command, cwd=ROOT)
    _, status, usage = os.wait4(child.pid, 0)   # this child's own resource use (its peak RSS), not all children's
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise SystemExit(f"{name}: exit status {child.returncode} ({' '.join(command)})")
    result = {"seconds": time.time() - start, "peak_mb": usage.ru_maxrss / 1024}
    (folder / "bench.json").write_text(json.dumps(result), encoding="utf-8")
    return result


def events(trainer: str) -> list[dict]:
    """Return the metrics events of `trainer`'s run."""
    path = run_folder(trainer) / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] if path.is_file() else []


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def row(trainer: str) -> dict:
    """Return the table row of `trainer` from its metrics (NaN where a figure is missing)."""
    all_events = events(trainer)
    train = [e for e in all_events if "turn_1/reward_mean" in e]
    evals = [e for e in all_events if "eval/turn_1/reward_mean" in e]
    sampled = train or evals[-1:]   # SFT samples nothing in training: its last evaluation's aux figures
    quarter = max(1, len(train) // 4)
    reward = "turn_1/task_reward_mean" if train and "turn_1/task_reward_mean" in train[0] else "turn_1/reward_mean"
    bench = json.loads((run_folder(trainer) / "bench.json").read_text()) if finished(trainer) else {}
    last = train[-quarter:]
    prefix = "turn_1/" if train else "eval/turn_1/"
    aux = sampled[-quarter:] if train else sampled
    return {
        "trainer": trainer, "steps": len(train) or len([e for e in all_events if "nll_mean" in e]),
        "nonzero_updates": nonzero_updates(train),
        "train_first": _mean([e[reward] for e in train[:quarter]]), "train_last": _mean([e[reward] for e in last]),
        "eval_before": (evals[0]["eval/turn_1/reward_mean"] if evals and evals[0]["step"] == 0 else
                        start_evaluation(trainer)),
        "eval_after": evals[-1]["eval/turn_1/reward_mean"] if evals else float("nan"),
        "eval_pass_rate": evals[-1].get("eval/turn_1/pass_rate", float("nan")) if evals else float("nan"),
        "calls_aux": _mean([e[prefix + "calls_aux"] for e in aux if prefix + "calls_aux" in e]),
        "uses_aux": _mean([e[prefix + "uses_aux"] for e in aux if prefix + "uses_aux" in e]),
        "minutes": bench.get("seconds", float("nan")) / 60, "peak_mb": bench.get("peak_mb", float("nan")),
    }


def nonzero_updates(train: list[dict]) -> float:
    """Return the share of the training steps' agent updates whose gradient is nonzero (`agent_<i>/grad_norm` > 0;
    an agent with no update in a step, its groups dropped, counts as zero), NaN when no step records a grad norm."""
    agents = sorted({key.split("/")[0] for e in train for key in e if key.startswith("agent_")})
    if not any(f"{agent}/grad_norm" in e for e in train for agent in agents):
        return float("nan")
    updates = [e.get(f"{agent}/grad_norm", 0.0) > 0 for e in train for agent in agents]
    return sum(updates) / len(updates)


def start_evaluation(name: str) -> float:
    """Return the eval reward of row `name`'s start policy when it did not evaluate it itself: the last evaluation of
    the row it starts from (the same policy), else NaN."""
    parent = [e for e in events(STARTS_FROM[name]) if "eval/turn_1/reward_mean" in e] if name in STARTS_FROM else []
    return parent[-1]["eval/turn_1/reward_mean"] if parent else float("nan")


def table(rows: list[dict]) -> str:
    """Return the Markdown table of `rows`."""
    head = ("| trainer | steps | nonzero updates | train reward first → last quarter | eval reward before → after | "
            "eval pass rate | calls_aux (last q.) | uses_aux (last q.) | minutes | peak MB |")
    lines = [head, "|" + "---|" * COLUMNS]
    def number(value: float, digits: int = 3) -> str:   # – where a figure does not apply (one agent has no aux)
        return "–" if value != value else f"{value + 0.0:.{digits}f}"

    for r in rows:
        lines.append(f"| {r['trainer']} | {r['steps']} | {number(r['nonzero_updates'], 2)} | "
                     f"{number(r['train_first'])} → {number(r['train_last'])} | "
                     f"{number(r['eval_before'])} → {number(r['eval_after'])} | {number(r['eval_pass_rate'])} | "
                     f"{number(r['calls_aux'])} | {number(r['uses_aux'])} | {number(r['minutes'], 1)} | "
                     f"{number(r['peak_mb'], 0)} |")
    return "\n".join(lines) + "\n"


def figure(trainers: list[str], path: Path, columns: int = 5) -> Path | None:
    """Draw each trainer's training reward per step in one figure, at most `columns` a row; return its path (None
    without matplotlib)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    shown = [t for t in trainers if any("turn_1/reward_mean" in e for e in events(t))]   # (SFT has no reward curve)
    if not shown:
        return None
    columns = min(columns, len(shown))
    rows = -(-len(shown) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(3 * columns, 2.6 * rows), sharey=True, squeeze=False)
    for ax in axes.flat[len(shown):]:
        ax.axis("off")
    for ax, trainer in zip(axes.flat, shown, strict=False):   # (the grid may have more panels)
        train = [e for e in events(trainer) if "turn_1/reward_mean" in e]
        key = "turn_1/task_reward_mean" if "turn_1/task_reward_mean" in train[0] else "turn_1/reward_mean"
        ax.plot([e["step"] for e in train], [e[key] for e in train], lw=1)
        evals = [e for e in events(trainer) if "eval/turn_1/reward_mean" in e]
        if evals:
            ax.plot([e["step"] for e in evals], [e["eval/turn_1/reward_mean"] for e in evals], "o--", ms=3)
        ax.set_title(trainer, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
    for row in axes:
        row[0].set_ylabel("task reward (line: training,\ndots: eval before/after)", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def report(trainers: list[str]) -> str:
    """Write results.md (the rows with a run here, the other rows kept as results.md had them, in ROWS order) and the
    figure of the rows with a run (learning.png when they are the nine trainers, learning_objectives.png when they are
    MAGRPO's and GRPO's objective rows, else learning_<rows>.png); return the table."""
    rows = [row(t) for t in trainers if events(t)]
    OUT.mkdir(parents=True, exist_ok=True)
    kept = earlier_rows(OUT / "results.md")
    fresh = table(rows).splitlines()[2:]
    for line in fresh:
        kept[line.split("|")[1].strip()] = line
    order = ROWS + sorted(set(kept) - set(ROWS), key=_shorter_row_order)
    text = "\n".join(table([]).splitlines()[:2] + [kept[name] for name in order if name in kept]) + "\n"
    (OUT / "results.md").write_text(text, encoding="utf-8")
    shown = [r["trainer"] for r in rows]
    if set(TRAINERS) <= set(shown):
        figure(shown, OUT / "learning.png")
    elif {budget_of(name, 0)[0] for name in shown} <= {*OBJECTIVE_ROWS, *OBJECTIVE_ROWS.values()}:
        # a trainer's objectives on one line
        figure(shown, OUT / "learning_objectives.png", columns=1 + len(OBJECTIVES))
    else:
        figure(shown, OUT / f"learning_{'_'.join(shown)}.png")
    return text


def _shorter_row_order(row_name: str) -> tuple:
    """Sort key of the rows that are not in ROWS (`<row>@<n>`): by budget, then trainer, then ROWS order."""
    base, budget = budget_of(row_name, 0)
    known = base in ROWS and trainer_of(base) in ROWS
    return (budget, ROWS.index(trainer_of(base)) if known else len(ROWS), ROWS.index(base) if known else 0, row_name)


def earlier_rows(path: Path) -> dict[str, str]:
    """Return the table lines of `path` (a results.md) by row name; empty when there is none."""
    if not path.is_file():
        return {}
    lines = [line for line in path.read_text(encoding="utf-8").splitlines()[2:] if line.startswith("|")]
    # a row written before the nonzero-updates column (third) has one cell less: – there (its run is not here)
    cells = [line.split("|") for line in lines]
    lines = ["|".join(c if len(c) == COLUMNS + 2 else [*c[:3], " – ", *c[3:]]) for c in cells]
    return {line.split("|")[1].strip(): line for line in lines}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trainers", default=",".join(TRAINERS),
                        help=f"comma-separated rows (default: the nine trainers; also {', '.join(EXTRA_ROWS)})")
    parser.add_argument("--steps", type=int, default=16, help="training steps per trainer (iterative: in all)")
    parser.add_argument("--report", action="store_true", help="only rebuild the table and figure")
    parser.add_argument("--override", nargs="*", action="extend", default=[], metavar="KEY=VALUE",
                        help="overrides for every run started here, <trainer> standing for its section, e.g. "
                             "'<trainer>.eval_num_samples=8'")
    args = parser.parse_args()
    trainers = [t.strip() for t in args.trainers.split(",") if t.strip()]
    unknown = sorted({budget_of(t, 0)[0] for t in trainers} - set(RUNS))
    if unknown:
        parser.error(f"unknown rows {unknown}; choose from {', '.join(ROWS)}")
    if not args.report:
        for trainer in trainers:
            if finished(trainer):
                print(f"{trainer}: finished earlier ({run_folder(trainer)})")
                continue
            print(f"{trainer}: running {budget_of(trainer, args.steps)[1]} steps in {run_folder(trainer)}", flush=True)
            result = run(trainer, args.steps, args.override)
            print(f"{trainer}: {result['seconds'] / 60:.1f} min, peak {result['peak_mb']:.0f} MB", flush=True)
    print(report(trainers))


if __name__ == "__main__":
    main()
