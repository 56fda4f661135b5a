"""One sharded policy-gradient update under torchrun, checked against the same update in one process (run by
tests/test_scale_out.py): `torchrun --nproc_per_node 2 tests/fsdp_update_main.py CASE OUT.json`.

Rank 0 holds 3 samples with 3 prompts (3 forward batches of one), rank 1 one sample (one batch), or, in case
`idle`, only zero-advantage samples (no batch at all): the sharded update must pad rank 1's passes, and its
summed gradient must equal one process's update on all 4 samples. Case `kl` adds the loss-form KL to the frozen start
model (LoRA adapters off: one more forward per pass); case `nonfinite` makes rank 1's loss infinite: both ranks skip
the step and keep their weights; case `checkpointing` recomputes activations in the backward (gradient
checkpointing: each block's forward runs again, gathering its shards again). Case `dpo_idle`: MADPO's DPO step with pairs on rank 0 only (rank 1 pads)."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]

import torch  # noqa: E402

from cooprl import distributed, fsdp  # noqa: E402
from cooprl.policy_update import TrainSample, frozen_reference, policy_gradient_step  # noqa: E402

PAD = 0


def tiny_model(lora: bool) -> torch.nn.Module:
    """Return a seeded 2-layer Llama (hidden 64), with LoRA adapters on q/v when `lora`."""
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


def samples_of_every_rank(case: str) -> list[list[TrainSample]]:
    """Return each rank's samples: rank 0 three prompts, rank 1 one (zero advantages in case `idle`)."""
    generator = torch.Generator().manual_seed(1)

    def sample(advantage: float) -> TrainSample:
        prompt = torch.randint(1, 50, (5,), generator=generator)
        return TrainSample(prompt, torch.randint(1, 50, (4,), generator=generator), advantage)
    rank0 = [sample(1.0), sample(-0.5), sample(2.0)]
    rank1 = [sample(0.0), sample(0.0)] if case == "idle" else [sample(-1.5)]
    return [rank0, rank1]


def dpo_idle(out: Path) -> None:
    """MADPO's DPO step under fsdp with pairs on rank 0 only: rank 1 runs a padding pass; the sharded step equals one
    process's step on rank 0's pairs."""
    from cooprl.config import load_config
    from cooprl.preferences import PreferencePair
    from cooprl.trainers.loop import seed_everything
    from cooprl.trainers.madpo import build_madpo
    from tests.learnable import build_char_model, lowercase_task

    model = out.parent / "char"
    if distributed.current().rank == 0:
        build_char_model(model)
    torch.distributed.barrier()
    overrides = [f"agent_model.name={model}", "agent_model.device=cpu", "agent_model.torch_dtype=float32",
                 "madpo.num_agents=2", "madpo.num_turns=1", "madpo.max_new_tokens=6", "madpo.learning_rate=1e-2",
                 "madpo.max_grad_norm=1.0", "madpo.train_batch_size=null", "madpo.rollout_buffer_size=null",
                 "wandb.mode=disabled"]
    task = lowercase_task(2, items=4)
    pairs = [PreferencePair(f"item{i}", ["Say:", "Say:"], ["abc", "xyz"], ["ABC", "X!Z"], 1.0, 0.0)
             for i in range(2)] + [PreferencePair("item2", ["Go", "Go"], ["hello", "world"], ["HeLLo", "W0rld"], 1.0, 0.5)]
    mine = pairs if distributed.current().rank == 0 else []
    seed_everything(0)
    sharded = build_madpo(load_config(None, [*overrides, "madpo.parallel_training=fsdp"]), "madpo", task)
    metrics = sharded.update(mine, [1.0, 2.0, 0.5][:len(mine)])
    weights = list(fsdp.whole_state_dicts(sharded.models))
    if distributed.current().rank == 0:
        seed_everything(0)
        single = build_madpo(load_config(None, overrides), "madpo", task)
        start = [{k: v.clone() for k, v in m.state_dict().items()} for m in single.models]
        single.update(pairs, [1.0, 2.0, 0.5])
        result = {"difference": max((w[k] - m.state_dict()[k]).abs().max().item()
                                    for w, m in zip(weights, single.models) for k in w),
                  "moved": max((w[k] - s0[k]).abs().max().item() for w, s0 in zip(weights, start) for k in w),
                  "metrics": metrics}
        out.write_text(json.dumps(result))


def main(case: str, out: Path) -> None:
    torch.distributed.init_process_group("gloo")
    if case == "dpo_idle":
        dpo_idle(out)
        torch.distributed.destroy_process_group()
        return
    rank = distributed.current().rank
    lora = case in ("kl", "lora")
    every = samples_of_every_rank(case)
    if case == "nonfinite" and rank == 1:
        every[1][0].advantage = float("inf")
    kl_coef = 0.5 if case == "kl" else 0.0

    model = tiny_model(lora)
    if case == "checkpointing":   # recomputed activations: every block runs its forward again in the backward
        model.gradient_checkpointing_enable()
    single = copy.deepcopy(model)   # the same start, trained in this process alone on every sample
    start = {k: v.clone() for k, v in model.state_dict().items()}
    fsdp.shard_model(model)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    distributed.mark_data_parallel(optimizer, sharded=True)
    metrics = policy_gradient_step(model, optimizer, every[rank], PAD, batch_size=1, max_grad_norm=1.0,
                                   kl_coef=kl_coef, reference=frozen_reference(model) if kl_coef else None)
    sharded = fsdp.full_state_dict(model)

    if rank == 0:
        single_optimizer = torch.optim.AdamW([p for p in single.parameters() if p.requires_grad], lr=1e-2)
        reference = frozen_reference(single) if kl_coef else None
        if case == "nonfinite":
            expected = start
        else:
            policy_gradient_step(single, single_optimizer, every[0] + every[1], PAD, batch_size=1,
                                 max_grad_norm=1.0, kl_coef=kl_coef, reference=reference)
            expected = single.state_dict()
        result = {"difference": max((sharded[k] - expected[k]).abs().max().item() for k in expected),
                  "moved": max((sharded[k] - start[k]).abs().max().item() for k in start),
                  "metrics": metrics}
        out.write_text(json.dumps(result))
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
