"""A two-agent LoRA team on separate base models against one shared base (`agent_model.share_base`, issue 45), on CPU.

Two parts, each layout in its own process, the same config (configs/magrpo_che_cpu.yaml: two SmolLM2-135M agents,
float32, LoRA r=16 on every projection) and seed:
- the team: `build_team`, then one 4-token forward per agent (on CPU transformers maps the weights file and reads a
  page when a forward first touches it, so a team's weights count only once used), and the process's resident memory
  it added, split into anonymous memory and file-backed pages (the mapped weights);
- a short run: `train_magrpo.py` for `--steps` steps (evaluation: only the final one, on one problem with one
  sample); the process's peak resident memory (`ru_maxrss`) and seconds; then the two runs' metrics.jsonl compared
  key by key (every logged figure but the clocks).

    python bench/shared_base.py                 # the team, then 3 steps per layout (10-20 minutes on 2 busy cores)
    python bench/shared_base.py --steps 0       # the team alone (a minute)

A mapped weight page counts in the resident memory of each mapping (two separate bases map the same file twice) while
the page cache holds it once; on a GPU, or with a dtype that converts the weights, each separate base is a copy. The
sandbox's worker processes are not counted (they are the same for both layouts).
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

LAYOUTS = {"separate": [], "shared": ["agent_model.share_base=true"]}


def memory() -> dict[str, float]:
    """Return this process's resident memory now, in MB: all of it, anonymous, file-backed (/proc/self/status)."""
    figures = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key = line.split(":")[0]
        if key in ("VmRSS", "RssAnon", "RssFile"):
            figures[key] = int(line.split()[1]) / 1024
    return figures


def team_child(layout: str) -> dict:
    """Build the team of one layout and run one forward per agent; return the memory it added (a child process)."""
    import torch

    import envs.code_generation  # noqa: F401 (the config's dataset section)
    from cooprl.config import Run, load_config
    from cooprl.trainers.team import build_team

    torch.set_num_threads(1)
    config = load_config(ROOT / "configs" / "magrpo_che_cpu.yaml", LAYOUTS[layout])
    before = memory()
    team = build_team(Run.of(config, "magrpo"), 2)
    with torch.no_grad():
        for agent in team:
            agent.model(input_ids=torch.tensor([[1, 2, 3, 4]]))
    after = memory()
    return {"layout": layout, **{key: after[key] - before[key] for key in after}}


def run_child(layout: str, steps: int, folder: Path) -> dict:
    """Train one layout in this process; return its memory figures (called in a child process)."""
    import cooprl.trainers.magrpo as magrpo
    from envs.launch import train_main

    figures: dict = {"layout": layout}
    build_team = magrpo.build_team

    def measured(*args, **kwargs):
        figures["before_team_mb"] = memory()["VmRSS"]
        team = build_team(*args, **kwargs)
        figures["after_team_mb"] = memory()["VmRSS"]
        return team

    magrpo.build_team = measured
    start = time.perf_counter()
    code = train_main("magrpo", ["--config", str(ROOT / "configs" / "magrpo_che_cpu.yaml"), "--override",
                                 f"magrpo.max_steps={steps}", "magrpo.eval_at_start=false", "magrpo.eval_interval=0",
                                 "magrpo.eval_num_samples=1", "magrpo.eval_num_generations=1",
                                 "checkpoint.checkpoint_interval=0", "wandb.mode=disabled",
                                 f"output.base_dir={folder}", f"output.run_name={layout}", *LAYOUTS[layout]])
    if code:
        sys.exit(f"train_magrpo.py exited with {code}")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024   # KB on Linux
    figures.update(seconds=time.perf_counter() - start, peak_mb=peak)
    return figures


def logged(run_dir: Path) -> list[dict]:
    """Return the run's training events, without the clocks."""
    events = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in e.items() if not k.startswith("time/") and k != "wall_time"} for e in events]


def differences(a: list[dict], b: list[dict]) -> list[str]:
    """Return the figures that differ between two runs' events beyond float tolerance (rel 1e-5)."""
    found = [f"{len(a)} events against {len(b)}"] if len(a) != len(b) else []
    for x, y in zip(a, b, strict=False):
        for key in sorted(set(x) | set(y)):
            u, v = x.get(key), y.get(key)
            close = (isinstance(u, (int, float)) and isinstance(v, (int, float))
                     and math.isclose(u, v, rel_tol=1e-5, abs_tol=1e-7))
            if u != v and not close:
                found.append(f"step {x.get('step')} {key}: {u} against {v}")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3, help="training steps per run")
    parser.add_argument("--folder", type=Path, help="where the two runs go (default: a temporary folder)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    folder = args.folder or Path(tempfile.mkdtemp(prefix="shared_base_bench_"))
    if args.child:
        kind, layout = args.child.split(":")
        print(json.dumps(team_child(layout) if kind == "team" else run_child(layout, args.steps, folder)))
        return
    print("the team, after one forward per agent: resident memory it added (MB)")
    print(f"{'layout':<9} {'all':>6} {'anonymous':>10} {'file-backed':>12}")
    for layout in LAYOUTS:
        r = child(f"team:{layout}", args.steps, folder)
        print(f"{layout:<9} {r['VmRSS']:>6.0f} {r['RssAnon']:>10.0f} {r['RssFile']:>12.0f}", flush=True)
    if not args.steps:
        return
    print(f"configs/magrpo_che_cpu.yaml, {args.steps} steps; runs in {folder}")
    print(f"{'layout':<9} {'before team (MB)':>16} {'team (MB)':>10} {'peak (MB)':>10} {'seconds':>8}")
    for layout in LAYOUTS:
        r = child(f"run:{layout}", args.steps, folder)
        print(f"{layout:<9} {r['before_team_mb']:>16.0f} {r['after_team_mb'] - r['before_team_mb']:>10.0f} "
              f"{r['peak_mb']:>10.0f} {r['seconds']:>8.0f}", flush=True)
    found = differences(*(logged(folder / layout) for layout in LAYOUTS))
    print("metrics.jsonl: the same figures (rel 1e-5)" if not found else "metrics.jsonl differs:\n  "
          + "\n  ".join(found[:20]))


def child(what: str, steps: int, folder: Path) -> dict:
    """Return the figures of `what` (team:<layout> or run:<layout>) measured in a process of its own."""
    out = subprocess.run([sys.executable, __file__, "--steps", str(steps), "--folder", str(folder), "--child", what],
                         capture_output=True, text=True, cwd=ROOT)
    if out.returncode:
        sys.exit(f"{what} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
