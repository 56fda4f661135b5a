"""bf16 weights train as float32 ones do (cooprl.update.optim.build_adamw): Kahan-compensated AdamW with a float32
second moment by default, pure bf16 AdamW only when asked (it loses most updates), float16 weights refused."""

import io

import pytest
import torch

from cooprl.config import Run
from cooprl.update.optim import ADAM_BETAS, KahanAdamW, OptimizerError, build_adamw


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
    """The compensation buffer and the float32 second moment are optimizer state: a checkpoint keeps them exactly,
    and a resumed run takes the same steps and holds the same state."""
    def run(steps, state=None):
        block = TinyBlock(torch.bfloat16)
        optimizer = build_adamw(block.parameters(), lr=2e-5)
        if state is not None:
            block.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
        generator = torch.Generator()
        for step in steps:
            generator.manual_seed(step)
            for p in block.parameters():
                p.grad = torch.randn(p.shape, generator=generator).bfloat16()
            optimizer.step()
        return block, optimizer

    whole, whole_optimizer = run(range(8))
    first, optimizer = run(range(4))
    state = saved_and_loaded({"model": first.state_dict(), "optimizer": optimizer.state_dict()})
    assert any("kahan_comp" in slots for slots in state["optimizer"]["state"].values())
    resumed, resumed_optimizer = run(range(4, 8), state)
    for a, b in zip(whole.parameters(), resumed.parameters()):
        assert torch.equal(a, b)
        for key, value in whole_optimizer.state[a].items():
            resumed_value = resumed_optimizer.state[b][key]
            assert value.dtype == resumed_value.dtype and torch.equal(value, resumed_value)


def saved_and_loaded(state: dict) -> dict:
    """Return `state` after torch.save and torch.load, as a checkpoint holds it."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, map_location="cpu", weights_only=True)


# ------------------------------------------------------------------- the second moment (exp_avg_sq) in float32
def test_the_second_moment_of_bf16_weights_decays_as_in_float32():
    """2,000 steps whose gradient scale drops 10x at step 700 (a run whose rewards or lengths change): the second
    moment of bf16 weights ends where float32's does. Kept in bf16 (optimi's own choice) it stops decaying once the
    debiased beta2 passes ~0.996 and ends at 7x float32's, so every later step is ~2.6x too small."""
    generator = torch.Generator().manual_seed(0)
    grads = [(torch.randn(256,
                          generator=generator) * (1e-2 if step < 700 else 1e-3)).bfloat16() for step in range(2000)]

    def second_moment(dtype: torch.dtype) -> torch.Tensor:
        weight = torch.nn.Parameter(torch.zeros(256, dtype=dtype))
        optimizer = build_adamw([weight], lr=1e-5)
        for grad in grads:
            weight.grad = grad.to(dtype, copy=True)   # (optimi uses the gradient as its scratch space)
            optimizer.step()
        return optimizer.state[weight]["exp_avg_sq"]

    bf16 = second_moment(torch.bfloat16)
    # torch.optim.AdamW on float32 weights, the same bf16-exact gradients; its moment is not debiased, optimi's is
    reference = second_moment(torch.float32) / (1 - ADAM_BETAS[1] ** 2000)
    assert bf16.dtype == torch.float32
    assert relative_error(bf16, reference) < 1e-3


# ------------------------------------------------------------- the compensation buffer of 1-D tensors in float32
def norm_drift(lr: float, *, steps: int = 2000) -> dict[str, torch.Tensor]:
    """Return the drift of 1,024 RMSNorm-like weights of 1.0 after `steps` AdamW steps of noisy gradients whose scale
    drops 10x at step 700 (bench/bf16_updates.py's recipe), per run: `float32` (the reference), `default` (bf16
    weights, the default optimizer) and `bf16 buffer` (the same with its compensation buffer put back in bf16 after
    the first step: what optimi allocates)."""
    drifts = {}
    for run, dtype in (("float32", torch.float32), ("default", torch.bfloat16), ("bf16 buffer", torch.bfloat16)):
        weight = torch.nn.Parameter(torch.ones(1024, dtype=dtype))
        optimizer = build_adamw([weight], lr=lr)
        generator = torch.Generator().manual_seed(0)
        direction = torch.randn(1024, generator=generator)
        for step in range(steps):
            scale = 0.1 if step >= 700 else 1.0
            weight.grad = (scale * (0.5 * direction + torch.randn(1024, generator=generator))).to(dtype)
            optimizer.step()
            if step == 0 and run == "bf16 buffer":
                optimizer.state[weight]["kahan_comp"] = optimizer.state[weight]["kahan_comp"].bfloat16()
        drifts[run] = weight.detach().float() - 1.0
    return drifts


def test_norm_weights_keep_their_updates_at_the_actor_critic_learning_rate():
    """lr 5e-6 (the actor-critic reference configs) on weights of 1.0 (half a bf16 ulp: 2e-3 to 3.9e-3, ~1,000
    updates): with the default's float32 buffer they drift as in float32 (0.906 of its norm; rounding float32's
    weights to bf16 keeps 0.948); a bf16 buffer stops growing at ~256-512 updates (one more rounds away), so those
    weights never move."""
    drifts = norm_drift(5e-6)
    assert 0.9 < (drifts["default"].norm() / drifts["float32"].norm()).item() < 1.1
    assert torch.count_nonzero(drifts["bf16 buffer"]) == 0   # the defect the float32 buffer fixes


