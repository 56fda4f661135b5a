"""Benchmark: how the cost of a MAGRPO problem grows with the work, and items/s with 1 vs 2 ddp processes (CPU).

The tiny random model (`offline:tiny-random`: the cost is the framework's, not the model's), float32, 16 new tokens,
the same pure-Python format reward and `plain` transition as bench/magrpo_step.py, no early termination, one update
per problem, 1 torch thread per process. Rows:
  G      seconds per problem for G = 4, 8, 16 (2 agents, 1 turn)
  turns  seconds per problem for 1, 2, 3 turns (2 agents, G = 4: 1, 1 + 4, 1 + 4 + 16 nodes)
for cooprl and, when it is installed (the `bench` extra: comlrl==1.4.3), comlrl's MAGRPOTrainer on the same
settings; then items/s of cooprl's `parallel_training: ddp` with 1 and 2 processes (torchrun, gloo, the same global
order of items; each process rolls out and updates on its own item, gradients averaged); then ddp vs fsdp with 2
processes: items/s and the bytes rank 0 holds for the agents between steps (parameters and Adam states: a full copy
under ddp, a shard under fsdp).

    python bench/scale.py                 # everything (a few minutes on 2 cores)
    python bench/scale.py --only cooprl   # cooprl rows only; --only comlrl, --only ddp, --only fsdp
    python bench/scale.py --only fsdp --model offline:smollm2-135m   # ddp vs fsdp on the embedded SmolLM2
    python bench/scale.py --problems 2    # fewer problems per point

Each point runs in its own process; the first problem of a point is a warm-up and is not timed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

MODEL = "offline:tiny-random"
MAX_NEW_TOKENS = 16
GRID = [("G", 4, 1), ("G", 8, 1), ("G", 16, 1), ("turns", 4, 1), ("turns", 4, 2), ("turns", 4, 3)]


def nodes_per_problem(G: int, turns: int) -> int:
    """Return the nodes of one problem's aligned tree without early termination: 1 + G + G^2 + ..."""
    return sum(G ** t for t in range(turns))


# ============================================================================================ cooprl
def bench_task(n: int, num_agents: int = 2):
    """Return the cooprl Task of the benchmark: the first n HumanEval prompts, format reward, plain transition."""
    from cooprl.task import Score, Task
    items = C.problems(n)
    return Task(name="bench", num_agents=num_agents, train_items=items, eval_items=[],
                first_prompts=lambda item: [C.first_prompt(a, num_agents, item.prompt) for a in range(num_agents)],
                score=lambda batch, joints: [Score(C.joint_reward(list(j))) for j in joints],
                next_prompts=lambda item, histories, joint, score: [C.plain_transition(h[-1][0], h[-1][1])
                                                                    for h in histories],
                max_reward=float(num_agents), item_id=lambda item: item.task_id)


def cooprl_overrides(G: int, turns: int) -> list[str]:
    """Return the config overrides of one cooprl point (one update per problem: update_schedule items)."""
    return [f"agent_model.name={MODEL}", "agent_model.device=cpu", "agent_model.torch_dtype=float32",
            f"agent_model.temperature={C.TEMPERATURE}", f"agent_model.top_p={C.TOP_P}", f"agent_model.top_k={C.TOP_K}",
            "wandb.mode=disabled", f"magrpo.num_turns={turns}", f"magrpo.num_generations={G}",
            f"magrpo.max_new_tokens={MAX_NEW_TOKENS}", f"magrpo.learning_rate={C.LEARNING_RATE}",
            "magrpo.early_termination_threshold=null", "magrpo.discount=1.0", "magrpo.update_schedule=items",
            "magrpo.rollout_buffer_size=1", "magrpo.advantage_normalization=false", "magrpo.eval_interval=0",
            "magrpo.eval_at_start=false"]


