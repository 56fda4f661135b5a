"""bf16 weights train as float32 ones do (cooprl.optim.build_adamw): Kahan-compensated AdamW by default, pure bf16
AdamW only when asked (it loses most updates), float16 weights refused."""

import io

import pytest
import torch

from cooprl.config import Run
from cooprl.optim import OptimizerError, build_adamw


class TinyBlock(torch.nn.Module):
    """A linear layer (weights of N(0, 0.02), as a transformer's) and an RMSNorm weight of ones."""

    def __init__(self, dtype: torch.dtype, seed: int = 0):
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        weight = (torch.randn(128, 128, generator=generator) * 0.02).bfloat16()   # the same start in every dtype
        self.linear = torch.nn.Parameter(weight.to(dtype))
        self.norm = torch.nn.Parameter(torch.ones(128, dtype=dtype))


def drift(dtype: torch.dtype, mode: str, *, lr: float, steps: int, noise: float = 1.0) -> dict[str, torch.Tensor]:
    """Return each weight's float32 change after `steps` AdamW steps built as the trainers build them, with the same
    gradients (a fixed direction plus `noise` times Gaussian noise) whatever the dtype."""
    block = TinyBlock(dtype)
    start = {name: p.detach().float().clone() for name, p in block.named_parameters()}
    optimizer = build_adamw(block.parameters(), lr=lr, weight_decay=0.01, bf16_optimizer=mode)
    generator = torch.Generator().manual_seed(1)
    direction = {name: torch.randn(p.shape, generator=generator) for name, p in block.named_parameters()}
    for _ in range(steps):
        for name, p in block.named_parameters():
            p.grad = (0.5 * direction[name] + noise * torch.randn(p.shape, generator=generator)).to(dtype)
        optimizer.step()
    return {name: p.detach().float() - start[name] for name, p in block.named_parameters()}


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got - want).norm() / want.norm()).item()


def test_default_bf16_optimizer_keeps_updates_below_an_ulp():
    """lr 2e-5 on weights of 0.02 (bf16 ulp 1.2e-4): the default lands the float32 drift within 10%; pure bf16 AdamW
    loses most of it and leaves most weights untouched."""
    reference = drift(torch.float32, "kahan", lr=2e-5, steps=60)["linear"]
    kahan = drift(torch.bfloat16, "kahan", lr=2e-5, steps=60)["linear"]
    pure = drift(torch.bfloat16, "pure", lr=2e-5, steps=60)["linear"]
    assert relative_error(kahan, reference) < 0.1
    assert 0.9 < (kahan.norm() / reference.norm()).item() < 1.1
    assert (kahan == 0).float().mean() < 0.1
    assert relative_error(pure, reference) > 0.7   # the defect the default fixes
    assert (pure == 0).float().mean() > 0.6


def test_rmsnorm_weights_move_with_the_default_only():
    """Weights of 1.0 (bf16 ulp 7.8e-3) under steps of 1e-4: pure bf16 AdamW rounds every step away, forever; the
    default moves them as float32 does once the steps add up to an ulp."""
    reference, kahan, pure = (drift(dtype, mode, lr=1e-4, steps=150, noise=0.05)["norm"]
                              for dtype, mode in ((torch.float32, "kahan"), (torch.bfloat16, "kahan"),
                                                  (torch.bfloat16, "pure")))
    moved = reference.abs() > 7.8e-3   # float32 went past one bf16 ulp
    assert moved.float().mean() > 0.8
    assert torch.count_nonzero(pure) == 0
    assert torch.count_nonzero(kahan[moved]) == moved.sum()
    assert torch.equal(torch.sign(kahan[moved]), torch.sign(reference[moved]))
    assert (kahan - reference).abs().max() <= 7.9e-3   # within one bf16 ulp of where float32 got


def test_which_optimizer_each_dtype_gets():
    from optimi import AdamW as KahanAdamW
    bf16, fp32 = TinyBlock(torch.bfloat16), TinyBlock(torch.float32)
    assert isinstance(build_adamw(bf16.parameters(), lr=1e-3), KahanAdamW)
    assert type(build_adamw(bf16.parameters(), lr=1e-3, bf16_optimizer="pure")) is torch.optim.AdamW
    assert type(build_adamw(fp32.parameters(), lr=1e-3)) is torch.optim.AdamW
    # a float32 parameter next to bf16 ones (a value head in the actor's optimizer) is updated as torch's AdamW does
    head, twin = torch.nn.Parameter(torch.randn(16)), None
    twin = torch.nn.Parameter(head.detach().clone())
    mixed = build_adamw(list(bf16.parameters()) + [head], lr=1e-2)
    plain = torch.optim.AdamW([twin], lr=1e-2)
    for _ in range(5):
        grad = torch.randn(16)
        for p in bf16.parameters():
            p.grad = torch.randn(p.shape).bfloat16()
        head.grad, twin.grad = grad.clone(), grad.clone()
        mixed.step()
        plain.step()
    torch.testing.assert_close(head, twin, rtol=0, atol=1e-6)


def test_resumed_kahan_optimizer_equals_uninterrupted():
    """The compensation buffer is optimizer state: a checkpoint keeps it, and a resumed run takes the same steps."""
    def run(steps, state=None):
        block = TinyBlock(torch.bfloat16)
        optimizer = build_adamw(block.parameters(), lr=2e-5)
        if state is not None:
            block.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
        generator = torch.Generator().manual_seed(len(steps))
        for step in steps:
            generator.manual_seed(step)
            for p in block.parameters():
                p.grad = torch.randn(p.shape, generator=generator).bfloat16()
            optimizer.step()
        return block, optimizer

    whole, _ = run(range(8))
    first, optimizer = run(range(4))
    buffer = io.BytesIO()
    torch.save({"model": first.state_dict(), "optimizer": optimizer.state_dict()}, buffer)
    buffer.seek(0)
    state = torch.load(buffer, map_location="cpu", weights_only=True)
    assert any("kahan_comp" in slots for slots in state["optimizer"]["state"].values())
    resumed, _ = run(range(4, 8), state)
    for a, b in zip(whole.parameters(), resumed.parameters()):
        assert torch.equal(a, b)


