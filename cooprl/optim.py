"""The optimizer every trained model gets (`build_adamw`) and the one guarded step every update in the library takes
(policy gradient, DPO, critics, reward model)."""

from __future__ import annotations

import logging
from typing import Iterable

import torch

from cooprl.errors import UserError

log = logging.getLogger(__name__)

BF16_OPTIMIZERS = ("kahan", "pure")
# torch.optim.AdamW's own: upstream's trainers get these, and so does every weight here (optimi's defaults differ)
ADAM_BETAS, ADAM_EPS = (0.9, 0.999), 1e-8


class OptimizerError(UserError, ValueError):
    """Weights that cannot be trained as asked; the message names the fix."""


def build_adamw(params: Iterable[torch.nn.Parameter], *, lr: float, weight_decay: float = 0.01,
                bf16_optimizer: str = "kahan") -> torch.optim.Optimizer:
    """Return the AdamW that trains `params` (torch's hyper-parameters: betas 0.9/0.999, eps 1e-8, decoupled decay).

    Float32 weights get torch.optim.AdamW. bfloat16 weights get, with `bf16_optimizer: kahan` (the default),
    torch-optimi's AdamW with Kahan summation: a bf16 compensation buffer per weight carries what each update lost to
    rounding, so steps far below a bf16 ulp (lr 2e-5 on a weight of 0.02, any step on an RMSNorm weight of 1.0)
    accumulate as in float32 (bench/bf16_updates.py), for 2 bytes per weight. With `pure`, torch.optim.AdamW updates
    the bf16 weights directly, as upstream does: most small updates round away.

    Float16 weights are refused (OptimizerError): AdamW's eps (1e-8) is 0 in float16, so a weight whose gradient is 0
    (an unused token's embedding row) becomes 0/0 = NaN after one step, and without loss scaling small gradients
    underflow; train float16 models with LoRA (float32 adapters) or in bfloat16/float32."""
    params = list(params)
    if bf16_optimizer not in BF16_OPTIMIZERS:
        raise OptimizerError(f"bf16_optimizer {bf16_optimizer!r}: expected one of {', '.join(BF16_OPTIMIZERS)}")
    dtypes = {p.dtype for p in params if p.requires_grad}
    if torch.float16 in dtypes:
        raise OptimizerError("float16 weights cannot be trained: AdamW's eps (1e-8) underflows to 0 in float16, so a "
                             "weight with a zero gradient turns NaN after one step (and there is no loss scaling); "
                             "use torch_dtype bfloat16 or float32 (autocast: bf16 for bf16 speed), or LoRA adapters "
                             "(float32) on a frozen float16 model")
    if torch.bfloat16 in dtypes and bf16_optimizer == "kahan":
        from optimi import AdamW as KahanAdamW
        # optimi picks its Triton kernel for CUDA tensors, its loop otherwise; fsdp's sharded parameters (DTensors)
        # take the loop of torch ops, which DTensor implements (a Triton kernel would get the wrapper, not the shard)
        sharded = any(type(p).__name__ == "DTensor" for p in params)
        optimizer = KahanAdamW(params, lr=lr, betas=ADAM_BETAS, eps=ADAM_EPS, weight_decay=weight_decay,
                               kahan_sum=True, triton=False if sharded else None)
        # optimi keeps its kernel choice in the param groups, so a checkpoint carries it: a GPU run's `triton: True`
        # would send a CPU resume to a CUDA kernel; choose again for where the parameters are now
        optimizer.register_load_state_dict_post_hook(_rechoose_kernel)
        return optimizer
    return torch.optim.AdamW(params, lr=lr, betas=ADAM_BETAS, eps=ADAM_EPS, weight_decay=weight_decay)


def _rechoose_kernel(optimizer: torch.optim.Optimizer) -> None:
    for group in optimizer.param_groups:
        group["triton"] = bool(group.get("triton")) and all(p.is_cuda for p in group["params"])


from cooprl.engine import guarded_step  # noqa: F401,E402  (the step lives with the update engine that takes it)