def run_cooprl(G: int, turns: int, n: int) -> dict:
    """Return seconds per problem of cooprl's MAGRPO at one point (the first problem untimed)."""
    import torch
    from cooprl.config import Run, load_config
    from cooprl.trainers.magrpo import build_magrpo
    torch.set_num_threads(1)
    C.seed_all()
    task = bench_task(n + 1)
    algorithm = build_magrpo(Run.of(load_config(None, cooprl_overrides(G, turns)), "magrpo"), task)
    times = []
    for step, item in enumerate(task.train_items, 1):
        t = time.perf_counter()
        algorithm.train_step(item, step)
        times.append(time.perf_counter() - t)
    return {"side": "cooprl", "G": G, "turns": turns, "per_problem_s": times[1:]}


# ============================================================================================ comlrl
def run_comlrl(G: int, turns: int, n: int) -> dict:
    """Return seconds per problem of comlrl 1.4.3's MAGRPOTrainer at one point (the first problem untimed)."""
    import torch
    from datasets import Dataset
    from comlrl.trainers.reinforce import MAGRPOConfig, MAGRPOTrainer
    torch.set_num_threads(1)
    C.seed_all()
    times: list[float] = []
    original = MAGRPOTrainer._train_step_returns

    def timed(self, *args, **kwargs):
        t = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            times.append(time.perf_counter() - t)

    MAGRPOTrainer._train_step_returns = timed
    items = C.problems(n + 1)
    dataset = Dataset.from_list([{"task_id": p.task_id, "prompt": p.prompt} for p in items])

    def formatter(agent: int):
        return lambda item, external_prompts=None: external_prompts if external_prompts is not None else \
            C.first_prompt(agent, 2, item["prompt"])

    def reward(completions_0, completions_1):
        return [C.joint_reward([completions_0[0], completions_1[0]])]

    def transition(prompt, agent_completions, num_agents, prompt_history_per_agent, response_history_per_agent, **_):
        return [C.plain_transition(prompt_history_per_agent[a][-1], response_history_per_agent[a][-1])
                for a in range(num_agents)]

    args = MAGRPOConfig(num_train_epochs=1, agent_learning_rate=C.LEARNING_RATE, num_agents=2, num_generations=G,
                        max_new_tokens=MAX_NEW_TOKENS, temperature=C.TEMPERATURE, top_p=C.TOP_P, top_k=C.TOP_K,
                        num_turns=turns, discount=1.0, joint_mode="aligned", early_termination_threshold=None,
                        eval_interval=0, eval_num_samples=0, rollout_buffer_size=nodes_per_problem(G, turns),
                        advantage_normalization=False, advantage_mode="mean", agent_devices="cpu")
    from cooprl.models.loading import resolve_model_path
    trainer = MAGRPOTrainer(agent_model=str(resolve_model_path(MODEL)), num_agents=2,
                            model_config={"torch_dtype": torch.float32}, train_dataset=dataset, reward_func=reward,
                            formatters=[formatter(0), formatter(1)], external_transition=transition,
                            wandb_config=None, args=args)
    trainer.train()
    return {"side": "comlrl", "G": G, "turns": turns, "per_problem_s": times[1:]}


# ============================================================================================ ddp / fsdp
def held_bytes(team) -> int:
    """Return the bytes this process holds for the agents between steps: its parameters (a sharded model: its shards)
    and its optimizer states (Adam's two moments; a sharded model's: their shards)."""
    def local(t):
        t = t.to_local() if hasattr(t, "to_local") else t
        return t.numel() * t.element_size()
    total = 0
    for agent in team:
        total += sum(local(p) for p in agent.model.parameters())
        total += sum(local(v) for slots in agent.optimizer.state.values() for v in slots.values()
                     if hasattr(v, "numel"))
    return total