def test_a_gpu_checkpoint_of_the_kahan_optimizer_resumes_on_cpu():
    """optimi records its Triton kernel choice in the param groups; loading on CPU chooses again (no CUDA kernel)."""
    block = TinyBlock(torch.bfloat16)
    optimizer = build_adamw(block.parameters(), lr=1e-3)
    for p in block.parameters():
        p.grad = torch.ones_like(p)
    optimizer.step()
    state = optimizer.state_dict()
    state["param_groups"][0]["triton"] = True   # as a run on a GPU saves it
    optimizer.load_state_dict(state)
    assert optimizer.param_groups[0]["triton"] is False
    optimizer.step()


def test_float16_adamw_turns_weights_nan_so_float16_training_is_refused():
    weight = torch.nn.Parameter(torch.ones(4, dtype=torch.float16))
    weight.grad = torch.tensor([1.0, 0.0, 0.0, 1.0], dtype=torch.float16)
    plain = torch.optim.AdamW([weight], lr=1e-3)
    plain.step()
    assert torch.isnan(weight[1:3]).all()   # eps 1e-8 is 0 in float16: a zero gradient gives 0/0
    with pytest.raises(OptimizerError, match="float16 weights cannot be trained.*bfloat16 or float32"):
        build_adamw([torch.nn.Parameter(torch.ones(4, dtype=torch.float16))], lr=1e-3)
    # frozen float16 weights under float32 adapters (LoRA) train
    frozen = torch.nn.Parameter(torch.ones(4, dtype=torch.float16), requires_grad=False)
    assert type(build_adamw([frozen, torch.nn.Parameter(torch.ones(4))], lr=1e-3)) is torch.optim.AdamW


# ------------------------------------------------------------------ what the trainers build (agents, critics, reward model)
def tiny_config(*overrides):
    from cooprl.config import load_config
    return load_config(None, ["agent_model.name=offline:tiny-random", "agent_model.device=cpu", "wandb.mode=disabled",
                              *overrides])


def test_agents_critics_and_reward_models_in_bf16_get_the_kahan_optimizer_unless_pure():
    from optimi import AdamW as KahanAdamW

    from cooprl.agents import build_team
    from cooprl.trainers.actor_critic import separate_critic
    config = tiny_config("agent_model.torch_dtype=bfloat16", "critic_model.torch_dtype=bfloat16")
    agent, = build_team(Run.of(config, "magrpo"), 1)
    critic = separate_critic(Run.of(config, "iac"), "offline:tiny-random", reuses_agent_ids=True)
    assert isinstance(agent.optimizer, KahanAdamW) and isinstance(critic.optimizer, KahanAdamW)
    assert next(agent.model.parameters()).dtype == torch.bfloat16
    pure = tiny_config("agent_model.torch_dtype=bfloat16", "agent_model.bf16_optimizer=pure")
    agent, = build_team(Run.of(pure, "magrpo"), 1)
    assert type(agent.optimizer) is torch.optim.AdamW
    agent, = build_team(Run.of(tiny_config("agent_model.torch_dtype=float32"), "magrpo"), 1)
    assert type(agent.optimizer) is torch.optim.AdamW


def test_bf16_reward_model_training_lands_its_updates(monkeypatch):
    """The reward model's trunk in bf16 at a small lr: the default moves the trunk, `pure` leaves most of it as it was."""
    from cooprl.models import load_causal_lm, load_tokenizer
    from cooprl.preferences import PreferencePair
    from cooprl.reward_model import RewardModel, train_reward_model
    from cooprl.value_model import ValueModel
    pairs = [PreferencePair(item_id=str(i), prompts=[f"task {i}"], chosen=["good answer"], rejected=["bad"],
                            chosen_reward=1.0, rejected_reward=0.0) for i in range(8)]

    def unchanged_share(mode):
        torch.manual_seed(0)
        lm = load_causal_lm("offline:tiny-random", device="cpu", torch_dtype="bfloat16")
        model = RewardModel(ValueModel(lm), load_tokenizer("offline:tiny-random"), 64)
        # the layers' matrices (an unused token's embedding row has no gradient to land)
        layers = [p for name, p in lm.named_parameters() if p.dim() == 2 and "embed" not in name]
        before = [p.detach().clone() for p in layers]
        train_reward_model(model, pairs, learning_rate=2e-5, epochs=3, eval_fraction=0.0, seed=0, batch_size=2,
                           bf16_optimizer=mode)
        return sum((a == b).sum().item() for a, b in zip(layers, before)) / sum(b.numel() for b in before)

    assert unchanged_share("kahan") < 0.3 < 0.6 < unchanged_share("pure")


def test_a_float16_agent_is_refused_with_one_clear_error():
    from cooprl.agents import build_team
    from cooprl.errors import UserError
    config = tiny_config("agent_model.torch_dtype=float16")
    with pytest.raises(UserError, match="float16 weights cannot be trained"):
        build_team(Run.of(config, "magrpo"), 1)
    lora = tiny_config("agent_model.torch_dtype=float16", "agent_model.lora.r=4")
    agent, = build_team(Run.of(lora, "magrpo"), 1)   # float32 adapters over frozen float16 weights train
    assert {p.dtype for p in agent.model.parameters() if p.requires_grad} == {torch.float32}
