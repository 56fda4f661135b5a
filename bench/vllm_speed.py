"""Sampling speed of the two generation backends on this machine: the project's HFGenerator and VLLMGenerator
(vLLM's CPU build here) sample the same coop prompts (4 prompts x 4 samples x 64 new tokens, temperature 0.8,
top-p 0.95, no stop strings) with the embedded SmolLM2-135M-Instruct; prints tokens/s of the first call and of warm
calls. One backend per process, the thread count from OMP_NUM_THREADS:

    OMP_NUM_THREADS=1 VLLM_CPU_CI_ENV=1 VLLM_CPU_KVCACHE_SPACE=1 .venv-vllm/bin/python bench/vllm_speed.py vllm float32
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from cooprl.models.loading import SMOLLM2, load_causal_lm, load_tokenizer, resolve_model_path  # noqa: E402
from cooprl.rollout.generation import HFGenerator, SamplingParams  # noqa: E402
from envs.code_generation.data import problem_from_record  # noqa: E402
from envs.code_generation.prompts import main_prompt  # noqa: E402


def main(backend: str, dtype: str, reps: int = 2) -> None:
    threads = int(os.environ.get("OMP_NUM_THREADS", "1"))
    torch.set_num_threads(threads)
    folder = resolve_model_path(SMOLLM2)
    model, tokenizer = load_causal_lm(folder, device="cpu", torch_dtype=dtype), load_tokenizer(folder)
    lines = (Path(__file__).resolve().parents[1] / "envs/code_generation/data/coop.jsonl").read_text().splitlines()[:4]
    prompts = [main_prompt(problem_from_record(json.loads(line), "coop")) for line in lines]
    params = SamplingParams(max_new_tokens=64, temperature=0.8, top_p=0.95)
    start = time.perf_counter()
    if backend == "vllm":
        from cooprl.rollout.vllm_engines import EngineOptions
        from cooprl.rollout.vllm_generation import VLLMGenerator
        from cooprl.rollout.vllm_platform import check_vllm_backend
        generator = VLLMGenerator(model, tokenizer,
                                  EngineOptions(model_path=folder, max_prompt_tokens=448, max_model_len=512),
                                  vllm_module=check_vllm_backend("cpu"))
    else:
        generator = HFGenerator(model, tokenizer, max_prompt_tokens=448)
    built = time.perf_counter() - start
    rates = []
    for rep in range(reps + 1):
        torch.manual_seed(rep)
        start = time.perf_counter()
        samples = generator.sample(prompts, 4, params)
        tokens = sum(len(c.completion_ids) for per_prompt in samples for c in per_prompt)
        rates.append(tokens / (time.perf_counter() - start))
    warm = ", ".join(f"{r:.1f}" for r in rates[1:])
    print(f"{backend} {dtype} threads={threads}: build {built:.1f} s, first call {rates[0]:.1f} tok/s, "
          f"warm {warm} tok/s; load average {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