def run_ddp_worker(mode: str, n: int, model: str) -> None:
    """One process of the ddp/fsdp point (started by torchrun): train n + 1 steps of the benchmark task through
    cooprl.train.train with `parallel_training: mode`; rank 0 prints items/s over the steps after the first and the
    bytes it holds for the agents, as one JSON line."""
    import resource
    import torch
    from cooprl.config import Run, load_config
    from cooprl.trainers import magrpo as magrpo_mod
    from cooprl.parallel import distributed
    from cooprl.train import train
    torch.set_num_threads(1)
    world = distributed.launched_world_size()
    stamps: list[float] = []
    held: list[int] = []
    original = magrpo_mod.MAGRPO.train_step

    training_peak: list[int] = []

    def timed(self, item, step):
        out = original(self, item, step)
        stamps.append(time.perf_counter())
        held[:] = [held_bytes(self.team)]
        training_peak[:] = [resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024]   # before the final save
        return out

    magrpo_mod.MAGRPO.train_step = timed
    out = Path(os.environ["SCALE_OUT"])
    overrides = [o for o in cooprl_overrides(4, 1) if not o.startswith("agent_model.name=")]
    config = load_config(None, [*overrides, f"agent_model.name={model}", f"magrpo.parallel_training={mode}",
                                f"magrpo.max_steps={n + 1}", f"output.base_dir={out}",
                                f"output.run_name={mode}{world}", "magrpo.eval_num_samples=1"])
    train(Run.of(config, "magrpo"), bench_task(world * (n + 1)))
    if int(os.environ.get("RANK", "0")) == 0:
        seconds = stamps[-1] - stamps[0]   # the steps after the first (each step: world items)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        print("SCALE_RESULT " + json.dumps({"side": mode, "processes": world, "items": world * n, "seconds": seconds,
                                             "items_per_s": world * n / seconds, "held_bytes": held[0],
                                             "training_peak_rss_bytes": training_peak[0], "peak_rss_bytes": peak}),
              flush=True)


def run_ddp(processes: int, n: int, out: Path, mode: str = "ddp", model: str = MODEL) -> dict:
    """Return items/s (and held bytes) of `mode` (ddp or fsdp) with `processes` processes (torchrun --standalone)."""
    torchrun = Path(sys.executable).with_name("torchrun")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "SCALE_OUT": str(out), "WANDB_MODE": "disabled"}
    command = [str(torchrun), "--standalone", f"--nproc_per_node={processes}", __file__, "--ddp-worker", mode,
               "--problems", str(n), "--model", model]
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=C.ROOT, timeout=3600)
    line = next((l for l in result.stdout.splitlines() if l.startswith("SCALE_RESULT ")), None)
    if result.returncode != 0 or line is None:
        raise RuntimeError(f"{mode} with {processes} processes failed:\n{result.stderr[-2000:]}")
    return json.loads(line.removeprefix("SCALE_RESULT "))


