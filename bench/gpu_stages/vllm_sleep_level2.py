"""GPU stage: a merged-sync vLLM engine samples the same ids, from the same seeds, before and after a level-2 sleep
cycle (gpu-review-3 finding 5; cooprl.rollout.vllm_generation.MERGED_SLEEP_LEVEL stays 1 until this passes).

    python bench/gpu_stages/vllm_sleep_level2.py [--device cuda|cpu] [--model NAME_OR_FOLDER] [--level 2]

The cycle is the trainer's: sample with fixed seeds; a forward with gradients (the engine goes to sleep at
`--level`, discarding its weights and KV cache at 2) and no optimizer step; sample again with the same seeds (the
engine wakes in vLLM's order for weight updates and reloads every weight). Level 2 also frees state of vLLM's that is
not a weight (vLLM #29341): if any of it is read after the wake, the ids differ. The trained model's weights must be
unchanged too. On the CPU (vLLM's CPU build has no sleep mode) the same cycle runs awake: it checks the harness only
(2026-12-06, vLLM's CPU build, a head-size-32 tiny Llama: PASS).
Prints one line, `PASS vllm_sleep_level2 ...` or `FAIL vllm_sleep_level2 ...`; exit status 0 / 1.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

PROMPTS = ["def add(a, b):\n", "def is_even(n):\n", "# reverse a string\ndef reverse(s):\n"]


def cycle(args: argparse.Namespace) -> str:
    """Run the cycle; return what differs ('' when nothing does)."""
    from cooprl.models.loading import load_causal_lm, load_tokenizer, resolve_model_path
    from cooprl.rollout import vllm_generation
    from cooprl.rollout.generation import SamplingParams
    from cooprl.rollout.vllm_engines import EngineOptions
    from cooprl.rollout.vllm_platform import check_vllm_backend
    cuda = args.device == "cuda"
    vllm_generation.MERGED_SLEEP_LEVEL = args.level
    model = load_causal_lm(args.model, device=args.device, torch_dtype="bfloat16" if cuda else "float32")
    tokenizer = load_tokenizer(args.model)
    generator = vllm_generation.VLLMGenerator(
        model, tokenizer, EngineOptions(model_path=resolve_model_path(args.model), max_prompt_tokens=64,
                                        max_model_len=256, gpu_memory_utilization=0.3, sleep=cuda, device=args.device),
        vllm_module=check_vllm_backend(args.device, sleep=cuda))
    params = SamplingParams(max_new_tokens=args.tokens, temperature=1.0)

    def sample() -> list[list[int]]:
        torch.manual_seed(1234)   # each request's seed is drawn from torch's generator
        return [c.completion_ids.tolist() for group in generator.sample(PROMPTS, 2, params) for c in group]

    before = sample()
    weights = {name: p.detach().clone() for name, p in model.named_parameters()}
    ids = torch.tensor([tokenizer("def f(x):\n    return x\n")["input_ids"]], device=args.device)
    model(input_ids=ids).logits.float().sum().backward()   # an update's forward: the engine sleeps (on CUDA)
    model.zero_grad(set_to_none=True)
    slept = generator._asleep
    after = sample()   # wakes (level 2: weights' memory, reload, KV cache) and samples with the same seeds
    problems = []
    if cuda and not slept:
        problems.append("the engine did not sleep at the update's forward")
    changed = [n for n, p in model.named_parameters() if not torch.equal(p.detach(), weights[n])]
    if changed:
        problems.append(f"{len(changed)} trained weights changed (e.g. {changed[0]})")
    differing = sum(a != b for a, b in zip(before, after, strict=True))
    if differing:
        problems.append(f"{differing} of {len(before)} completions differ after the cycle")
    return "; ".join(problems)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=("cuda", "cpu"))
    parser.add_argument("--model", default="offline:tiny-random",
                        help="a name or folder vLLM can load (its CPU build refuses tiny-random's head size 16)")
    parser.add_argument("--level", type=int, default=2, choices=(1, 2))
    parser.add_argument("--tokens", type=int, default=24)
    args = parser.parse_args()
    what = f"(device {args.device}, level {args.level if args.device == 'cuda' else 'none: awake'}, {args.model})"
    try:
        problems = cycle(args)
    except Exception as err:   # one line whatever failed: the stage's verdict, not a traceback
        first = (str(err).splitlines() or [""])[0][:300]
        print(f"FAIL vllm_sleep_level2 {what}: {type(err).__name__}: {first}")
        return 1
    print(f"{'FAIL' if problems else 'PASS'} vllm_sleep_level2 {what}: "
          f"{problems or 'the same ids before and after the cycle, weights unchanged'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
