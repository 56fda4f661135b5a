"""The one guarded optimizer step (cooprl.update.engine.guarded_step) that every update takes."""

import math

import torch

from cooprl.update.engine import guarded_step


def _model_with_grad(grad: float) -> tuple[torch.nn.Linear, torch.optim.Optimizer]:
    model = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0, 2.0]]))
    model.weight.grad = torch.tensor([[grad, 0.0]])
    return model, torch.optim.SGD(model.parameters(), lr=1.0)


def test_a_finite_step_is_clipped_taken_and_cleared():
    model, optimizer = _model_with_grad(3.0)
    assert guarded_step(optimizer, max_grad_norm=1.0) == 3.0          # the norm before clipping
    assert torch.allclose(model.weight, torch.tensor([[0.0, 2.0]]), atol=1e-6)   # stepped by the clipped gradient
    assert model.weight.grad is None


def test_no_clipping_still_measures_the_norm():
    model, optimizer = _model_with_grad(3.0)
    assert guarded_step(optimizer, max_grad_norm=None) == 3.0
    assert torch.equal(model.weight, torch.tensor([[-2.0, 2.0]]))


def test_a_non_finite_gradient_skips_the_step_and_clears_it():
    for bad in (math.nan, math.inf):
        model, optimizer = _model_with_grad(bad)
        assert guarded_step(optimizer, max_grad_norm=1.0) is None
        assert torch.equal(model.weight, torch.tensor([[1.0, 2.0]])) and model.weight.grad is None


def test_the_norm_of_bf16_gradients_is_a_float32_number():
    """bf16 gradients: the norm is summed in float32 (torch's clip_grad_norm_ returns a bf16 number: 3 significant
    digits), and clipping scales them by max / that norm."""
    weight = torch.nn.Parameter(torch.zeros(1000, dtype=torch.bfloat16))
    grad = torch.full((1000,), 0.1, dtype=torch.bfloat16)   # 0.1 in bf16: 0.10009765625
    weight.grad = grad.clone()
    want = math.sqrt(1000) * 0.10009765625
    assert abs(torch.nn.utils.get_total_norm([grad]).item() - want) > 1e-3   # the bf16 norm misses it
    norm = guarded_step(torch.optim.SGD([weight], lr=1.0), max_grad_norm=1.0)
    assert abs(norm - want) < 1e-5
    torch.testing.assert_close(weight.detach().float(), torch.full((1000,), -0.10009765625 / want),
                               rtol=1e-2, atol=0)
