#!/usr/bin/env bash
# One prepared check for a lent GPU (issue 16 §5); prints every figure. The stages' limits add up to 475 s, so it
# finishes in under 8 minutes even when a stage hangs.
#
#   bash bench/gpu_check.sh                 # PY=/path/to/python to pick the interpreter (default .venv/bin/python)
#
# No download: the model is a randomly initialised Qwen2.5-0.5B-shaped Qwen2 (built from a Qwen2Config, bf16) with the
# embedded tokenizer of offline:tiny-random, written once to $WORK. Stages (each under its own time limit, a failed
# stage prints its error and the next one runs):
#   1. the machine: GPUs, torch, transformers, vLLM versions
#   2. HF generate tokens/s (cooprl's HFGenerator: 8 prompts x 8 samples x 128 new tokens, bf16)
#   3. vLLM tokens/s on the same prompts (cooprl's VLLMGenerator), and the time of one weight push
#   4. one bf16 MAGRPO step (2 agents, G=4, 64 new tokens, update_schedule items), the agents on cuda:0 and cuda:1
#      with parallel_training mp when there are two GPUs, else both on cuda:0; its seconds and each GPU's peak memory
#   5. one bf16 GRPO step sampled by vLLM with the options no GPU has run yet: LoRA adapters synced as LoRA
#      requests (vllm_weight_sync lora), the engine asleep during the update (vllm_sleep), the importance
#      correction against vLLM's log-probs (vllm_importance_cap); its seconds, the weights' mean/max, peak memory
set -u
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
WORK=${WORK:-/tmp/cooprl_gpu_check}
mkdir -p "$WORK"
export COOPRL_GPU_CHECK_WORK="$WORK" TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
START=$(date +%s)

stage() {   # stage NAME SECONDS: run the Python on stdin under a time limit
    local name=$1 limit=$2
    echo "=== $name (limit ${limit}s, at $(( $(date +%s) - START ))s)"
    timeout "$limit" "$PY" - || echo "!!! $name failed or timed out (status $?)"
}

stage "machine" 30 <<'EOF'
import importlib, torch, transformers
print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)
print("gpus", torch.cuda.device_count(), [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())])
try:
    print("vllm", importlib.import_module("vllm").__version__)
except Exception as err:
    print("vllm not importable:", err)
EOF

stage "build the random Qwen2.5-0.5B-shaped model" 60 <<'EOF'
import os, shutil, torch
from pathlib import Path
from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM
from cooprl.models import TINY_RANDOM, resolve_model_path
out = Path(os.environ["COOPRL_GPU_CHECK_WORK"]) / "qwen2.5-0.5b-random"
if not (out / "config.json").exists():
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(TINY_RANDOM))
    # Qwen2.5-0.5B's shape (its config.json), the embedded tokenizer's ids fit in its vocabulary
    config = Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                         num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768,
                         rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True, torch_dtype="bfloat16",
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).to(torch.bfloat16).save_pretrained(out)
    tokenizer.save_pretrained(out)
print("model", out, f"{sum(f.stat().st_size for f in out.iterdir()) / 1e9:.2f} GB on disk")
EOF

cat > "$WORK/common.py" <<'EOF'
import os, time, torch
from pathlib import Path
MODEL = str(Path(os.environ["COOPRL_GPU_CHECK_WORK"]) / "qwen2.5-0.5b-random")
PROMPTS = [f"def function_{i}(x):\n    \"\"\"Return x times {i} plus the number of digits of x.\"\"\"\n" for i in range(8)]
SAMPLES, NEW_TOKENS = 8, 128

def load():
    from cooprl.models import load_causal_lm, load_tokenizer
    return load_causal_lm(MODEL, torch_dtype="bfloat16", device="cuda:0"), load_tokenizer(MODEL)

def params():
    from cooprl.generation import SamplingParams
    # a random model says EOS at random: tokens/s counts the tokens each sample actually ran
    return SamplingParams(max_new_tokens=NEW_TOKENS, temperature=1.0, top_p=1.0, top_k=0)

def rate(name, sample):
    sample(PROMPTS[:2], 2, params())    # warm-up (CUDA kernels, graphs)
    torch.cuda.synchronize(); t = time.perf_counter()
    out = sample(PROMPTS, SAMPLES, params())
    torch.cuda.synchronize(); seconds = time.perf_counter() - t
    tokens = sum(len(c.completion_ids) for group in out for c in group)
    print(f"{name}: {tokens} tokens in {seconds:.2f} s = {tokens / seconds:.0f} tokens/s "
          f"({len(PROMPTS)} prompts x {SAMPLES} samples, up to {NEW_TOKENS} new tokens, bf16)")
    print(f"{name} peak memory: {torch.cuda.max_memory_allocated(0) / 2**30:.2f} GiB")
EOF

stage "HF generate tokens/s" 70 <<'EOF'
import sys, os; sys.path.insert(0, os.environ["COOPRL_GPU_CHECK_WORK"])
from common import load, rate
from cooprl.generation import HFGenerator
model, tokenizer = load()
rate("hf_generate", HFGenerator(model, tokenizer, max_prompt_tokens=512).sample)
EOF

