"""The update engine in one process (cooprl.update.engine): one backward per batch, one step per optimizer, the
denominator handed to the loss, non-finite losses skipped. Two processes:
tests/cooprl/update/test_engine_distributed.py."""

import pytest
import torch

from cooprl.parallel.context import Parallel
from cooprl.update.engine import Sync, Term, optimizer_step, shared_policy_step


def linear_and_sgd(lr: float = 0.5) -> tuple[torch.nn.Linear, torch.optim.SGD]:
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1, bias=False)
    return model, torch.optim.SGD(model.parameters(), lr=lr)


def squared_error(model: torch.nn.Module):
    """Return a loss function over batches of (x, y) rows: the batch's summed squared error / denominator."""
    seen = []

    def loss(batch, denominator):
        seen.append((len(batch), denominator))
        x = torch.tensor([row[0] for row in batch])
        y = torch.tensor([row[1] for row in batch])
        return ((model(x).squeeze(-1) - y) ** 2).sum() / denominator, {"rows": float(len(batch))}
    return loss, seen


def test_one_step_on_several_batches_is_the_step_on_their_mean_loss():
    rows = [([1.0, 0.0], 1.0), ([0.0, 1.0], -1.0), ([1.0, 1.0], 2.0)]
    model, optimizer = linear_and_sgd()
    reference, reference_optimizer = linear_and_sgd()
    loss, seen = squared_error(model)
    result = optimizer_step([optimizer], [Term([rows[:2], rows[2:]], loss)], weight=3, max_grad_norm=None)
    assert seen == [(2, 3), (1, 3)]   # every batch divided by the step's count
    assert result.metrics == {"rows": 3.0} and not result.skipped
    reference_loss, _ = squared_error(reference)
    reference_optimizer.zero_grad()
    reference_loss(rows, 3)[0].backward()
    reference_optimizer.step()
    assert torch.allclose(model.weight, reference.weight, atol=1e-7)
    start, _ = linear_and_sgd()
    start_loss, _ = squared_error(start)
    assert result.losses["loss"] == pytest.approx(start_loss(rows, 3)[0].item())   # the mean loss before the step
    assert result.grad_norms[0] > 0


def test_a_non_finite_loss_skips_the_step_and_leaves_the_weights():
    model, optimizer = linear_and_sgd()
    before = model.weight.detach().clone()
    loss, seen = squared_error(model)
    rows = [([1.0, 0.0], 1.0), ([0.0, 1.0], float("inf"))]
    result = optimizer_step([optimizer], [Term([rows[:1], rows[1:], rows[:1]], loss)], weight=3, max_grad_norm=1.0)
    assert result.skipped and result.grad_norms == [None] and result.losses["loss"] != result.losses["loss"]
    assert len(seen) == 2   # stopped at the non-finite batch
    assert torch.equal(model.weight, before) and model.weight.grad is None


def test_nothing_to_train_takes_no_step():
    model, optimizer = linear_and_sgd()
    loss, seen = squared_error(model)
    result = optimizer_step([optimizer], [Term([], loss)], weight=0, max_grad_norm=1.0)
    assert result.grad_norms == [None] and seen == [] and not result.skipped


class _Sharded(Parallel):
    """A context whose every model is stepped as a sharded one."""

    def sync_of(self, model):
        return Sync.SHARDED


def test_a_sharded_step_needs_its_padding():
    model, optimizer = linear_and_sgd()
    loss, _ = squared_error(model)
    with pytest.raises(ValueError, match="padding"):
        optimizer_step([optimizer], [Term([[([1.0, 0.0], 1.0)]], loss)], [model], weight=1, max_grad_norm=1.0,
                       parallel=_Sharded())


def test_a_shared_policy_step_is_the_sum_of_each_agents_own_step_gradient():
    # agent 0 has 3 rows, agent 1 one: each term divided by its own count (its own step's mean), not the pooled 4
    rows = [[([1.0, 0.0], 1.0), ([0.0, 1.0], -1.0), ([1.0, 1.0], 2.0)], [([2.0, -1.0], 0.5)]]
    model, optimizer = linear_and_sgd(lr=1.0)
    losses = [squared_error(model) for _ in rows]
    stepped = []
    step = optimizer.step
    optimizer.step = lambda: (stepped.append(model.weight.grad.clone()), step())[1]
    results = shared_policy_step(optimizer, model, [(Term([r], loss), float(len(r))) for r, (loss, _) in
                                                    zip(rows, losses)], max_grad_norm=None)
    assert [seen for _, seen in losses] == [[(3, 3.0)], [(1, 1.0)]]
    start, _ = linear_and_sgd()
    expected = torch.zeros_like(start.weight)
    for r in rows:   # each agent's own step's gradient, on the start weights
        own, _ = squared_error(start)
        expected += torch.autograd.grad(own(r, len(r))[0], start.weight)[0]
    assert len(stepped) == 1 and torch.allclose(stepped[0], expected, atol=1e-6)   # one step on the sum
    assert torch.allclose(model.weight, start.weight - expected, atol=1e-6)        # (SGD, lr 1)
    for r, result in zip(rows, results):   # each agent's own loss and metrics; the step's one norm
        own, _ = squared_error(start)
        assert result.losses == {"loss": pytest.approx(own(r, len(r))[0].item())}
        assert result.metrics == {"rows": float(len(r))}
        assert result.grad_norms == [pytest.approx(expected.norm().item())] and not result.skipped
