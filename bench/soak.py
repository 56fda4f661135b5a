"""A long run stays flat: one MAGRPO run of many steps, its resources sampled from the outside.

The run is the command line's (`train_magrpo.py`) on the CPU demo config (`configs/magrpo_che_cpu.yaml`: two agents,
the cooperative HumanEval set, the real code reward in the sandbox), with two turns (level feedback), an evaluation
and a checkpoint every `--every` steps. The policy is a tiny random Llama whose vocabulary is whole lines of Python
(`build_line_model`): its samples are code that compiles part of the time, so programs really run in the sandbox
(pass, fail, raise, call aux), where a random character model writes text that never compiles.

A sampler in this process reads, every `--interval` seconds:
- the trainer: resident memory (MiB), open files, threads, child processes;
- the sandbox: the trainer's descendants (workers, zygotes, programs), their open files and resident memory, and
  its scratch use: the memory charged to the sandbox's cgroups (programs' tmpfs pages included), where there are
  cgroups (root), else the host's shared memory (tmpfs; other jobs on the machine move it too);
- the run folder's size on disk (checkpoints are kept to one);
and the step the run has reached (its metrics.jsonl). After the run it fits each figure against the step by least
squares, past a warm-up (`--warmup` steps), and prints the slope per 100 steps and a verdict: flat when every slope
is within its tolerance (TOLERANCE).

    python bench/soak.py                     # 300 steps (about 30 minutes on an idle 2-core machine)
    python bench/soak.py --steps 30 --every 10 --warmup 10   # a quick check
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent

# Whole lines of Python: aux's header, continued (its prompt ends with `def aux(`) or restarted, and indented
# statements for either agent's body. Any sequence of statements is a body that compiles; a header in main's body
# ends it, and a statement in place of aux's header does not compile.
HEADERS = ["x):\n", "s):\n", "a, b=0):\n", "n):\n", "def aux(x):\n", "def aux(s):\n", "def aux(text):\n"]
LINES = ["    return 0\n", "    return 1\n", "    return x\n", "    return None\n", "    return []\n",
         "    return ''\n", "    pass\n", "    return aux(0)\n", "    return aux(x)\n", "    x = 1\n",
         "    import os\n", "    return len(str(x))\n", "    raise ValueError('no')\n", "    return [0] * 3\n"]

# Per 100 steps, past the warm-up: what counts as flat.
TOLERANCE = {"trainer_rss_mb": 8.0, "trainer_fds": 0.5, "trainer_threads": 0.5, "trainer_children": 0.5,
             "sandbox_procs": 0.5, "sandbox_fds": 0.5, "sandbox_rss_mb": 8.0, "scratch_mb": 4.0, "run_dir_mb": 2.0}


def build_line_model(folder: Path, seed: int = 0) -> Path:
    """Write a seeded random 2-layer Llama (hidden 64) whose tokens are <eos>, <unk> and the HEADERS and LINES;
    return the folder. Prompts tokenize to <unk> (no single characters in the vocabulary): every prompt looks
    the same to it, and it samples nearly uniformly over the lines."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(["<eos>", "<unk>"] + HEADERS + LINES)}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    core.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<eos>", eos_token="<eos>",
                                        unk_token="<unk>")
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                         bos_token_id=None, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                         tie_word_embeddings=True)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def train_command(model: Path, base_dir: Path, steps: int, every: int) -> list[str]:
    """Return the command line of the run (the demo config with the soak's overrides)."""
    m = "magrpo"
    return [sys.executable, str(ROOT / "train_magrpo.py"), "--config", str(ROOT / "configs" / "magrpo_che_cpu.yaml"),
            "--override", f"agent_model.name={model}", "agent_model.max_length=512", f"{m}.num_turns=2",
            f"{m}.num_generations=3", f"{m}.max_new_tokens=5", f"{m}.max_steps={steps}",
            f"{m}.num_train_epochs=1000", f"{m}.eval_interval={every}", f"{m}.eval_num_samples=2",
            "dataset.eval_split=test[:4]", f"checkpoint.checkpoint_interval={every}",
            "checkpoint.checkpoint_total_limit=1", "wandb.mode=disabled", f"output.base_dir={base_dir}",
            "output.run_name=soak", "seed=0"]


def _sandbox_cgroups(pids: list[int]) -> set[str]:
    """The memory cgroup directories of the sandbox (`cooprl-sandbox-*`) that any of `pids` is in."""
    found = set()
    for pid in pids:
        try:
            lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            _, controllers, path = line.split(":", 2)
            if "cooprl-sandbox" not in path:
                continue
            if controllers == "":
                found.add(f"/sys/fs/cgroup{path}/memory.current")
            elif "memory" in controllers.split(","):
                found.add(f"/sys/fs/cgroup/memory{path}/memory.usage_in_bytes")
    return found


def _shmem_mb() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("Shmem:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _dir_mb(path: Path) -> float:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total / 2 ** 20


def last_step(run_dir: Path) -> int | None:
    """The last step the run logged (its metrics.jsonl), or None before the first."""
    path = run_dir / "metrics.jsonl"
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - 65536))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            step = json.loads(line).get("step")
        except ValueError:
            continue
        if isinstance(step, int):
            return step
    return None


