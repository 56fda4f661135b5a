"""How much of a float32 AdamW run bf16 weights keep, through the trainers' own optimizer
(cooprl.update.optim.build_adamw).

    python bench/bf16_updates.py [--device cpu|cuda] [--lr 2e-5] [--steps 2000] [--drop-at 700] [--drop 0.1]
                                 [--size 100000]

Two parameters as a transformer has them: a matrix of N(0, 0.02) weights and an RMSNorm weight of ones. Each is
trained from the same (bf16-representable) start with the same gradients: Gaussian noise plus a fixed direction
(so the drift is what steady learning does), whose scale drops `--drop`-fold at step `--drop-at` (a run whose
rewards or advantages shrink: Adam's second moment must decay to follow it). The runs:
- float32: torch.optim.AdamW on float32 weights, the reference;
- pure: `bf16_optimizer: pure`, torch.optim.AdamW on the bf16 weights (upstream's);
- optimi: torch-optimi's AdamW with Kahan summation as it comes, both moments in bf16 (this project's default
  before its second moment went to float32);
- default: `bf16_optimizer: kahan`, cooprl.update.optim.KahanAdamW (Kahan summation, the second moment in float32,
  the compensation buffer of 1-D tensors in float32).
Printed per run and tensor: retention = ||Δw|| / ||Δw_fp32|| (1 = every update landed, 0 = none did), the share of
weights that never moved, the drift error ||Δw - Δw_fp32|| / ||Δw_fp32||, and the second moment against float32's
(both debiased): its error ||v - v_fp32|| / ||v_fp32|| and its ratio mean(v) / mean(v_fp32). The last line is the
summary `bf16 update retention (<device>, lr <lr>, <N> steps): pure X, default Y, norm Z`: X and Y over all the
weights (the matrix dominates them), Z the default's on the norm weights of ~1.0 alone (the weights whose updates
a bf16 compensation buffer loses at small learning rates).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import optimi
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from cooprl.update.optim import ADAM_BETAS, ADAM_EPS, build_adamw  # noqa: E402

RUNS = ("pure", "optimi", "default")


def make_optimizer(params: list[torch.nn.Parameter], run: str, lr: float) -> torch.optim.Optimizer:
    """Return the optimizer of `run` (float32, pure, optimi or default) for `params`."""
    if run == "optimi":   # optimi's AdamW as it comes: the moments in the weights' dtype
        return optimi.AdamW(params, lr=lr, betas=ADAM_BETAS, eps=ADAM_EPS, weight_decay=0.01, kahan_sum=True)
    return build_adamw(params, lr=lr, weight_decay=0.01, bf16_optimizer="pure" if run == "pure" else "kahan")


def debiased_second_moment(optimizer: torch.optim.Optimizer, param: torch.Tensor, steps: int) -> torch.Tensor:
    """Return `param`'s debiased second moment in float32: optimi stores it debiased, torch's AdamW does not."""
    v = optimizer.state[param]["exp_avg_sq"].float()
    return v if isinstance(optimizer, optimi.AdamW) else v / (1 - ADAM_BETAS[1] ** steps)


def train(start: list[torch.Tensor], seed: int, run: str, *, lr: float, steps: int, drop_at: int, drop: float,
          device: str) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Return (the float32 drift w_T - w_0, the debiased second moment) of each of `start`'s tensors after `steps`
    AdamW steps of `run` (float32 weights for "float32", bf16 otherwise)."""
    dtype = torch.float32 if run == "float32" else torch.bfloat16
    params = [torch.nn.Parameter(w.to(device=device, dtype=dtype, copy=True)) for w in start]
    optimizer = make_optimizer(params, run, lr)
    grads = torch.Generator(device=device).manual_seed(seed)   # the same gradients for every run
    direction = [torch.randn(w.shape, generator=grads, device=device) for w in start]
    for step in range(steps):
        scale = drop if step >= drop_at else 1.0
        for p, d in zip(params, direction):
            p.grad = (scale * (0.5 * d + torch.randn(p.shape, generator=grads, device=device))).to(dtype)
        optimizer.step()
    drift = [p.detach().float() - w.to(device) for p, w in zip(params, start)]
    return drift, [debiased_second_moment(optimizer, p, steps) for p in params]


def retention(*, lr: float = 2e-5, steps: int = 2000, drop_at: int = 700, drop: float = 0.1, size: int = 100_000,
              device: str = "cpu", seed: int = 0) -> dict[str, dict[str, dict[str, float]]]:
    """Return, for the `pure`, `optimi` and `default` bf16 runs and per tensor (`matrix`, `norm`, `all`): retention
    (drift over the float32 drift), `unchanged` (share of weights that never moved), `error` (||Δw - Δw_fp32|| /
    ||Δw_fp32||), `v_error` (||v - v_fp32|| / ||v_fp32||) and `v_ratio` (mean(v) / mean(v_fp32))."""
    init = torch.Generator().manual_seed(seed)
    # the start is bf16-representable, so every run starts from the same weights
    start = [(torch.randn(size, generator=init) * 0.02).bfloat16().float(), torch.ones(max(size // 1000, 64))]

    def run(name: str) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        return train(start, seed + 1, name, lr=lr, steps=steps, drop_at=drop_at, drop=drop, device=device)

    reference_drift, reference_v = run("float32")
    out = {}
    for name in RUNS:
        drift, v = run(name)
        figures = {}
        for part, indices in (("matrix", [0]), ("norm", [1]), ("all", [0, 1])):
            d, r = torch.cat([drift[i] for i in indices]), torch.cat([reference_drift[i] for i in indices])
            m, mr = torch.cat([v[i] for i in indices]), torch.cat([reference_v[i] for i in indices])
            figures[part] = {"retention": (d.norm() / r.norm()).item(), "unchanged": (d == 0).float().mean().item(),
                             "error": ((d - r).norm() / r.norm()).item(),
                             "v_error": ((m - mr).norm() / mr.norm()).item(), "v_ratio": (m.mean() / mr.mean()).item()}
        out[name] = figures
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--drop-at", type=int, default=700, help="the step from which the gradient scale is dropped")
    parser.add_argument("--drop", type=float, default=0.1, help="the gradient scale from --drop-at on")
    parser.add_argument("--size", type=int, default=100_000)
    args = parser.parse_args()
    figures = retention(lr=args.lr, steps=args.steps, drop_at=args.drop_at, drop=args.drop, size=args.size,
                        device=args.device)
    print(f"{args.size} + {max(args.size // 1000, 64)} weights, gradient scale x{args.drop:g} from step {args.drop_at}")
    for name, parts in figures.items():
        for part, f in parts.items():
            print(f"{name:7s} {part:6s}: retention {f['retention']:.3f}, unchanged {f['unchanged']:.1%}, "
                  f"error {f['error']:.3f}, v error {f['v_error']:.3f}, v ratio {f['v_ratio']:.2f}")
    print(f"bf16 update retention ({args.device}, lr {args.lr:g}, {args.steps} steps): "
          f"pure {figures['pure']['all']['retention']:.3f}, default {figures['default']['all']['retention']:.3f}, "
          f"norm {figures['default']['norm']['retention']:.3f}")


if __name__ == "__main__":
    main()
