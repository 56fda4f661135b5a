"""GPU stage: the trie attention's masked segments run as torch's lower-right causal bias where flash takes them, and
give what the bool mask gives (gpu-review-3 finding 4; cooprl.models.trie_attention.LOWER_RIGHT_FOR_MASKS).

    python bench/gpu_stages/trie_lower_right.py [--device cuda|cpu]

A two-turn trie of Qwen2.5-3B's attention shapes (16 query heads, 2 K/V heads, head size 128), bf16 on CUDA
(float32 on the CPU, where the bias is forced and torch materialises it): the forward and backward of every
segment with the kernel chosen at run time against the same with the masks as they are (K/V repeated on CUDA, the
previous path). Prints one line, `PASS trie_lower_right ...`
or `FAIL trie_lower_right ...` (the kernel chosen, the largest output and gradient differences, seconds and peak
memory of each); exit status 0 / 1. On CUDA sm80+ it fails unless "lower_right" was chosen.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def two_turn_trie() -> object:
    """Return a TokenTrie like a 2-agent, 2-turn node's: one prompt, 4 first-turn completions, 4 children each."""
    from cooprl.models.logprobs import TokenTrie
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(10, 1000, (120,), generator=gen).tolist()
    rows = []
    for first in range(4):
        turn1 = torch.randint(10, 1000, (96 + 8 * first,), generator=gen).tolist()
        feedback = torch.randint(10, 1000, (40,), generator=gen).tolist()
        for _ in range(4):
            rows.append(prompt + turn1 + feedback + torch.randint(10, 1000, (100,), generator=gen).tolist())
    return TokenTrie(rows)


def run(device: str, kernel_override: str | None) -> tuple[torch.Tensor, list[torch.Tensor], float, float, str]:
    """Return (output, [dq, dk, dv], seconds, peak GiB, the kernel used) of one trie attention forward+backward."""
    from cooprl.models import trie_attention as ta
    trie = two_turn_trie()
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    gen = torch.Generator(device=device).manual_seed(1)
    q = torch.randn(1, 16, trie.num_tokens, 128, generator=gen, device=device, dtype=dtype, requires_grad=True)
    k, v = (torch.randn(1, 2, trie.num_tokens, 128, generator=gen, device=device, dtype=dtype, requires_grad=True)
            for _ in range(2))
    chosen = ta.masked_kernel(device, True, ta._flash_takes(q, k, v, 0.0, True))
    original = ta.masked_kernel
    if kernel_override is not None:
        ta.masked_kernel = lambda *args: kernel_override
    try:
        if device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        with ta.trie_attention(torch.nn.Linear(1, 1, device=device), trie):
            out = ta.trie_attention_forward(None, q, k, v, ta.PLACEHOLDER_MASK)[0]
        out.float().square().sum().backward()
        if device == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else 0.0
    finally:
        ta.masked_kernel = original
    return out.detach().float(), [t.grad.float() for t in (q, k, v)], seconds, peak, kernel_override or chosen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=("cuda", "cpu"))
    args = parser.parse_args()
    try:
        chosen = None if args.device == "cuda" else "lower_right"   # the CPU: the bias forced, torch materialises it
        run(args.device, chosen)   # warm-up (kernels, allocator)
        new = run(args.device, chosen)
        old = run(args.device, "repeat" if args.device == "cuda" else "mask")
    except Exception as err:   # one line whatever failed
        first = (str(err).splitlines() or [""])[0][:300]
        print(f"FAIL trie_lower_right (device {args.device}): {type(err).__name__}: {first}")
        return 1
    out_gap = (new[0] - old[0]).abs().max().item()
    grad_gap = max((a - b).abs().max().item() / max(b.abs().max().item(), 1e-6) for a, b in zip(new[1], old[1],
                                                                                                strict=True))
    tolerance = 2e-2 if args.device == "cuda" else 1e-5   # bf16 kernels sum in other orders
    sm80 = args.device == "cuda" and torch.cuda.get_device_capability() >= (8, 0)
    problems = []
    if out_gap > tolerance or grad_gap > tolerance:
        problems.append("outputs or gradients differ beyond the tolerance")
    if sm80 and new[4] != "lower_right":
        problems.append("flash did not take the lower-right call on an sm80+ GPU")
    print(f"{'FAIL' if problems else 'PASS'} trie_lower_right (device {args.device}): kernel {new[4]}; max |dout| "
          f"{out_gap:.2e}, max relative |dgrad| {grad_gap:.2e}; {new[2]:.4f} s / {new[3]:.3f} GiB against "
          f"{old[4]} {old[2]:.4f} s / {old[3]:.3f} GiB{'; ' + '; '.join(problems) if problems else ''}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
