"""The memory plan's update term against what one update really allocates: builds a randomly initialised model of a
shipped shape (no weights, no network), scores a MAGRPO node batch (2 prompts x G completions, the token trie) with
`completion_logprobs`, backpropagates, and compares the peak allocation above the weights with the plan's gradients +
activations + log-softmax for the same forward (cooprl.rollout.memory_plan).

    python bench/memory_plan_check.py --device cuda                       # Qwen2.5-Coder-3B's shape, bf16
    python bench/memory_plan_check.py --device cuda --gradient-checkpointing --chunk 256
    python bench/memory_plan_check.py --model offline:tiny-random --device cpu --prompt 64 --new 32   # a smoke run

On CUDA the peak is `torch.cuda.max_memory_allocated`; on the CPU nothing measures it (the line says n/a): the CPU
figure is the saved-tensor walk of tests/cooprl/rollout/test_memory_plan.py. Last line:
`memory plan check (<device>, <model>): forward T tokens, K scored: planned X GiB (activations A, log-softmax L,
gradients G), measured Y GiB, measured/planned R`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from types import SimpleNamespace

import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from cooprl.models.loading import set_memory_options  # noqa: E402
from cooprl.models.logprobs import completion_logprobs  # noqa: E402
from cooprl.rollout import memory_plan, vllm_memory  # noqa: E402

GIB = 1 << 30


def main(argv: list[str] | None = None) -> str:
    """Run the check as the command line says; print and return its last line."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="Qwen/Qwen2.5-Coder-3B", help="a shipped shape or a folder with config.json")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--prompts", type=int, default=2, help="distinct prompts (nodes) in the forward")
    parser.add_argument("--generations", type=int, default=4, help="completions per prompt (G)")
    parser.add_argument("--prompt", type=int, default=1792, help="tokens per prompt")
    parser.add_argument("--new", type=int, default=256, help="tokens per completion")
    parser.add_argument("--gradient-checkpointing", action="store_true")
    parser.add_argument("--chunk", type=int, default=None, help="logprob_chunk_size")
    args = parser.parse_args(argv)
    from transformers import AutoModelForCausalLM
    device = torch.device(args.device)
    dtype = torch.bfloat16
    torch.manual_seed(0)
    config = vllm_memory.model_config(args.model, offline=True)
    with device:
        model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", dtype=dtype).train()
    set_memory_options(model, logprob_chunk_size=args.chunk, gradient_checkpointing=args.gradient_checkpointing)
    vocab = config.get_text_config().vocab_size
    prompts = [torch.randint(0, vocab, (args.prompt,)) for _ in range(args.prompts)]
    completions = [torch.randint(0, vocab, (args.new,)) for _ in range(args.prompts * args.generations)]
    batch_prompts = [p for p in prompts for _ in range(args.generations)]
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    logps, mask = completion_logprobs(model, batch_prompts, completions, 0)
    (-(logps * mask).sum() / mask.sum()).backward()
    measured = (torch.cuda.max_memory_allocated() - before) if cuda else None

    shape = vllm_memory.model_shape(args.model, offline=True)
    length = args.prompt + args.new
    forward = memory_plan._forward(len(completions), args.prompts, args.prompt, args.new)
    model_cfg = SimpleNamespace(max_length=length, gradient_checkpointing=args.gradient_checkpointing)
    activations = memory_plan.activation_bytes(shape, dtype, forward, model_cfg, args.new)
    logits = memory_plan.logits_bytes(shape, dtype, forward, args.chunk)
    gradients = vllm_memory.trained_bytes(shape, dtype, lora=False)
    planned = activations + logits + gradients
    seen = "n/a" if measured is None else f"{measured / GIB:.2f} GiB"
    ratio = "n/a" if measured is None else f"{measured / planned:.2f}"
    line = (f"memory plan check ({device.type}, {args.model}): forward {forward.tokens} tokens, {forward.kept} scored: "
            f"planned {planned / GIB:.2f} GiB (activations {activations / GIB:.2f}, log-softmax {logits / GIB:.2f}, "
            f"gradients {gradients / GIB:.2f}), measured {seen}, measured/planned {ratio}")
    print(line)
    return line


if __name__ == "__main__":
    main()
