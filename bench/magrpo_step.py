"""Benchmark: one MAGRPO / GRPO training step per problem, cooprl against its peers, each in its own process.

Sides (fixed settings in bench/_common.py: embedded SmolLM2-135M, CPU, float32, G=4, 64 new tokens,
temperature 0.6, top_p 0.6, top_k 50, lr 2e-5, the first 4 HumanEval problems, the same pure-Python format
reward, no early termination, no evaluation, no logging backends):
  cooprl_magrpo  2 agents, 2 turns (1 + G nodes per problem), the `plain` transition
  comlrl_magrpo  the same with comlrl==1.4.3's MAGRPOTrainer (timed by wrapping its methods from the outside)
  cooprl_grpo    1 agent, 1 turn
  trl_grpo       the same with TRL's GRPOTrainer (per_device_train_batch_size=4, num_generations=4, beta=0)
The cooprl processes also replay their generation calls as bare batched `generate` calls (tokenize with
left padding, generate, decode) to give the overhead ratio of cooprl's sampler.

    python bench/magrpo_step.py                 # everything (comlrl takes tens of minutes on CPU)
    python bench/magrpo_step.py --quick         # 1 problem per side
    python bench/magrpo_step.py --only cooprl   # one side (cooprl = cooprl_magrpo + cooprl_grpo)
    python bench/magrpo_step.py --report        # print the comparison from saved results only
    python bench/magrpo_step.py --only cooprl_magrpo --schedule items --results runs/bench_items
                                                # cooprl with the items schedule (default: nodes, the config's)

Each side writes <results>/<side>.json; the comparison is printed from those files, and its last three lines
are `speedup_vs_comlrl`, `update_speedup_vs_comlrl` and `speed_vs_trl_grpo` (cooprl rate / peer rate).
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

SIDES = ("cooprl_magrpo", "comlrl_magrpo", "cooprl_grpo", "trl_grpo")
GROUPS = {"cooprl": ("cooprl_magrpo", "cooprl_grpo"), "comlrl": ("comlrl_magrpo",), "trl": ("trl_grpo",)}
DEFAULT_RESULTS = C.ROOT / "runs" / "bench_magrpo_step"


# ============================================================================================ cooprl
def run_cooprl(num_agents: int, num_turns: int, n_problems: int, bare: bool = True, schedule: str = "nodes") -> dict:
    import torch

    from cooprl.models import logprobs
    from cooprl.config import Run, load_config
    from cooprl.rollout.generation import HFGenerator
    from cooprl.task import Score, Task
    from cooprl.trainers import magrpo as magrpo_mod

    C.seed_all()
    timers = C.Timers()
    calls: list[tuple[HFGenerator, list[str], int, object]] = []
    original_sample = HFGenerator.sample

    current = {"problem": 0}

    def sample(self, prompts, num_samples, params):
        t, t_cpu = time.perf_counter(), time.process_time()
        try:
            return original_sample(self, prompts, num_samples, params)
        finally:
            seconds, cpu_seconds = time.perf_counter() - t, time.process_time() - t_cpu
            timers.add("generation", seconds, cpu_seconds)
            calls.append((self, list(prompts), num_samples, params, current["problem"], seconds, cpu_seconds))

    HFGenerator.sample = sample
    # The update's forward work, counted where it is laid out: every token-trie row the update builds (its columns,
    # and the query-key pairs its trie attention computes: each token attends to its path). Under `nodes` a later
    # turn's optimizer step runs on the weights after the earlier turn's step, so its trie repeats the prompt and the
    # earlier turn's text that `items` lays out once; these counts say how much of the time ratio that explains.
    work = {"trie_tokens": 0, "attention_pairs": 0, "tries": 0}
    original_trie_init = logprobs.TokenTrie.__init__

    def counted_trie_init(self, sequences):
        original_trie_init(self, sequences)
        work["tries"] += 1
        work["trie_tokens"] += self.num_tokens
        for seg, ancestors in self.segments:
            n = len(seg.tokens)
            work["attention_pairs"] += n * sum(len(a.tokens) for a in ancestors) + n * (n + 1) // 2

    logprobs.TokenTrie.__init__ = counted_trie_init
    # one optimizer step of one agent: its policy term, the engine's step and its metrics (MAGRPO.policy_step,
    # TeamAlgorithm's; wrapped on MAGRPO, so the other trainers keep theirs)
    timers.wrap(magrpo_mod.MAGRPO, "policy_step", "update")

    items = C.problems(n_problems)

    def score(batch_items, joints):
        return [Score(C.joint_reward(list(joint))) for joint in joints]

    def next_prompts(item, histories, joint, score_):
        return [C.plain_transition(h[-1][0], h[-1][1]) for h in histories]

    task = Task(name="bench", num_agents=num_agents, train_items=items, eval_items=items,
                first_prompts=lambda item: [C.first_prompt(a, num_agents, item.prompt) for a in range(num_agents)],
                score=score, next_prompts=next_prompts, max_reward=float(num_agents),
                item_id=lambda item: item.task_id)
    trainer = "magrpo" if num_agents > 1 else "grpo"
    overrides = [
        f"agent_model.name={C.MODEL}",
        "agent_model.device=cpu",
        "agent_model.torch_dtype=float32",
        f"agent_model.temperature={C.TEMPERATURE}",
        f"agent_model.top_p={C.TOP_P}",
        f"agent_model.top_k={C.TOP_K}",
        "wandb.mode=disabled",
        f"{trainer}.num_agents={num_agents}",
        f"{trainer}.num_turns={num_turns}",
        f"{trainer}.num_generations={C.NUM_GENERATIONS}",
        f"{trainer}.max_new_tokens={C.MAX_NEW_TOKENS}",
        f"{trainer}.learning_rate={C.LEARNING_RATE}",
        f"{trainer}.early_termination_threshold=null",
        f"{trainer}.discount=1.0",
        f"{trainer}.update_schedule={schedule}",
        # items: one update per problem; nodes: one update per problem's nodes (as the comlrl side), turn by
        # turn, one optimizer step per turn
        f"{trainer}.rollout_buffer_size={1 if schedule == 'items' else 1 + C.NUM_GENERATIONS * (num_turns - 1)}",
        *([f"{trainer}.train_batch_size={1 + C.NUM_GENERATIONS * (num_turns - 1)}"] if schedule == "nodes" else []),
        f"{trainer}.advantage_normalization=false",
    ]
    config = C_load_config(load_config, overrides)
    t0 = time.perf_counter()
    algorithm = magrpo_mod.build_magrpo(Run.of(config, trainer), task)
    setup_s = time.perf_counter() - t0

    per_problem = []
    t_train = time.perf_counter()
    for step, item in enumerate(items):
        current["problem"] = step
        t = time.perf_counter()
        algorithm.train_step(item, step)
        per_problem.append(time.perf_counter() - t)
    total = time.perf_counter() - t_train

    result = {"side": f"cooprl_{trainer}", "update_schedule": schedule, "num_agents": num_agents,
              "num_turns": num_turns,
              "problems": n_problems, "setup_s": setup_s, "total_s": total, "per_problem_s": per_problem,
              "generation_s": timers.get("generation"), "generation_calls": timers.calls.get("generation", 0),
              "update_s": timers.get("update"), "generation_cpu_s": timers.get_cpu("generation"),
              "update_cpu_s": timers.get_cpu("update"), "torch_threads": torch.get_num_threads(), "update_work": work}
    if bare:
        # Replay only the last problem's calls (warm, and it keeps the run short); compare on those calls.
        last = [c for c in calls if c[4] == len(items) - 1]
        result["bare_compared_generation_s"] = sum(c[5] for c in last)
        result["bare_compared_generation_cpu_s"] = sum(c[6] for c in last)
        result["bare_compared_calls"] = len(last)
        result.update(bare_generate(last))
    return result


def C_load_config(load_config, overrides):
    return load_config(None, overrides)


def bare_generate(calls) -> dict:
    """Replay the recorded sampling calls as bare batched `generate` calls; return their time."""
    import torch

    seconds = cpu_seconds = 0.0
    tokens = 0
    for generator, prompts, n, params, *_ in calls:
        tok, model = generator.tokenizer, generator.model
        t, t_cpu = time.perf_counter(), time.process_time()
        tok.padding_side = "left"
        enc = tok(prompts, return_tensors="pt", padding=True)
        with torch.no_grad():
            out = model.generate(**enc, do_sample=True, max_new_tokens=params.max_new_tokens,
                                 num_return_sequences=n, temperature=params.temperature, top_p=params.top_p,
                                 top_k=params.top_k or 0, pad_token_id=tok.pad_token_id)
        tok.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        seconds += time.perf_counter() - t
        cpu_seconds += time.process_time() - t_cpu
        tokens += out.shape[0] * (out.shape[1] - enc["input_ids"].shape[1])
    return {"bare_generate_s": seconds, "bare_generate_cpu_s": cpu_seconds, "bare_generate_tokens": tokens}


# ============================================================================================ comlrl
def run_comlrl(n_problems: int) -> dict:
    import torch
    from datasets import Dataset

    from comlrl.trainers.reinforce import MAGRPOConfig, MAGRPOTrainer

    C.seed_all()
    num_agents, num_turns, G = 2, 2, C.NUM_GENERATIONS
    timers = C.Timers()
    per_problem: list[float] = []
    # Timers wrapped around comlrl's own methods from the outside; its code is not changed.
    timers.wrap(MAGRPOTrainer, "_generate_completions", "generation")
    timers.wrap(MAGRPOTrainer, "_update_from_samples", "update")
    original_step = MAGRPOTrainer._train_step_returns

    def train_step(self, *args, **kwargs):
        t = time.perf_counter()
        try:
            return original_step(self, *args, **kwargs)
        finally:
            per_problem.append(time.perf_counter() - t)

    MAGRPOTrainer._train_step_returns = train_step

    items = C.problems(n_problems)
    dataset = Dataset.from_list([{"task_id": p.task_id, "prompt": p.prompt} for p in items])

    def formatter(agent: int):
        def fmt(item, external_prompts=None):
            if external_prompts is not None:
                return external_prompts
            return C.first_prompt(agent, num_agents, item["prompt"])
        return fmt

    def reward(completions_0, completions_1):
        return [C.joint_reward([completions_0[0], completions_1[0]])]

    def transition(prompt, agent_completions, num_agents, prompt_history_per_agent,
                   response_history_per_agent, **_):
        return [C.plain_transition(prompt_history_per_agent[a][-1], response_history_per_agent[a][-1])
                for a in range(num_agents)]

    nodes_per_problem = 1 + G if num_turns == 2 else 1
    args = MAGRPOConfig(num_train_epochs=1, agent_learning_rate=C.LEARNING_RATE, num_agents=num_agents,
                        num_generations=G, max_new_tokens=C.MAX_NEW_TOKENS, temperature=C.TEMPERATURE,
                        top_p=C.TOP_P, top_k=C.TOP_K, num_turns=num_turns, discount=1.0, joint_mode="aligned",
                        early_termination_threshold=None, eval_interval=0, eval_num_samples=0,
                        rollout_buffer_size=nodes_per_problem, advantage_normalization=False,
                        advantage_mode="mean", agent_devices="cpu")
    t0 = time.perf_counter()
    trainer = MAGRPOTrainer(agent_model=C.model_path(), num_agents=num_agents,
                            model_config={"torch_dtype": torch.float32}, train_dataset=dataset,
                            reward_func=reward, formatters=[formatter(a) for a in range(num_agents)],
                            external_transition=transition, wandb_config=None, args=args)
    setup_s = time.perf_counter() - t0
    t = time.perf_counter()
    trainer.train()
    total = time.perf_counter() - t
    return {"side": "comlrl_magrpo", "num_agents": num_agents, "num_turns": num_turns, "problems": n_problems,
            "setup_s": setup_s, "total_s": total, "per_problem_s": per_problem,
            "generation_s": timers.get("generation"), "generation_calls": timers.calls.get("generation", 0),
            "update_s": timers.get("update"), "generation_cpu_s": timers.get_cpu("generation"),
            "update_cpu_s": timers.get_cpu("update"), "torch_threads": torch.get_num_threads()}


# ============================================================================================ TRL
def run_trl(n_problems: int, results_dir: Path) -> dict:
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    C.seed_all()
    timers = C.Timers()
    timers.wrap(GRPOTrainer, "_generate_single_turn", "generation")
    timers.wrap(GRPOTrainer, "_generate_and_score_completions", "rollout")
    items = C.problems(n_problems)
    dataset = Dataset.from_list([{"prompt": C.first_prompt(0, 1, p.prompt)} for p in items])

    def reward(completions, **_):
        return [C.format_score(c) for c in completions]

    per_problem: list[float] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            self.t = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            per_problem.append(time.perf_counter() - self.t)

    args = GRPOConfig(output_dir=str(results_dir / "trl_out"), per_device_train_batch_size=C.NUM_GENERATIONS,
                      num_generations=C.NUM_GENERATIONS, beta=0.0, report_to="none", use_cpu=True,
                      max_completion_length=C.MAX_NEW_TOKENS, temperature=C.TEMPERATURE, top_p=C.TOP_P,
                      top_k=C.TOP_K, learning_rate=C.LEARNING_RATE, num_train_epochs=1, max_steps=n_problems,
                      shuffle_dataset=False, save_strategy="no", logging_steps=1, disable_tqdm=True,
                      bf16=False, fp16=False, seed=C.SEED)
    t0 = time.perf_counter()
    trainer = GRPOTrainer(model=C.model_path(), reward_funcs=reward, args=args, train_dataset=dataset,
                          callbacks=[StepTimer()])
    setup_s = time.perf_counter() - t0
    t = time.perf_counter()
    trainer.train()
    total = time.perf_counter() - t
    step_total = sum(per_problem)
    return {"side": "trl_grpo", "num_agents": 1, "num_turns": 1, "problems": n_problems, "setup_s": setup_s,
            "total_s": total, "per_problem_s": per_problem, "generation_s": timers.get("generation"),
            "generation_calls": timers.calls.get("generation", 0), "rollout_s": timers.get("rollout"),
            # update = the training steps minus the rollout (generation + reward + bookkeeping)
            "update_s": step_total - timers.get("rollout"), "torch_threads": torch.get_num_threads()}


# ============================================================================================ driver
def child(side: str, n_problems: int, out: Path, threads: int, bare: bool = True, schedule: str = "nodes") -> None:
    import torch
    torch.set_num_threads(threads)
    if side == "cooprl_magrpo":
        result = run_cooprl(2, 2, n_problems, bare, schedule)
    elif side == "cooprl_grpo":
        result = run_cooprl(1, 1, n_problems, bare, schedule)
    elif side == "comlrl_magrpo":
        result = run_comlrl(n_problems)
    elif side == "trl_grpo":
        result = run_trl(n_problems, out.parent)
    else:
        raise SystemExit(f"unknown side {side}")
    C.write_result(out, result)


def load(results: Path, side: str) -> dict | None:
    path = results / f"{side}.json"
    return json.loads(path.read_text()) if path.exists() else None


def rate(r: dict) -> float:
    """Seconds per problem, end to end (training steps only; model loading excluded)."""
    return r["total_s"] / max(r["problems"], 1)


def report(results: Path) -> None:
    data = {side: load(results, side) for side in SIDES}
    print(f"results: {results}")
    print(f"{'side':15s} {'agents':>6s} {'turns':>5s} {'probs':>5s} {'s/problem':>10s} {'gen s':>8s} "
          f"{'update s':>9s} {'setup s':>8s} {'peak GB':>8s}  per problem (s)")
    for side, r in data.items():
        if r is None:
            print(f"{side:15s} (no result)")
            continue
        per = ", ".join(f"{s:.1f}" for s in r["per_problem_s"])
        print(f"{side:15s} {r['num_agents']:6d} {r['num_turns']:5d} {r['problems']:5d} {rate(r):10.1f} "
              f"{r['generation_s']:8.1f} {r['update_s']:9.1f} {r['setup_s']:8.1f} {r['peak_rss_gb']:8.2f}  [{per}]")
    for side, r in data.items():
        if r and "update_cpu_s" in r:
            print(f"{side} CPU seconds (this process, steadier than wall time on a shared machine): "
                  f"generation {r['generation_cpu_s']:.1f}, update {r['update_cpu_s']:.1f}")
        if r and r.get("update_work"):
            w = r["update_work"]
            print(f"{side} update work ({r.get('update_schedule')}): {w['tries']} trie forwards, {w['trie_tokens']} "
                  f"tokens, {w['attention_pairs']} attention pairs")
    for side in ("cooprl_magrpo", "cooprl_grpo"):
        r = data[side]
        if r and r.get("bare_generate_s"):
            ours_s = r.get("bare_compared_generation_s", r["generation_s"])
            print(f"{side} generation / bare batched generate (last problem's {r.get('bare_compared_calls', '?')} "
                  f"calls replayed): {ours_s:.1f} / {r['bare_generate_s']:.1f} s = "
                  f"{ours_s / r['bare_generate_s']:.2f}x")
            if r.get("bare_generate_cpu_s"):
                ours_cpu = r["bare_compared_generation_cpu_s"]
                print(f"{side} the same in CPU seconds: {ours_cpu:.1f} / {r['bare_generate_cpu_s']:.1f} s = "
                      f"{ours_cpu / r['bare_generate_cpu_s']:.2f}x")
    ours, peer = data["cooprl_magrpo"], data["comlrl_magrpo"]
    mine, trl = data["cooprl_grpo"], data["trl_grpo"]
    if ours and peer and ours["problems"] != peer["problems"]:
        print(f"note: cooprl ran {ours['problems']} problems, comlrl {peer['problems']}: ratios use per-problem means")
    na = "n/a"
    end = f"{rate(peer) / rate(ours):.2f}" if ours and peer else na
    upd = (f"{(peer['update_s'] / peer['problems']) / (ours['update_s'] / ours['problems']):.2f}"
           if ours and peer and ours["update_s"] > 0 else na)
    vs_trl = f"{rate(trl) / rate(mine):.2f}" if mine and trl else na
    print(f"speedup_vs_comlrl: {end}")
    print(f"update_speedup_vs_comlrl: {upd}")
    print(f"speed_vs_trl_grpo: {vs_trl}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=sorted(GROUPS) + list(SIDES), action="append",
                        help="run only this side (repeatable); cooprl = cooprl_magrpo + cooprl_grpo")
    parser.add_argument("--quick", action="store_true", help="1 problem per side instead of 4")
    parser.add_argument("--problems", type=int, default=None, help="number of HumanEval problems (default 4)")
    parser.add_argument("--report", action="store_true", help="only print the comparison from saved results")
    parser.add_argument("--results", type=Path, default=DEFAULT_RESULTS, help=f"results folder ({DEFAULT_RESULTS})")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads per side (default 1: on a shared 2-core machine more threads than free "
                             "cores slows generation down by an order of magnitude)")
    parser.add_argument("--no-bare", action="store_true",
                        help="skip replaying cooprl's sampling calls as bare `generate` (quicker A/B runs)")
    parser.add_argument("--schedule", choices=("items", "nodes"), default="nodes",
                        help="cooprl's magrpo.update_schedule (default nodes, every reference config's)")
    parser.add_argument("--child", choices=SIDES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    n = args.problems or (1 if args.quick else C.NUM_PROBLEMS)
    if args.child:
        child(args.child, n, args.results / f"{args.child}.json", args.threads, bare=not args.no_bare,
              schedule=args.schedule)
        return
    if not args.report:
        sides = [s for name in (args.only or list(GROUPS)) for s in GROUPS.get(name, (name,))]
        args.results.mkdir(parents=True, exist_ok=True)
        for side in sides:
            print(f"== {side}: {n} problem(s) ...", flush=True)
            t = time.perf_counter()
            env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "WANDB_MODE": "disabled",
                   "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)}
            proc = subprocess.run([sys.executable, __file__, "--child", side, "--problems", str(n),
                                   "--results", str(args.results), "--threads", str(args.threads),
                                   "--schedule", args.schedule, *(["--no-bare"] if args.no_bare else [])], env=env)
            print(f"== {side}: exit {proc.returncode} after {time.perf_counter() - t:.0f} s", flush=True)
    report(args.results)


if __name__ == "__main__":
    main()
