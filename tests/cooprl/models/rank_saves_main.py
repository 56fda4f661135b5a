"""Run under `torchrun --nproc_per_node 2` by test_rank_saves.py: every way the project writes a model, done by each
rank with the process group initialized, into <out>/rank_<r>/<path>; rank 1 alone fills the (empty) model cache."""

import sys
from pathlib import Path

import torch
import torch.distributed as dist

from cooprl.checkpoint import save_checkpoint, save_model
from cooprl.config import LoraSection
from cooprl.models.loading import (TINY_RANDOM, add_lora, load_causal_lm, resolve_model_path,
                                   save_pretrained_on_this_rank)
from cooprl.models.value_model import ValueModel

dist.init_process_group("gloo")
rank, out = dist.get_rank(), Path(sys.argv[1])
if rank == 1:   # the first process to need the embedded model is not rank 0
    resolve_model_path(TINY_RANDOM)
dist.barrier()
mine = out / f"rank_{rank}"
model = load_causal_lm(TINY_RANDOM, device="cpu", torch_dtype="float32")
save_model(model, mine / "final" / "agent_0")                                         # final models, policy snapshots
save_model(model, mine / "gathered" / "agent_0", {k: v.clone() for k, v in model.state_dict().items()})   # fsdp's
save_checkpoint(mine / "checkpoints", 1, [model], {"note": "two ranks"})
ValueModel(load_causal_lm(TINY_RANDOM, device="cpu", torch_dtype="float32")).save_pretrained(mine / "critic")
adapted = add_lora(load_causal_lm(TINY_RANDOM, device="cpu"), LoraSection(r=2, alpha=4, target_modules=["q_proj"]))
save_pretrained_on_this_rank(adapted, mine / "vllm_adapter")                           # a rank's own vLLM adapter
torch.manual_seed(0)
ids = torch.tensor([[1, 2, 3]])
print(f"rank {rank} logits {model(ids).logits.sum().item():.6f}", flush=True)
dist.barrier()
dist.destroy_process_group()
