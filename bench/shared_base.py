"""A two-agent LoRA team on separate base models against one shared base (`agent_model.share_base`, issue 45), on CPU.

Runs `train_magrpo.py --config configs/magrpo_che_cpu.yaml` (two SmolLM2-135M agents, LoRA r=16 on every
projection) twice, the same steps and seed, once per layout, each in its own process, and prints per layout: the
process's resident memory just before the team is built and just after it (the team's part: its base models, adapters
and tokenizers), the process's peak resident memory over the whole run (`ru_maxrss`), and the seconds; then compares
the two runs' metrics.jsonl, key by key (every logged figure but the clocks). Evaluation: only the final one, on
one problem with one sample.

    python bench/shared_base.py                 # 3 steps each (about 2-4 minutes per run on 2 cores)
    python bench/shared_base.py --steps 4

The sandbox's worker processes are not counted (they are the same for both layouts).
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


def rss_mb() -> float:
    """Return this process's resident memory now, in MB (VmRSS of /proc/self/status)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run_child(layout: str, steps: int, folder: Path) -> dict:
    """Train one layout in this process; return its memory figures (called in a child process)."""
    import cooprl.trainers.magrpo as magrpo
    from envs.launch import train_main

    figures: dict = {"layout": layout}
    build_team = magrpo.build_team

    def measured(*args, **kwargs):
        figures["before_team_mb"] = rss_mb()
        team = build_team(*args, **kwargs)
        figures["after_team_mb"] = rss_mb()
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
        print(json.dumps(run_child(args.child, args.steps, folder)))
        return
    print(f"configs/magrpo_che_cpu.yaml, {args.steps} steps, evaluation off; runs in {folder}")
    print(f"{'layout':<9} {'before team (MB)':>16} {'team (MB)':>10} {'peak (MB)':>10} {'seconds':>8}")
    for layout in LAYOUTS:
        out = subprocess.run([sys.executable, __file__, "--steps", str(args.steps), "--folder", str(folder),
                              "--child", layout], capture_output=True, text=True, cwd=ROOT)
        if out.returncode:
            sys.exit(f"{layout} run failed:\n{out.stderr[-3000:]}")
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{layout:<9} {r['before_team_mb']:>16.0f} {r['after_team_mb'] - r['before_team_mb']:>10.0f} "
              f"{r['peak_mb']:>10.0f} {r['seconds']:>8.0f}", flush=True)
    found = differences(*(logged(folder / layout) for layout in LAYOUTS))
    print("metrics.jsonl: the same figures (rel 1e-5)" if not found else "metrics.jsonl differs:\n  "
          + "\n  ".join(found[:20]))


if __name__ == "__main__":
    main()
