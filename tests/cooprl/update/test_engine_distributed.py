"""The distributed contract of the update engine (cooprl.update.engine), proved once and in-process: two processes
(torch.multiprocessing.spawn, gloo on CPU) take one optimizer step each on their own samples, and the weights equal
one process's step on all the samples. Every case runs in the same spawn (one start-up for all):

- `padded`: a sharded policy (fsdp), rank 0 with 3 forward batches and rank 1 with 1: rank 1's passes are padded;
- `idle`: rank 1 holds only zero-advantage samples, so no batch at all: every pass of its step is padding;
- `kl`: LoRA adapters and the loss-form KL to the adapter-off model (one more forward per pass);
- `checkpointing`: gradient checkpointing (each block's forward runs again in the backward, gathering its shards);
- `replicated`: ddp, the processes' gradients averaged by sample count (3 samples against 1);
- `nonfinite` and `nonfinite_replicated`: rank 1's loss is infinite, rank 0's finite: both skip the step;
- `dpo`: a DPO-shaped loss over two sharded models and their two optimizers, pairs on rank 0 only;
- `critic`: a value model's squared-error loss, replicated (a separate critic under ddp or fsdp);
- `kahan`: the default bf16 optimizer over a sharded bf16 model, the same sample on both ranks (exact equality).

The optimizer is plain SGD, so an equality cannot fail on the last bits that Adam's sign-like first steps amplify:
the weights' change is lr x the gradient, and two processes agree with one to float32 rounding (< 1e-6).
"""

from __future__ import annotations

import copy
import json
import os
import socket
from pathlib import Path

import pytest
import torch

from cooprl.models.logprobs import completion_logprobs
from cooprl.parallel import distributed, fsdp
from cooprl.samples import TrainSample
from cooprl.parallel.context import SINGLE, Parallel
from cooprl.update.engine import Sync, Term, optimizer_step
from cooprl.update.losses import madpo_losses, value_errors
from cooprl.update.policy_gradient import frozen_reference
from tests.scripted import policy_gradient_step

PAD = 0
LR = 1e-1
POLICY_CASES = ("padded", "idle", "kl", "checkpointing", "replicated", "nonfinite", "nonfinite_replicated")
CASES = (*POLICY_CASES, "dpo", "critic")


def tiny_model(lora: bool = False) -> torch.nn.Module:
    """Return a seeded 2-layer Llama (hidden 64, tied embeddings), with LoRA adapters on q/v when `lora`."""
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=50, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    model = LlamaForCausalLM(config)
    if lora:
        from peft import LoraConfig, get_peft_model
        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                 init_lora_weights=False))
    return model


def parallel_of(sync: Sync) -> Parallel:
    """Return the parallel context whose step syncs as `sync` (a sharded model syncs as sharded in any)."""
    return SINGLE if sync is Sync.NONE else Parallel("ddp", distributed.current())


def ids(generator: torch.Generator, n: int) -> torch.Tensor:
    return torch.randint(1, 50, (n,), generator=generator)


def samples_of_every_rank(case: str) -> list[list[TrainSample]]:
    """Return each rank's samples: rank 0 three prompts, rank 1 one (two zero-advantage ones in case `idle`)."""
    generator = torch.Generator().manual_seed(1)

    def sample(advantage: float) -> TrainSample:
        return TrainSample(ids(generator, 5), ids(generator, 4), advantage)
    rank0 = [sample(1.0), sample(-0.5), sample(2.0)]
    rank1 = [sample(0.0), sample(0.0)] if case == "idle" else [sample(-1.5)]
    if case.startswith("nonfinite"):
        rank1[0].advantage = float("inf")
    return [rank0, rank1]


def difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max((a[k].float() - b[k].float()).abs().max().item() for k in b)


def policy_case(case: str, rank: int) -> dict:
    """One policy-gradient step on each rank's samples (sharded, or replicated); on rank 0 the report against one
    process's step on every sample."""
    every = samples_of_every_rank(case)
    kl_coef = 0.5 if case == "kl" else 0.0
    model = tiny_model(lora=case == "kl")
    if case == "checkpointing":
        model.gradient_checkpointing_enable()
    single, start = copy.deepcopy(model), {k: v.clone() for k, v in model.state_dict().items()}
    sharded = case not in ("replicated", "nonfinite_replicated")
    if sharded:
        fsdp.shard_model(model)
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=LR)
    metrics = policy_gradient_step(model, optimizer, every[rank], PAD, batch_size=1, max_grad_norm=1.0,
                                   kl_coef=kl_coef, reference=frozen_reference(model) if kl_coef else None,
                                   sync=Sync.SHARDED if sharded else Sync.REPLICATED)
    trained = fsdp.full_state_dict(model) if sharded else model.state_dict()
    if rank != 0:
        return {}
    if case.startswith("nonfinite"):
        expected = start
    else:
        single_optimizer = torch.optim.SGD([p for p in single.parameters() if p.requires_grad], lr=LR)
        policy_gradient_step(single, single_optimizer, every[0] + every[1], PAD, batch_size=1, max_grad_norm=1.0,
                             kl_coef=kl_coef, reference=frozen_reference(single) if kl_coef else None)
        expected = single.state_dict()
    return {"difference": difference(trained, expected), "moved": difference(trained, start), "metrics": metrics}