def sample(trainer: psutil.Process, run_dir: Path) -> dict[str, float]:
    """Return one sample of every figure (see the module docstring)."""
    with trainer.oneshot():
        out = {"trainer_rss_mb": trainer.memory_info().rss / 2 ** 20, "trainer_fds": trainer.num_fds(),
               "trainer_threads": trainer.num_threads(), "trainer_children": len(trainer.children())}
    # the sandbox's processes come and go (a program, a warm child replaced): the median of three reads 0.2 s
    # apart, so that one read caught between two children does not tilt a slope
    reads = []
    for i in range(3):
        if i:
            time.sleep(0.2)
        procs, fds, rss = 0, 0, 0.0
        below = trainer.children(recursive=True)
        for p in below:
            try:
                fds += p.num_fds()
                rss += p.memory_info().rss / 2 ** 20
                procs += 1
            except psutil.Error:
                pass
        reads.append((procs, fds, rss))
    procs, fds, rss = (sorted(column)[1] for column in zip(*reads))
    out.update(sandbox_procs=procs, sandbox_fds=fds, sandbox_rss_mb=rss)
    cgroups = _sandbox_cgroups([p.pid for p in below])
    if cgroups:
        total = 0
        for path in cgroups:
            try:
                total += int(Path(path).read_text())
            except (OSError, ValueError):
                pass
        out["scratch_mb"] = total / 2 ** 20
    else:
        out["scratch_mb"] = _shmem_mb()
    out["run_dir_mb"] = _dir_mb(run_dir)
    return out


def slope_per_100(steps: list[float], values: list[float]) -> float:
    """The least-squares slope of values against steps, times 100 (0 with fewer than two distinct steps)."""
    n = len(steps)
    mean_x, mean_y = sum(steps) / n, sum(values) / n
    var = sum((x - mean_x) ** 2 for x in steps)
    if var == 0:
        return 0.0
    return 100 * sum((x - mean_x) * (y - mean_y) for x, y in zip(steps, values)) / var


def report(samples: list[dict], warmup: int) -> bool:
    """Print each figure's first and last value and its slope per 100 steps past the warm-up; return True when
    every slope is within its tolerance."""
    kept = [s for s in samples if s["step"] >= warmup]
    print(f"samples: {len(samples)} ({len(kept)} past the warm-up of {warmup} steps, steps "
          f"{kept[0]['step'] if kept else '-'}..{kept[-1]['step'] if kept else '-'})")
    if len(kept) < 3:
        print("verdict: too few samples past the warm-up")
        return False
    flat = True
    for key, tolerance in TOLERANCE.items():
        slope = slope_per_100([s["step"] for s in kept], [s[key] for s in kept])
        ok = abs(slope) <= tolerance
        flat &= ok
        print(f"{key:18s} {kept[0][key]:10.1f} -> {kept[-1][key]:10.1f}   slope/100 steps {slope:+9.3f}  "
              f"(tolerance {tolerance:g}) {'flat' if ok else 'NOT FLAT'}")
    print(f"verdict: {'flat' if flat else 'NOT FLAT'}")
    return flat


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=300, help="optimizer steps of the run")
    parser.add_argument("--every", type=int, default=50, help="steps between evaluations and checkpoints")
    parser.add_argument("--warmup", type=int, default=50,
                        help="steps left out of the slopes (at least up to the first checkpoint)")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between samples")
    parser.add_argument("--out", default=None, help="folder of the run and samples.jsonl (default: a temp dir)")
    args = parser.parse_args()
    base = Path(args.out or tempfile.mkdtemp(prefix="cooprl-soak-"))
    base.mkdir(parents=True, exist_ok=True)
    model = build_line_model(base / "model")
    run_dir = base / "soak"
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "WANDB_MODE": "disabled"}
    log = open(base / "train.log", "w")
    started = time.monotonic()
    proc = subprocess.Popen(train_command(model, base, args.steps, args.every), cwd=ROOT, env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    trainer = psutil.Process(proc.pid)
    samples = []
    print(f"soak: {args.steps} steps, run folder {run_dir}, samples every {args.interval:g} s", flush=True)
    with open(base / "samples.jsonl", "w") as out:
        while proc.poll() is None:
            time.sleep(args.interval)
            step = last_step(run_dir)
            if step is None or proc.poll() is not None:
                continue
            try:
                one = {"step": step, "seconds": round(time.monotonic() - started, 1), **sample(trainer, run_dir)}
            except psutil.Error:
                continue
            samples.append(one)
            out.write(json.dumps(one) + "\n")
            out.flush()
            if len(samples) % 12 == 1:
                print(json.dumps(one), flush=True)
    print(f"the run ended with code {proc.returncode} after {time.monotonic() - started:.0f} s "
          f"(log: {base / 'train.log'})")
    # the last step's samples hold the final evaluation and the shutdown (the sandbox closed): not the steady state
    samples = [s for s in samples if s["step"] < samples[-1]["step"]] if samples else samples
    # past the warm-up and the first checkpoint (the run folder's one step up)
    flat = report(samples, max(args.warmup, args.every + 1))
    return 0 if proc.returncode == 0 and flat else 1


if __name__ == "__main__":
    sys.exit(main())
