"""How much of a float32 AdamW run bf16 weights keep, through the trainers' own optimizer (cooprl.optim.build_adamw).

    python bench/bf16_updates.py [--device cpu|cuda] [--lr 2e-5] [--steps 50] [--size 1000000]

Two parameters as a transformer has them: a matrix of N(0, 0.02) weights and an RMSNorm weight of ones. Each
is trained three times from the same (bf16-representable) start with the same gradients (Gaussian noise plus a
fixed direction, so the drift is what steady learning does): in float32 (the reference), and in bfloat16 with
`bf16_optimizer: pure` and with the default (`kahan`). Printed: drift = ||w_T - w_0||; a run's retention is its
drift over the float32 drift (1 = every update landed, 0 = none did), with the share of weights that never moved
and the error ||Δw - Δw_fp32|| / ||Δw_fp32||.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from cooprl.optim import build_adamw  # noqa: E402


def train(start: list[torch.Tensor], grads: torch.Generator, dtype: torch.dtype, mode: str, *, lr: float,
          steps: int, device: str) -> list[torch.Tensor]:
    """Return the float32 drift (w_T - w_0) of each of `start`'s tensors after `steps` AdamW steps in `dtype`."""
    params = [torch.nn.Parameter(w.to(device=device, dtype=dtype, copy=True)) for w in start]
    optimizer = build_adamw(params, lr=lr, weight_decay=0.01, bf16_optimizer=mode)
    direction = [torch.randn(w.shape, generator=grads, device=device) for w in start]
    for _ in range(steps):
        for p, d in zip(params, direction):
            p.grad = (0.5 * d + torch.randn(p.shape, generator=grads, device=device)).to(dtype)
        optimizer.step()
    return [p.detach().float() - w.to(device) for p, w in zip(params, start)]


def retention(*, lr: float = 2e-5, steps: int = 50, size: int = 1_000_000, device: str = "cpu",
              seed: int = 0) -> dict[str, dict[str, float]]:
    """Return, for `pure` and `kahan` bf16 runs and per tensor (`matrix`, `norm`, `all`): retention (drift over the
    float32 drift), `unchanged` (share of weights that never moved) and `error` (||Δw - Δw_fp32|| / ||Δw_fp32||)."""
    init = torch.Generator().manual_seed(seed)
    # the start is bf16-representable, so every run starts from the same weights
    start = [(torch.randn(size, generator=init) * 0.02).bfloat16().float(), torch.ones(max(size // 1000, 64))]

    def run(dtype: torch.dtype, mode: str) -> list[torch.Tensor]:
        grads = torch.Generator(device=device).manual_seed(seed + 1)   # the same gradients for every run
        return train(start, grads, dtype, mode, lr=lr, steps=steps, device=device)

    reference = run(torch.float32, "pure")
    out = {}
    for mode in ("pure", "kahan"):
        drift = run(torch.bfloat16, mode)
        figures = {}
        for name, parts in (("matrix", [0]), ("norm", [1]), ("all", [0, 1])):
            d = torch.cat([drift[i] for i in parts])
            r = torch.cat([reference[i] for i in parts])
            figures[name] = {"retention": (d.norm() / r.norm()).item(), "unchanged": (d == 0).float().mean().item(),
                             "error": ((d - r).norm() / r.norm()).item()}
        out[mode] = figures
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--size", type=int, default=1_000_000)
    args = parser.parse_args()
    figures = retention(lr=args.lr, steps=args.steps, size=args.size, device=args.device)
    for mode, parts in figures.items():
        for name, f in parts.items():
            print(f"{mode:5s} {name:6s}: retention {f['retention']:.3f}, unchanged {f['unchanged']:.1%}, "
                  f"error {f['error']:.3f}")
    print(f"bf16 update retention ({args.device}, lr {args.lr:g}, {args.steps} steps): "
          f"pure {figures['pure']['all']['retention']:.3f}, default {figures['kahan']['all']['retention']:.3f}")


if __name__ == "__main__":
    main()
