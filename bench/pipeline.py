"""Seconds per MAGRPO rollout with and without pipelined scoring (issue 16 §3), real sandbox scoring, on CPU.

One process loads two agents (`offline:tiny-random` by default, `BENCH_MODEL` to change) and rolls out the first N
HumanEval problems (2 agents, 2 turns, G = 4, no early termination: 1 + 4 nodes per problem) in three modes:

- `turn`: every node of a turn in one generate per agent, then one scoring batch (the default, `reward.pipeline_nodes`
  null): no overlap;
- `node, sequential`: node by node (`reward.pipeline_nodes=1`, `reward.pipeline=false`): generate a node, score it,
  generate the next;
- `node, pipelined`: node by node, each node scored on a background thread while the next node generates
  (`reward.pipeline_nodes=1`, the default `reward.pipeline=true`).

Scoring is the code task's reward in the sandbox, plus, per joint action, one more sandbox program that computes
for `--busy-ms` (default 300 ms of CPU): the reward of a small model's code is mostly syntax errors and missing
definitions, scored in milliseconds, while real runs pay for test suites, slow solutions and timeouts (`--busy-ms
0`: the reward alone). Each mode starts from the same seed; the sequential and pipelined modes must give the same
rewards (checked and printed). Per mode: wall seconds per problem, the seconds spent generating and scoring (the
scoring thread's own time when pipelined), and the overlap: generation + scoring - wall. Torch gets `--threads`
threads (default 1: the rest of the CPUs are the sandbox's, as on a GPU trainer whose CPUs are free for the reward).

    python bench/pipeline.py                       # 2 problems, tiny model, under a minute on 2 cores
    BENCH_MODEL=offline:smollm2-135m-instruct python bench/pipeline.py --problems 1   # minutes on CPU
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

BUSY_PROGRAM = """
import time
def busy():
    end = time.process_time() + {seconds}
    while time.process_time() < end:
        pass
    return 1
"""
BUSY_TESTS = "def check(candidate):\n    assert candidate() == 1\n"
MODES = [("turn", None, True), ("node, sequential", 1, False), ("node, pipelined", 1, True)]


class Timer:
    """Accumulates the seconds spent inside wrapped calls (thread-safe: scoring may run on another thread)."""

    def __init__(self) -> None:
        self.seconds, self._lock = 0.0, threading.Lock()

    def wrap(self, fn):
        """Return `fn` timed into this timer."""
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                with self._lock:
                    self.seconds += time.perf_counter() - start
        return timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", type=int, default=2, help="HumanEval problems rolled out per mode")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--busy-ms", type=int, default=300, help="extra sandbox CPU time per joint action")
    args = parser.parse_args()

    import torch

    from cooprl.config import Run, load_config
    from cooprl.rollout.tree import iter_nodes, rollout
    from cooprl.trainers.loop import seed_everything
    from cooprl.trainers.magrpo import build_magrpo
    from envs.code_generation.task import build_code_task
    from rewards.sandbox import default_sandbox

    torch.set_num_threads(args.threads)
    model = os.environ.get("BENCH_MODEL", "offline:tiny-random")
    config = load_config(None, [f"agent_model.name={model}", "agent_model.device=cpu",
                                "agent_model.torch_dtype=float32",
                                "dataset.name=openai/openai_humaneval", "dataset.type=humaneval",
                                f"dataset.train_split=test[:{args.problems}]", "dataset.eval_split=test[:1]",
                                "magrpo.num_generations=4", f"magrpo.max_new_tokens={args.max_new_tokens}",
                                "magrpo.num_turns=2", "magrpo.early_termination_threshold=null"])
    task = build_code_task(Run.of(config, "magrpo"))
    algorithm = build_magrpo(Run.of(config, "magrpo"), task)
    items = task.train_items[:args.problems]
    task.score(items[:1], [["", ""]])   # start the sandbox pool outside the timings
    busy_program = BUSY_PROGRAM.format(seconds=args.busy_ms / 1000)

    def score_with_work(batch_items, joints):
        """The task's reward, then one busy sandbox program per joint action (all on the pool's workers)."""
        scores = task.score(batch_items, joints)
        if args.busy_ms:
            default_sandbox().run_many([{"program": busy_program, "tests": BUSY_TESTS, "entry_point": "busy"}
                                        for _ in joints], timeout_s=60)
        return scores
    print(f"{model}, {len(items)} problems x (1 + 4 nodes), 2 agents, G=4, {args.max_new_tokens} new tokens, "
          f"{args.threads} torch thread(s), {os.cpu_count()} CPUs, {args.busy_ms} ms of extra sandbox work per joint "
          f"action")
    print(f"{'mode':<18} {'s/problem':>9} {'generate s':>10} {'score s':>8} {'overlap s':>9}")
    rewards = {}
    for name, nodes, pipeline in MODES:
        config.reward.pipeline_nodes, config.reward.pipeline = nodes, pipeline
        gen, score = Timer(), Timer()
        timed_task = dataclasses.replace(task, score=score.wrap(score_with_work))
        seed_everything(config.seed)
        start = time.perf_counter()
        with torch.no_grad():
            roots = [rollout([item], timed_task, gen.wrap(algorithm.sample_agent), algorithm.rollout_settings())[0]
                     for item in items]
        wall = time.perf_counter() - start
        rewards[name] = [node.rewards for root in roots for node in iter_nodes(root)]
        print(f"{name:<18} {wall / len(items):>9.2f} {gen.seconds:>10.2f} {score.seconds:>8.2f} "
              f"{gen.seconds + score.seconds - wall:>9.2f}", flush=True)
    print(f"node, pipelined gives the rewards of node, sequential: "
          f"{rewards['node, pipelined'] == rewards['node, sequential']}")


if __name__ == "__main__":
    main()