# ============================================================================================ driver
def point_in_subprocess(side: str, G: int, turns: int, n: int) -> dict | None:
    """Run one point in its own process; return its result, or None (with the error printed) when it failed."""
    command = [sys.executable, __file__, "--point", side, str(G), str(turns), "--problems", str(n)]
    result = subprocess.run(command, capture_output=True, text=True, cwd=C.ROOT, timeout=1800,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    line = next((l for l in result.stdout.splitlines() if l.startswith("SCALE_RESULT ")), None)
    if result.returncode != 0 or line is None:
        print(f"{side} G={G} turns={turns} failed: {result.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
        return None
    return json.loads(line.removeprefix("SCALE_RESULT "))


def comlrl_installed() -> bool:
    """Return whether comlrl can be imported (the bench extra)."""
    import importlib.util
    return importlib.util.find_spec("comlrl") is not None


def print_table(rows: list[dict], ddp: list[dict], sharded: list[dict]) -> None:
    """Print seconds per problem for each grid point and side, then ddp's items/s, then ddp vs fsdp."""
    def mean(values):
        return sum(values) / len(values) if values else float("nan")

    by_point = {(r["side"], r["G"], r["turns"]): mean(r["per_problem_s"]) for r in rows}
    if rows:
        print(f"{'point':<16}{'nodes':>6}{'cooprl s/problem':>18}{'comlrl s/problem':>18}{'comlrl/cooprl':>15}")
    for kind, G, turns in GRID if rows else ():
        a, b = by_point.get(("cooprl", G, turns)), by_point.get(("comlrl", G, turns))
        ratio = f"{b / a:.2f}" if a and b else "-"
        print(f"{f'{kind}: G={G} T={turns}':<16}{nodes_per_problem(G, turns):>6}"
              f"{(f'{a:.3f}' if a else '-'):>18}{(f'{b:.3f}' if b else '-'):>18}{ratio:>15}")
    for r in ddp:
        print(f"ddp {r['processes']} process(es): {r['items_per_s']:.2f} items/s ({r['items']} items, "
              f"{r['seconds']:.1f} s)")
    if len(ddp) == 2:
        print(f"ddp_speedup_2_vs_1: {ddp[1]['items_per_s'] / ddp[0]['items_per_s']:.2f}")
    for r in sharded:
        print(f"{r['side']} {r['processes']} processes: {r['items_per_s']:.3f} items/s, agents' parameters + optimizer "
              f"states held by rank 0: {r['held_bytes'] / 2**20:.1f} MiB; rank 0's peak RSS while training "
              f"{r['training_peak_rss_bytes'] / 2**20:.0f} MiB, with the final checkpoint "
              f"{r['peak_rss_bytes'] / 2**20:.0f} MiB")
    if len(sharded) == 2:
        print(f"fsdp_held_vs_ddp: {sharded[1]['held_bytes'] / sharded[0]['held_bytes']:.2f}, "
              f"fsdp_speed_vs_ddp: {sharded[1]['items_per_s'] / sharded[0]['items_per_s']:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("cooprl", "comlrl", "ddp", "fsdp"))
    parser.add_argument("--problems", type=int, default=3, help="timed problems per point (one more is a warm-up)")
    parser.add_argument("--model", default=MODEL, help="the model of the ddp/fsdp points (e.g. offline:smollm2-135m)")
    parser.add_argument("--point", nargs=3, metavar=("SIDE", "G", "TURNS"), help=argparse.SUPPRESS)
    parser.add_argument("--ddp-worker", choices=("ddp", "fsdp"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ddp_worker:
        run_ddp_worker(args.ddp_worker, args.problems, args.model)
        return
    if args.point:
        side, G, turns = args.point[0], int(args.point[1]), int(args.point[2])
        result = (run_cooprl if side == "cooprl" else run_comlrl)(G, turns, args.problems)
        print("SCALE_RESULT " + json.dumps(result), flush=True)
        return
    sides = [s for s in ("cooprl", "comlrl") if args.only in (None, s)]
    if "comlrl" in sides and not comlrl_installed():
        print("comlrl is not installed (pip install -e .[bench]): its side is skipped", file=sys.stderr)
        sides.remove("comlrl")
    points = list(dict.fromkeys((G, turns) for _, G, turns in GRID))   # G=4, 1 turn is in both rows: run once
    rows = [r for side in sides for G, turns in points
            if (r := point_in_subprocess(side, G, turns, args.problems)) is not None]
    import tempfile
    ddp, sharded = [], []
    with tempfile.TemporaryDirectory() as out:
        if args.only in (None, "ddp"):
            ddp = [run_ddp(p, args.problems * 2, Path(out), model=args.model) for p in (1, 2)]
        if args.only in (None, "fsdp"):   # 2 processes each: a full copy per process vs a shard per process
            sharded = [run_ddp(2, args.problems * 2, Path(out), mode, args.model) for mode in ("ddp", "fsdp")]
    print_table(rows, ddp, sharded)


if __name__ == "__main__":
    main()
