"""Peak memory of one update forward + backward with the memory options of issue 16 §4, on CPU.

Each configuration runs in its own process, which builds a randomly initialised Llama with SmolLM2's vocabulary
(49,152 tokens), scores a batch of completions with `completion_logprobs` and backpropagates a policy-gradient-like
loss, then reports its peak resident memory (`ru_maxrss`) above what it held before the forward (the model, its
inputs, the imports), and the seconds the forward + backward took. The batch: G completions of T tokens sharing one
P-token prompt (a GRPO sibling group, so the token-trie layout), by default G = 8, T = 256, P = 64: 2,048 predicted
tokens, whose [tokens x vocab] float32 logits alone are 403 MB.

Rows:
- `wide-vocab` (hidden 64, 2 layers): the logits dominate; unchunked vs `logprob_chunk_size` 1024 / 256, and
  bf16 autocast;
- `deeper` (hidden 256, 6 layers, chunk 256 so the logits are out of the picture): activations dominate; without and
  with gradient checkpointing.

    python bench/memory.py                   # all rows (about a minute on 2 cores)
    python bench/memory.py --tokens 512      # longer completions

The figures depend on the allocator and on other processes only through time, not through ru_maxrss; still say
whether the machine was shared when quoting the seconds.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

VOCAB = 49152
SHAPES = {"wide-vocab": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=2),
          "deeper": dict(hidden_size=256, intermediate_size=704, num_hidden_layers=6, num_attention_heads=4,
                         num_key_value_heads=2)}
ROWS = [("wide-vocab", None, False, "none"), ("wide-vocab", 1024, False, "none"), ("wide-vocab", 256, False, "none"),
        ("wide-vocab", None, False, "bf16"), ("wide-vocab", 256, False, "bf16"),
        ("deeper", 256, False, "none"), ("deeper", 256, True, "none")]


def peak_mb() -> float:
    """Return this process's peak resident memory so far, in MB (Linux reports ru_maxrss in KB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_one(shape: str, chunk: int | None, checkpointing: bool, autocast: str, group: int, tokens: int,
            prompt: int) -> dict:
    """Build the model, run one forward + backward; return the figures (called in a child process)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from cooprl.models.logprobs import completion_logprobs
    from cooprl.models.loading import set_memory_options

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, max_position_embeddings=4096, tie_word_embeddings=True,
                                         **SHAPES[shape]))
    model.config._attn_implementation = "sdpa"
    set_memory_options(model, logprob_chunk_size=chunk, gradient_checkpointing=checkpointing, autocast=autocast)
    model.train()
    gen = torch.Generator().manual_seed(1)
    shared = torch.randint(5, VOCAB, (prompt,), generator=gen)
    prompts = [shared] * group
    completions = [torch.randint(5, VOCAB, (tokens,), generator=gen) for _ in range(group)]
    advantages = torch.linspace(-1, 1, group)
    # warm-up on a small batch: the first call's one-off allocations (kernels, thread pools) are not the batch's
    completion_logprobs(model, prompts[:2], [c[:8] for c in completions[:2]], 0)[0].sum().backward()
    model.zero_grad(set_to_none=True)
    before = peak_mb()
    start = time.perf_counter()
    logps, _ = completion_logprobs(model, prompts, completions, 0)
    (-(logps.sum(-1) * advantages).sum()).backward()
    seconds = time.perf_counter() - start
    return {"shape": shape, "chunk": chunk, "checkpointing": checkpointing, "autocast": autocast,
            "peak_above_start_mb": peak_mb() - before, "seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--group", type=int, default=8, help="completions sharing the prompt (G)")
    parser.add_argument("--tokens", type=int, default=256, help="tokens per completion (T)")
    parser.add_argument("--prompt", type=int, default=64, help="prompt tokens (P)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        shape, chunk, checkpointing, autocast = json.loads(args.child)
        print(json.dumps(run_one(shape, chunk, checkpointing, autocast, args.group, args.tokens, args.prompt)))
        return
    logits_mb = args.group * args.tokens * VOCAB * 4 / 1e6
    print(f"batch: G={args.group} completions x T={args.tokens} tokens, shared {args.prompt}-token prompt, vocab "
          f"{VOCAB}: the whole batch's float32 logits are {logits_mb:.0f} MB")
    print(f"{'model':<11} {'chunk':>6} {'grad ckpt':>9} {'autocast':>8} {'peak above start (MB)':>22} "
          f"{'fwd+bwd (s)':>11}")
    for row in ROWS:
        out = subprocess.run([sys.executable, __file__, "--group", str(args.group), "--tokens", str(args.tokens),
                              "--prompt", str(args.prompt), "--child", json.dumps(row)],
                             capture_output=True, text=True, check=True, cwd=ROOT)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{r['shape']:<11} {str(r['chunk'] or '-'):>6} {str(r['checkpointing']).lower():>9} {r['autocast']:>8} "
              f"{r['peak_above_start_mb']:>22.0f} {r['seconds']:>11.2f}", flush=True)


if __name__ == "__main__":
    main()
