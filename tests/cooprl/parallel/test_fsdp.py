"""Sharded data-parallel training (issue 16, `parallel_training: fsdp`): its config rules, the one resume test of a
data-parallel run and the one accelerate launch (gloo on CPU), and the per-process checkpoint files. The padded
update's equality with one process is tests/cooprl/update/test_engine_distributed.py (in-process); the trainers' command lines
under torchrun are tests/cooprl/parallel/test_scale_out.py. A file of its own so that pytest-xdist's loadfile runs it beside
test_scale_out.py."""

import os
import subprocess
from pathlib import Path

import pytest
import torch

from cooprl.config import ConfigError, load_config
from tests.cooprl.parallel.test_scale_out import (ACCELERATE, DDP_OVERRIDES, ROOT, TORCHRUN, agent_weights, launch,
                                  update_events)

@pytest.mark.parametrize("override,message", [
    (["madpo.parallel_training=fsdp", "madpo.train_batch_size=null", "madpo.rollout_buffer_size=null",
      "madpo.reference_model=true", "agent_model.lora=null"], "madpo.reference_model with parallel_training fsdp"),
    (["iac.parallel_training=fsdp", "iac.update_schedule=episodes", "iac.train_batch_size=null",
      "iac.use_separate_critic=false"], "iac.use_separate_critic=false with parallel_training fsdp"),
    (["magrpo.parallel_training=fsdp", "magrpo.update_schedule=items", "agent_model.generation_backend=vllm"],
     "magrpo.parallel_training: fsdp samples with the gathered HF model"),
    (["grpo.parallel_training=fsdp", "grpo.update_schedule=items", "grpo.reference_kl_coef=0.1"],
     "grpo.reference_kl_coef > 0 with parallel_training fsdp needs agent_model.lora"),
    ("magrpo.parallel_training=fsdp", "magrpo.parallel_training: fsdp needs the same number of optimizer steps"),
])
def test_fsdp_rules_are_config_errors(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, override if isinstance(override, list) else [override])


FSDP_OVERRIDES = [o.replace("=ddp", "=fsdp") for o in DDP_OVERRIDES]