def dpo_case(rank: int) -> dict:
    """A DPO step of two sharded policies, 3 pairs on rank 0 and none on rank 1 (its pass is padding)."""
    generator = torch.Generator().manual_seed(2)
    pairs = [(ids(generator, 4), ids(generator, 3), ids(generator, 3)) for _ in range(3)]
    weights = [1.0, 2.0, 0.5]
    padding = [(torch.tensor([PAD]), torch.tensor([PAD]), torch.tensor([PAD]))]

    def step(models: list, optimizers: list, mine: list, mine_weights: list[float], sync: Sync) -> dict:
        weight = float(sum(mine_weights))

        def loss(batch, denominator):
            batch_pairs, batch_weights = batch
            deltas = []
            for model in models:
                logps, _ = completion_logprobs(model, [p for p, _, _ in batch_pairs] * 2,
                                               [c for _, c, _ in batch_pairs] + [r for _, _, r in batch_pairs], PAD)
                seq = logps.sum(-1)
                deltas.append(seq[:len(batch_pairs)] - seq[len(batch_pairs):])
            losses = madpo_losses(torch.stack(deltas), 0.5, torch.tensor(batch_weights))
            return losses.sum() * (weight / denominator if denominator else 0.0), {"dpo_loss": losses[0].item()}
        result = optimizer_step(optimizers, [Term([(mine, mine_weights)] if mine else [], loss,
                                                  padding=(padding, [1.0]))],
                                models, weight=weight, max_grad_norm=1.0, parallel=parallel_of(sync))
        return {"skipped": result.skipped, "grad_norms": result.grad_norms, **result.metrics}

    models = [tiny_model(), tiny_model()]
    with torch.no_grad():   # two different policies
        next(models[1].parameters()).add_(0.1)
    singles = [copy.deepcopy(m) for m in models]
    start = [{k: v.clone() for k, v in m.state_dict().items()} for m in models]
    for model in models:
        fsdp.shard_model(model)
    optimizers = [torch.optim.SGD(m.parameters(), lr=LR) for m in models]
    metrics = step(models, optimizers, pairs if rank == 0 else [], weights if rank == 0 else [], Sync.SHARDED)
    trained = [fsdp.full_state_dict(m) for m in models]
    if rank != 0:
        return {}
    step(singles, [torch.optim.SGD(m.parameters(), lr=LR) for m in singles], pairs, weights, Sync.NONE)
    return {"difference": max(difference(t, s.state_dict()) for t, s in zip(trained, singles)),
            "moved": min(difference(t, s0) for t, s0 in zip(trained, start)), "metrics": metrics}


def critic_case(rank: int) -> dict:
    """A value model's step on 3 samples (rank 0) and 1 (rank 1), replicated: the sample-weighted mean gradient."""
    from cooprl.models.value_model import ValueModel
    generator = torch.Generator().manual_seed(3)
    every = [[(ids(generator, 6), float(t)) for t in (1.0, -2.0, 0.5)], [(ids(generator, 6), 3.0)]]

    def step(critic: ValueModel, samples: list, sync: Sync) -> None:
        def loss(batch, denominator):
            values = critic.values([x for x, _ in batch], None, PAD)
            targets = torch.tensor([t for _, t in batch])
            return 0.5 * value_errors(values, targets, targets, None).sum() / denominator, {}
        optimizer = torch.optim.SGD(critic.head_parameters() + critic.trunk_parameters(), lr=LR)
        batches = [b for b in (samples[:2], samples[2:]) if b]
        optimizer_step([optimizer], [Term(batches, loss)], [critic], weight=len(samples), max_grad_norm=None,
                       parallel=parallel_of(sync))

    critic = ValueModel(tiny_model())
    single = copy.deepcopy(critic)
    start = {k: v.clone() for k, v in critic.state_dict().items()}
    step(critic, every[rank], Sync.REPLICATED)
    if rank != 0:
        return {}
    step(single, every[0] + every[1], Sync.NONE)
    return {"difference": difference(critic.state_dict(), single.state_dict()),
            "moved": difference(critic.state_dict(), start), "metrics": {}}