stage "vLLM tokens/s and one weight push" 115 <<'EOF'
import sys, os, time; sys.path.insert(0, os.environ["COOPRL_GPU_CHECK_WORK"])
import torch
from common import MODEL, load, rate
from cooprl.vllm_generation import VLLMGenerator
model, tokenizer = load()
t = time.perf_counter()
generator = VLLMGenerator(model, tokenizer, model_path=MODEL, max_prompt_tokens=512, max_model_len=1024,
                          gpu_memory_utilization=0.3, seed=0)
print(f"vllm engine start: {time.perf_counter() - t:.1f} s")
rate("vllm", generator.sample)
with torch.no_grad():   # a changed weight, then the sync the next sample makes (the path after every optimizer step)
    next(model.parameters()).add_(1e-3)
generator.mark_stale()
t = time.perf_counter()
generator.sample(["def f(x):"], 1, __import__("common").params())
print(f"vllm weight push + one short sample: {time.perf_counter() - t:.2f} s")
EOF

stage "one bf16 MAGRPO step, 2 agents" 100 <<'EOF'
import sys, os, time; sys.path.insert(0, os.environ["COOPRL_GPU_CHECK_WORK"])
import torch
from common import MODEL, PROMPTS
from cooprl.config import load_config
from cooprl.task import Score, Task
from cooprl.trainers.magrpo import build_magrpo
two = torch.cuda.device_count() >= 2
devices = "[cuda:0, cuda:1]" if two else "cuda:0"
config = load_config(None, [f"agent_model.name={MODEL}", "agent_model.torch_dtype=bfloat16", "wandb.mode=disabled",
                            f"magrpo.agent_devices={devices}", f"magrpo.parallel_training={'mp' if two else 'none'}",
                            "magrpo.num_turns=1", "magrpo.num_generations=4", "magrpo.max_new_tokens=64",
                            "magrpo.update_schedule=items", "magrpo.rollout_buffer_size=1",
                            "agent_model.temperature=1.0", "agent_model.top_p=1.0"])
task = Task(name="check", num_agents=2, train_items=PROMPTS, eval_items=[],
            first_prompts=lambda item: [item, item + "    # helper\n"],
            score=lambda items, joints: [Score(sum(t.count("x") for t in joint) / 10) for joint in joints],
            next_prompts=lambda item, histories, joint, score: [h[-1][0] for h in histories], max_reward=1.0)
algorithm = build_magrpo(config, "magrpo", task)
print("agents on", [str(next(m.parameters()).device) for m in algorithm.models], "mp" if two else "one device")
algorithm.train_step(PROMPTS[0], 1)   # warm-up
for d in range(torch.cuda.device_count()):
    torch.cuda.reset_peak_memory_stats(d)
torch.cuda.synchronize(); t = time.perf_counter()
metrics = algorithm.train_step(PROMPTS[1], 2)
for d in range(torch.cuda.device_count()):
    torch.cuda.synchronize(d)
print(f"magrpo bf16 step (2 agents, G=4, 64 new tokens): {time.perf_counter() - t:.2f} s, "
      f"loss {metrics.get('agent_0/loss')}, {metrics.get('agent_1/loss')}")
for d in range(torch.cuda.device_count()):
    print(f"magrpo step peak memory cuda:{d}: {torch.cuda.max_memory_allocated(d) / 2**30:.2f} GiB")
EOF

stage "one bf16 GRPO step on vLLM: LoRA requests, sleep, importance correction" 100 <<'EOF'
import sys, os, time; sys.path.insert(0, os.environ["COOPRL_GPU_CHECK_WORK"])
import torch
from common import MODEL, PROMPTS
from cooprl.config import load_config
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
            score=lambda items, joints: [Score(sum(t.count("x") for t in joint) / 10) for joint in joints],
            next_prompts=lambda item, histories, joint, score: [h[-1][0] for h in histories], max_reward=1.0)
t = time.perf_counter()
algorithm = build_magrpo(config, "grpo", task)
print(f"grpo on vLLM (lora sync, sleep): built in {time.perf_counter() - t:.1f} s")
algorithm.train_step(PROMPTS[0], 1)   # warm-up, and the first adapter version
torch.cuda.reset_peak_memory_stats(0)
torch.cuda.synchronize(); t = time.perf_counter()
metrics = algorithm.train_step(PROMPTS[1], 2)   # samples adapter version 2 after the wake-up
torch.cuda.synchronize()
print(f"grpo vLLM step (G=4, 64 new tokens): {time.perf_counter() - t:.2f} s, loss {metrics.get('agent_0/loss')}, "
      f"is_weight_mean {metrics.get('agent_0/is_weight_mean')}, is_weight_max {metrics.get('agent_0/is_weight_max')}")
print(f"grpo vLLM step peak memory cuda:0 (torch's allocations; vLLM's pool apart): "
      f"{torch.cuda.max_memory_allocated(0) / 2**30:.2f} GiB")
EOF

echo "=== done in $(( $(date +%s) - START ))s"