@pytest.mark.distributed
@pytest.mark.skipif(not TORCHRUN.exists(), reason="torchrun is not in the interpreter's folder")
def test_resumed_run_ends_where_the_uninterrupted_one_does(tmp_path):
    # The one resume test of a data-parallel run: sharded LoRA agents (fsdp), rollout_buffer_size 2 so that the
    # checkpoint of step 1 holds a buffered item on each rank; a run resumed there (each rank's buffer and optimizer
    # shard) ends bit for bit where the uninterrupted one does; the checkpoint and the final models hold the adapters in
    # the usual layout (gathered); a resume without sharding is refused. (LoRA dropout off: its masks draw from each
    # process's generator.) The 2-vs-1-process equality of the sharded update: tests/cooprl/update/test_engine_distributed.py.
    adapters = ["agent_model.lora.r=4", "agent_model.lora.dropout=0.0", "magrpo.learning_rate=1e-3"]
    common = ["magrpo.rollout_buffer_size=2", "checkpoint.checkpoint_interval=1", *adapters]
    launch(tmp_path, "straight", 2, [*common, "magrpo.max_steps=2", "output.save_final_model=true"],
           base=FSDP_OVERRIDES)
    launch(tmp_path, "resumed", 2, [*common, "magrpo.max_steps=1"], base=FSDP_OVERRIDES)
    launch(tmp_path, "resumed", 2, [*common, "magrpo.max_steps=2", "checkpoint.resume_from_checkpoint=latest"],
           base=FSDP_OVERRIDES)
    for agent in (0, 1):
        straight = agent_weights(tmp_path / "straight/checkpoints/checkpoint-2", agent)
        assert straight and all("lora_" in k for k in straight)   # the adapters, as an unsharded save writes them
        resumed = agent_weights(tmp_path / "resumed/checkpoints/checkpoint-2", agent)
        assert sorted(straight) == sorted(resumed) and all(torch.equal(straight[k], resumed[k]) for k in straight)
        final = agent_weights(tmp_path / "straight/final", agent)
        assert all(torch.equal(straight[k], final[k]) for k in straight)
    assert update_events(tmp_path / "straight") == update_events(tmp_path / "resumed") != []

    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(Path.home()), "OMP_NUM_THREADS": "1",
           "WANDB_MODE": "disabled"}
    result = subprocess.run([str(TORCHRUN), "--standalone", "--nproc_per_node=2", "train_magrpo.py", "--config",
                             "configs/magrpo_che_config.yaml", "--override", *DDP_OVERRIDES, *adapters,
                             f"output.base_dir={tmp_path}", "output.run_name=resumed", "magrpo.rollout_buffer_size=2",
                             "magrpo.max_steps=3", "checkpoint.resume_from_checkpoint=latest"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert "optimizers are sharded (parallel_training fsdp); resume with the parallel_training that wrote it" in \
        result.stderr


def test_every_ranks_state_is_its_own_file_and_a_missing_one_is_damage(tmp_path):
    # rank 0 writes each process's state (buffers, optimizer shards) as it receives it: rank_<r>.pt; a resume reads
    # its own; a checkpoint that lacks one is damaged, named as such (and `latest` falls back past it)
    from safetensors.torch import save_file
    from cooprl import checkpoint as ckpt
    model = torch.nn.Linear(2, 2)

    def save_pretrained(folder: Path) -> None:
        folder.mkdir(parents=True)
        save_file(model.state_dict(), folder / "model.safetensors")
    model.save_pretrained = save_pretrained
    state = {"algorithm": {}, "env_step": 3, "world_size": 2}
    path = ckpt.save_checkpoint(tmp_path, 5, [model], state, rank_states=iter([{"buffer": [1]}, {"buffer": [2, 3]}]))
    assert sorted(p.name for p in path.glob("rank_*.pt")) == ["rank_0.pt", "rank_1.pt"]
    assert ckpt.load_rank_state(path, ckpt.load_trainer_state(path), 1) == {"buffer": [2, 3]}
    ckpt.check_checkpoint(path)
    (path / "rank_1.pt").unlink()
    with pytest.raises(ckpt.CheckpointError, match="checkpoint-5 is damaged: rank_1.pt is missing"):
        ckpt.check_checkpoint(path)



@pytest.mark.distributed
@pytest.mark.skipif(not ACCELERATE.exists(), reason="accelerate is not in the interpreter's folder")
def test_accelerate_launch_trains_as_torchrun_does(tmp_path):
    # `accelerate launch --multi_gpu --num_processes 2` starts the same processes as torchrun (it runs
    # torch.distributed.run): the same sharded run gives the same weights, bit for bit
    common = ["magrpo.rollout_buffer_size=1", "magrpo.max_steps=1"]
    result = launch(tmp_path, "accelerated", 2, common, base=FSDP_OVERRIDES, launcher="accelerate")
    launch(tmp_path, "torchrun", 2, common, base=FSDP_OVERRIDES)
    assert "data-parallel rank 1 of 2 (gloo)" in result.stderr
    for agent in (0, 1):
        a = agent_weights(tmp_path / "accelerated/checkpoints/checkpoint-1", agent)
        b = agent_weights(tmp_path / "torchrun/checkpoints/checkpoint-1", agent)
        assert all(torch.equal(a[k], b[k]) for k in a)


def test_sampling_a_sharded_model_sets_no_attribute_on_it(monkeypatch):
    # full_weights records which sharded models are gathered in cooprl.parallel.fsdp's own set: nothing named cooprl_* is
    # planted on the torch model (or any of its modules), during sampling or after it. One gloo process is enough to
    # shard (FSDP2 over a world of 1) and to run the gathered-sampling path with its check.
    from cooprl.parallel import fsdp
    from cooprl.rollout.generation import HFGenerator, SamplingParams
    from cooprl.models.loading import load_causal_lm, load_tokenizer

    def planted(model: torch.nn.Module) -> list[str]:
        return [name for module in model.modules() for name in vars(module) if name.startswith("cooprl")]

    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29617")
    torch.distributed.init_process_group("gloo", rank=0, world_size=1)
    try:
        model = fsdp.shard_model(load_causal_lm("offline:tiny-random", torch_dtype="float32", device="cpu"))
        generator = HFGenerator(model, load_tokenizer("offline:tiny-random"), max_prompt_tokens=32)
        params = SamplingParams(max_new_tokens=4, temperature=1.0, top_p=1.0)
        with pytest.raises(RuntimeError, match="must run inside cooprl.parallel.fsdp.full_weights"):
            generator.sample(["def f(x):"], 1, params)
        with fsdp.full_weights(model):
            assert fsdp.is_gathered(model) and planted(model) == []
            generator.sample(["def f(x):"], 2, params)
        assert not fsdp.is_gathered(model) and planted(model) == []
    finally:
        torch.distributed.destroy_process_group()