def test_only_1d_tensors_get_a_float32_compensation_buffer():
    """Norm gains and biases: float32 (4 bytes more each, ~0.2M weights in a 3B model); matrices keep bf16 (their
    weights of ~0.02 are far from the buffer's limit, and 2 bytes per weight more would cost 6 GB for a 3B agent)."""
    block = TinyBlock(torch.bfloat16)
    optimizer = build_adamw(block.parameters(), lr=1e-3)
    for p in block.parameters():
        p.grad = torch.ones_like(p)
    optimizer.step()
    assert optimizer.state[block.norm]["kahan_comp"].dtype == torch.float32
    assert optimizer.state[block.linear]["kahan_comp"].dtype == torch.bfloat16


def test_a_checkpoint_keeps_the_second_moment_in_float32():
    """torch's Optimizer.load_state_dict casts every floating state to its parameter's dtype (bf16): the optimizer
    puts the saved float32 second moment back, bit for bit; a checkpoint of older code (a bf16 one) loads as float32."""
    block = TinyBlock(torch.bfloat16)
    optimizer = build_adamw(block.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(0)
    for _ in range(3):
        for p in block.parameters():
            p.grad = torch.randn(p.shape, generator=generator).bfloat16()
        optimizer.step()
    state = saved_and_loaded(optimizer.state_dict())
    assert {slots["exp_avg_sq"].dtype for slots in state["state"].values()} == {torch.float32}
    loaded = build_adamw(block.parameters(), lr=1e-3)
    loaded.load_state_dict(state)
    for p in block.parameters():
        v = loaded.state[p]["exp_avg_sq"]
        assert v.dtype == torch.float32 and torch.equal(v, optimizer.state[p]["exp_avg_sq"])
        assert not torch.equal(v, v.bfloat16().float())   # (values a bf16 round trip would have changed)
        assert loaded.state[p]["exp_avg"].dtype == torch.bfloat16
        assert loaded.state[p]["kahan_comp"].dtype == (torch.float32 if p.dim() == 1 else torch.bfloat16)
        assert torch.equal(loaded.state[p]["kahan_comp"], optimizer.state[p]["kahan_comp"])
    for slots in state["state"].values():   # as older code saved it
        slots["exp_avg_sq"], slots["kahan_comp"] = slots["exp_avg_sq"].bfloat16(), slots["kahan_comp"].bfloat16()
    loaded.load_state_dict(state)
    assert {loaded.state[p]["exp_avg_sq"].dtype for p in block.parameters()} == {torch.float32}
    assert loaded.state[block.norm]["kahan_comp"].dtype == torch.float32


def test_sharded_weights_get_optimis_loop_and_a_float32_second_moment(tmp_path):
    """fsdp's sharded parameters are DTensors, which torch adds to the types optimi's kernel choice admits: on CUDA
    optimi would pick its Triton kernel for them (it would see the wrapper, not the shard), and its foreach path
    has no sharding rule for `_foreach_copy_`. The optimizer built for them (as cooprl.trainers.team builds it after
    fsdp.shard_model) runs the loop of torch ops: foreach and triton are off, the second moment is a float32
    DTensor laid out as its parameter, and a checkpoint's shard (cooprl.parallel.fsdp) loads back exactly. The loop
    runs on the local shards (no DTensor dispatch per op, ~5x slower on CPU) and steps as the unsharded model does."""
    from torch.distributed.tensor import DTensor

    from cooprl.parallel import fsdp
    from cooprl.models.loading import TINY_RANDOM, load_causal_lm
    torch.distributed.init_process_group("gloo", init_method=f"file://{tmp_path}/group", rank=0, world_size=1)
    try:
        model = fsdp.shard_model(load_causal_lm(TINY_RANDOM, torch_dtype="bfloat16", device="cpu"))
        twin = load_causal_lm(TINY_RANDOM, torch_dtype="bfloat16", device="cpu")
        params = [p for p in model.parameters() if p.requires_grad]
        assert params and all(isinstance(p, DTensor) for p in params)
        optimizer = build_adamw(params, lr=1e-3)
        twin_optimizer = build_adamw(twin.parameters(), lr=1e-3)
        assert [(group["foreach"], group["triton"]) for group in optimizer.param_groups] == [(False, False)]
        for lm in (model, twin):
            lm(input_ids=torch.tensor([[1, 2, 3, 4]])).logits.float().sum().backward()
        lists = [], [], [], [], []
        optimizer._init_group(optimizer.param_groups[0], *lists)
        assert all(type(t) is not DTensor for tensors in lists for t in tensors)
        optimizer.step()
        twin_optimizer.step()
        for p, q in zip(params, twin.parameters(), strict=True):
            assert torch.equal(p.to_local(), q.detach())
        for p in params:
            v = optimizer.state[p]["exp_avg_sq"]
            assert isinstance(v, DTensor) and v.dtype == torch.float32 and v.placements == p.placements
            assert optimizer.state[p]["kahan_comp"].dtype == (torch.float32 if p.dim() == 1 else torch.bfloat16)
        loaded = build_adamw(params, lr=1e-3)
        fsdp.load_local_optimizer_state(loaded, saved_and_loaded(fsdp.local_optimizer_state(optimizer)))
        for p in params:
            v = loaded.state[p]["exp_avg_sq"]
            assert v.dtype == torch.float32 and torch.equal(v.to_local(), optimizer.state[p]["exp_avg_sq"].to_local())
            assert loaded.state[p]["kahan_comp"].dtype == optimizer.state[p]["kahan_comp"].dtype
    finally:
        torch.distributed.destroy_process_group()


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


# ------------------------------------------------------------------ what the trainers build (agents, critics, reward
# model)
def tiny_config(*overrides):
    from cooprl.config import load_config
    return load_config(None, ["agent_model.name=offline:tiny-random", "agent_model.device=cpu", "wandb.mode=disabled",
                              *overrides])


def test_agents_critics_and_reward_models_in_bf16_get_the_kahan_optimizer_unless_pure():
    from cooprl.trainers.team import build_team
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
    """The reward model's trunk in bf16 at a small lr: the default moves the trunk, `pure` leaves most of it as it
    was."""
    from cooprl.models.loading import load_causal_lm, load_tokenizer
    from cooprl.preferences.pairs import PreferencePair
    from cooprl.preferences.reward_model import RewardModel, RewardTraining, train_reward_model
    from cooprl.models.value_model import ValueModel
    pairs = [PreferencePair(item_id=str(i), prompts=[f"task {i}"], chosen=["good answer"], rejected=["bad"],
                            chosen_reward=1.0, rejected_reward=0.0) for i in range(8)]

    def unchanged_share(mode):
        torch.manual_seed(0)
        lm = load_causal_lm("offline:tiny-random", device="cpu", torch_dtype="bfloat16")
        model = RewardModel(ValueModel(lm), load_tokenizer("offline:tiny-random"), 64)
        # the layers' matrices (an unused token's embedding row has no gradient to land)
        layers = [p for name, p in lm.named_parameters() if p.dim() == 2 and "embed" not in name]
        before = [p.detach().clone() for p in layers]
        train_reward_model(model, pairs, RewardTraining(learning_rate=2e-5, epochs=3, eval_fraction=0.0, seed=0,
                                                        batch_size=2, bf16_optimizer=mode))
        return sum((a == b).sum().item() for a, b in zip(layers, before)) / sum(b.numel() for b in before)

    assert unchanged_share("kahan") < 0.3 < 0.6 < unchanged_share("pure")


def test_a_float16_agent_is_refused_with_one_clear_error():
    from cooprl.trainers.team import build_team
    from cooprl.errors import UserError
    config = tiny_config("agent_model.torch_dtype=float16")
    with pytest.raises(UserError, match="float16 weights cannot be trained"):
        build_team(Run.of(config, "magrpo"), 1)
    lora = tiny_config("agent_model.torch_dtype=float16", "agent_model.lora.r=4")
    agent, = build_team(Run.of(lora, "magrpo"), 1)   # float32 adapters over frozen float16 weights train
    assert {p.dtype for p in agent.model.parameters() if p.requires_grad} == {torch.float32}


@pytest.mark.slow   # 8,000 optimizer steps: ~7 s
def test_the_bf16_bench_runs_2000_nonstationary_steps_by_default(monkeypatch, capsys):
    """bench/bf16_updates.py with its defaults (on 1,000 weights): 2,000 steps whose gradient scale drops at step
    700, the four runs' retention and second-moment error, and the summary line last, with the norm weights' own."""
    import runpy
    import sys
    from pathlib import Path
    bench = Path(__file__).resolve().parents[3] / "bench" / "bf16_updates.py"
    monkeypatch.setattr(sys, "argv", ["bf16_updates.py", "--device", "cpu", "--size", "1000"])
    runpy.run_path(str(bench), run_name="__main__")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "1000 + 64 weights, gradient scale x0.1 from step 700"
    figures = {tuple(line.split(":")[0].split()): line for line in lines[1:-1]}
    assert set(figures) == {(run, part) for run in ("pure", "optimi", "default") for part in ("matrix", "norm", "all")}

    def figure(run: str, name: str, part: str = "all") -> float:
        return float(figures[(run, part)].split(f"{name} ")[1].split(",")[0].rstrip("%"))
    assert figure("default", "v error") < 0.01 and figure("optimi", "v ratio") > 3 and figure("pure", "v ratio") > 2
    assert abs(figure("default", "retention") - 1) < 0.02 and figure("pure", "retention") < 0.5
    assert figure("default", "retention", "norm") >= 0.9
    assert lines[-1].startswith("bf16 update retention (cpu, lr 2e-05, 2000 steps): pure 0.")
    assert lines[-1].endswith(f"default {figure('default', 'retention'):.3f}, "
                              f"norm {figure('default', 'retention', 'norm'):.3f}")
