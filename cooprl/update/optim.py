"""The optimizer every trained model gets (`build_adamw`) and the one guarded step every update in the library takes
(policy gradient, DPO, critics, reward model)."""

from __future__ import annotations

import logging
from typing import Any, Iterable

import optimi
import torch

from cooprl.errors import UserError

log = logging.getLogger(__name__)

BF16_OPTIMIZERS = ("kahan", "pure")
# torch.optim.AdamW's own, given to every weight here, KahanAdamW's too (optimi's defaults differ)
ADAM_BETAS, ADAM_EPS = (0.9, 0.999), 1e-8


class OptimizerError(UserError, ValueError):
    """Weights that cannot be trained as asked; the message names the fix."""


class KahanAdamW(optimi.AdamW):
    """torch-optimi's AdamW with Kahan summation, its second moment (`exp_avg_sq`) kept in float32.

    Why float32: optimi keeps both moments in the parameter's dtype. It stores `v` already debiased,
    `v <- beta2_hat * v + (1 - beta2_hat) * g^2`, and beta2_hat climbs towards 0.999; once 1 - beta2_hat is below half
    a bf16 ulp (2^-9 to 2^-8 of `v`: after about 300 to 700 steps) the bf16 product `beta2_hat * v` rounds back to `v`,
    so `v` stops decaying and only ratchets up: after 2,000 steps whose gradient scale drops 10x at step 700, 7x the
    float32 value (tests/cooprl/update/test_bf16_updates.py), and every later step is ~2.6x smaller than AdamW's. The
    first moment (a lerp by 0.1) and the compensation buffer stay bf16: 8 bytes of state per weight (2 + 4 + 2), 4
    more than `pure`'s bf16 moments, against 12 for a float32 master copy and its moments.

    What runs: optimi's loop of torch ops over the tensors, one at a time (`foreach=False, triton=False`). Its
    foreach path groups the tensors by the parameter's dtype, and its Triton kernel stores `v` in it; neither
    takes a float32 `v` beside bf16 weights. Nothing faster is lost: optimi's own choice (`_default_to_triton`)
    takes Triton only for tensors whose type is exactly `torch.Tensor`, never an `nn.Parameter`, so the loop is what
    ran on a GPU before too; and on fsdp's sharded parameters (DTensors, which torch adds to that list) its Triton
    kernel would see the wrapper, not the shard, and its foreach path has no sharding rule for `_foreach_copy_`.

    `load_state_dict` keeps `v` in float32: torch's `Optimizer.load_state_dict` casts every floating state to its
    parameter's dtype, which would round a saved float32 `v` to bf16 (a resumed run would then differ from an
    uninterrupted one); the kernel choices a checkpoint carries in its param groups are reset to the loop."""

    def __init__(self, params: Iterable[Any], *, lr: float, betas: tuple[float, float], eps: float,
                 weight_decay: float):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, kahan_sum=True,
                         foreach=False, triton=False)

    def _init_state(self, group: dict[str, Any], state: dict[str, Any], param: torch.Tensor) -> None:
        fresh = "kahan_comp" not in state   # optimi's marker of a state it has not made yet
        super()._init_state(group, state, param)
        if fresh:
            state["exp_avg_sq"] = torch.zeros_like(param, dtype=torch.float32, memory_format=torch.preserve_format)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load `state_dict` as torch does, then put each saved `exp_avg_sq` back in float32 (see the class)."""
        saved_ids = [index for group in state_dict["param_groups"] for index in group["params"]]
        params = [p for group in self.param_groups for p in group["params"]]
        second_moments = {}
        for index, param in zip(saved_ids, params):
            value = state_dict["state"].get(index, {}).get("exp_avg_sq")
            if isinstance(value, torch.Tensor):
                second_moments[param] = value
        super().load_state_dict(state_dict)
        for param, value in second_moments.items():
            self.state[param]["exp_avg_sq"] = value.to(device=param.device, dtype=torch.float32)
        for group in self.param_groups:   # a checkpoint of older code may carry optimi's own choice (Triton on CUDA)
            group["foreach"] = group["triton"] = False


def build_adamw(params: Iterable[torch.nn.Parameter], *, lr: float, weight_decay: float = 0.01,
                bf16_optimizer: str = "kahan") -> torch.optim.Optimizer:
    """Return the AdamW that trains `params` (torch's hyper-parameters: betas 0.9/0.999, eps 1e-8, decoupled decay).

    Float32 weights get torch.optim.AdamW. bfloat16 weights get, with `bf16_optimizer: kahan` (the default),
    `KahanAdamW`: torch-optimi's AdamW with Kahan summation (a bf16 compensation buffer per weight carries what each
    update lost to rounding, so steps far below a bf16 ulp, lr 2e-5 on a weight of 0.02 or any step on an RMSNorm
    weight of 1.0, accumulate as in float32; bench/bf16_updates.py) and its second moment in float32 (in bf16 it
    stops decaying after ~600 steps), for 4 bytes per weight more than `pure`. With `pure`, torch.optim.AdamW updates
    the bf16 weights directly: most small updates round away, and its bf16 second moment ratchets.

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
        return KahanAdamW(params, lr=lr, betas=ADAM_BETAS, eps=ADAM_EPS, weight_decay=weight_decay)
    return torch.optim.AdamW(params, lr=lr, betas=ADAM_BETAS, eps=ADAM_EPS, weight_decay=weight_decay)