def kahan_case(rank: int) -> dict:
    """Three steps of the default bf16 optimizer (cooprl.update.optim.KahanAdamW: optimi's loop, a float32 second
    moment) on a sharded bf16 model, the same sample on both ranks, against one process's steps on it: each rank's
    loss is half the sample's, so the summed gradient is the single one exactly, and so must be every weight and
    moment."""
    from cooprl.update.optim import build_adamw
    sample = [ids(torch.Generator().manual_seed(4), 9)]

    def loss_of(model):
        def loss(batch, denominator):
            logps, mask = completion_logprobs(model, [batch[0][:5]], [batch[0][5:]], PAD)
            return -(logps * mask).sum() / denominator, {}
        return loss

    def steps(model, sync: Sync) -> torch.optim.Optimizer:
        optimizer = build_adamw(model.parameters(), lr=1e-3)
        for _ in range(3):
            optimizer_step([optimizer], [Term([sample], loss_of(model), padding=sample)], [model], weight=1.0,
                           max_grad_norm=None, parallel=parallel_of(sync))
        return optimizer

    model = tiny_model().to(torch.bfloat16)
    single = copy.deepcopy(model)
    fsdp.shard_model(model)
    optimizer = steps(model, Sync.SHARDED)
    trained = fsdp.full_state_dict(model)
    moments = {name: optimizer.state[p]["exp_avg_sq"] for name, p in model.named_parameters()}
    flags = [(group["foreach"], group["triton"]) for group in optimizer.param_groups]
    moments = {name: (str(v.dtype), type(v).__name__, v.full_tensor()) for name, v in moments.items()}
    if rank != 0:
        return {}
    single_optimizer = steps(single, Sync.NONE)
    return {"difference": difference(trained, single.state_dict()),
            "moment_difference": max((moments[name][2] - single_optimizer.state[p]["exp_avg_sq"]).abs().max().item()
                                     for name, p in single.named_parameters()),
            "moment_types": sorted({f"{dtype} {kind}" for dtype, kind, _ in moments.values()}), "flags": flags,
            "moved": difference(trained, {k: v for k, v in tiny_model().to(torch.bfloat16).state_dict().items()})}


def worker(rank: int, port: int, out: str) -> None:
    """One of the two processes: join the gloo group, run every case, rank 0 writes the reports to `out`."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2",
                      LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", rank=rank, world_size=2)
    try:
        reports = {case: policy_case(case, rank) for case in POLICY_CASES}
        reports["dpo"] = dpo_case(rank)
        reports["critic"] = critic_case(rank)
        reports["kahan"] = kahan_case(rank)
        assert distributed.current().world_size == 2
        if rank == 0:
            Path(out).write_text(json.dumps(reports))
    finally:
        torch.distributed.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("engine") / "reports.json"
    torch.multiprocessing.spawn(worker, args=(free_port(), str(out)), nprocs=2, join=True)
    return json.loads(out.read_text())


@pytest.mark.distributed
@pytest.mark.parametrize("case", CASES)
def test_two_processes_step_as_one_process_on_all_samples(reports, case):
    report = reports[case]
    assert report["difference"] < 1e-6, report
    if case.startswith("nonfinite"):   # rank 1's infinite loss: every rank skips the step and keeps its weights
        assert report["moved"] == 0.0 and report["metrics"]["skipped_nonfinite"] == 1.0, report
    else:
        assert report["moved"] > 1e-3, report   # the step did move the weights
        assert report["metrics"].get("skipped_nonfinite", 0.0) == 0.0 and not report["metrics"].get("skipped")
    if case == "kl":
        assert report["metrics"]["kl"] > 0
    if case == "dpo":
        assert report["metrics"]["dpo_loss"] > 0 and all(norm > 0 for norm in report["metrics"]["grad_norms"])


@pytest.mark.distributed
def test_the_bf16_optimizer_steps_over_shards_as_over_the_whole_model(reports):
    """fsdp's DTensor parameters get optimi's loop (foreach and triton off) and a float32 second moment sharded as
    its parameter; three steps over two shards equal one process's steps bit for bit, weights and moments."""
    report = reports["kahan"]
    assert report["flags"] == [[False, False]]
    assert report["moment_types"] == ["torch.float32 DTensor"]
    assert report["difference"] == 0.0 and report["moment_difference"] == 0.0
    assert report["moved"] > 1e-3
