"""Sharded data-parallel training (issue 16, `parallel_training: fsdp`): its config rules, the one resume test of a
data-parallel run and the one accelerate launch (gloo on CPU), and the per-process checkpoint files. The padded
update's equality with one process is tests/cooprl/update/test_engine_distributed.py (in-process); the trainers'
command lines under torchrun are tests/cooprl/parallel/test_scale_out.py. A file of its own so that pytest-xdist's
loadfile runs it beside test_scale_out.py."""

from pathlib import Path

import pytest
import torch

from cooprl.config import ConfigError, load_config
from tests.cooprl.parallel.test_scale_out import (ACCELERATE, DDP_OVERRIDES, TORCHRUN, agent_weights, launch,
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


# The sharded run of the resume test (LoRA dropout off: its masks draw from each process's generator);
# rollout_buffer_size 2 so that the checkpoint of step 1 holds a buffered item on each rank, and the update at step 2;
# chunked log-probs (the docs recommend both for memory: the LM head runs inside the root unit's forward)
ADAPTERS = ["agent_model.lora.r=4", "agent_model.lora.dropout=0.0", "magrpo.learning_rate=1e-3"]
RESUMABLE = ["magrpo.rollout_buffer_size=2", "checkpoint.checkpoint_interval=1", "agent_model.logprob_chunk_size=4",
             *ADAPTERS]
STRAIGHT = [*RESUMABLE, "magrpo.max_steps=2", "output.save_final_model=true"]


@pytest.fixture(scope="module")
def straight(tmp_path_factory) -> Path:
    """Return the folder of one uninterrupted 2-step sharded run under torchrun, `straight` in it: the resume test
    and the accelerate test each compare theirs with it (one launch fewer for each)."""
    if not TORCHRUN.exists():
        pytest.skip("torchrun is not in the interpreter's folder")
    base = tmp_path_factory.mktemp("fsdp")
    launch(base, "straight", 2, STRAIGHT, base=FSDP_OVERRIDES)
    return base


@pytest.mark.distributed
@pytest.mark.skipif(not TORCHRUN.exists(), reason="torchrun is not in the interpreter's folder")
def test_resumed_run_ends_where_the_uninterrupted_one_does(tmp_path, straight):
    # The one resume test of a data-parallel run: sharded LoRA agents (fsdp, chunked log-probs); a run resumed at
    # step 1 (each rank's buffer and optimizer shard) ends bit for bit where the uninterrupted one does; the checkpoint
    # and the final models hold the adapters in the usual layout (gathered); a resume without sharding is refused.
    # The 2-vs-1-process equality of the sharded update: tests/cooprl/update/test_engine_distributed.py.
    launch(tmp_path, "resumed", 2, [*RESUMABLE, "magrpo.max_steps=1"], base=FSDP_OVERRIDES)
    launch(tmp_path, "resumed", 2, [*RESUMABLE, "magrpo.max_steps=2", "checkpoint.resume_from_checkpoint=latest"],
           base=FSDP_OVERRIDES)
    for agent in (0, 1):
        straight_weights = agent_weights(straight / "straight/checkpoints/checkpoint-2", agent)
        assert straight_weights and all("lora_" in k for k in straight_weights)   # the adapters, as unsharded
        resumed = agent_weights(tmp_path / "resumed/checkpoints/checkpoint-2", agent)
        assert sorted(straight_weights) == sorted(resumed)
        assert all(torch.equal(straight_weights[k], resumed[k]) for k in straight_weights)
        final = agent_weights(straight / "straight/final", agent)
        assert all(torch.equal(straight_weights[k], final[k]) for k in straight_weights)
    assert update_events(straight / "straight") == update_events(tmp_path / "resumed") != []

    # A resume without sharding is refused. The refusal is TeamAlgorithm.load_state_dict's, the same function whether
    # a launch of 2 ddp processes or this process (neither sharded) reads the checkpoint's state: checked here, in
    # process, on the sharded checkpoint (a launch only to see it refuse cost ~15 s).
    from cooprl.checkpoint import load_trainer_state
    from cooprl.config import Run
    from cooprl.trainers.magrpo import build_magrpo
    from tests.scripted import scripted_task
    unsharded = build_magrpo(Run.of(load_config(None, ["agent_model.name=offline:tiny-random",
                                                       "agent_model.device=cpu", *ADAPTERS]), "magrpo"),
                             scripted_task())
    assert not unsharded.sharded
    state = load_trainer_state(tmp_path / "resumed/checkpoints/checkpoint-2")
    with pytest.raises(ValueError, match=r"optimizers are sharded \(parallel_training fsdp\); resume with the "
                                         "parallel_training that wrote it"):
        unsharded.load_state_dict(state["algorithm"])


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
def test_accelerate_launch_trains_as_torchrun_does(tmp_path, straight):
    # `accelerate launch --multi_gpu --num_processes 2` starts the same processes as torchrun (it runs
    # torch.distributed.run): the same sharded run gives the same weights, bit for bit. The torchrun run is the resume
    # test's uninterrupted one (sharded LoRA agents, one update at step 2), launched once for both tests.
    result = launch(tmp_path, "accelerated", 2, STRAIGHT, base=FSDP_OVERRIDES, launcher="accelerate")
    assert "data-parallel rank 1 of 2 (gloo)" in result.stderr
    for agent in (0, 1):
        a = agent_weights(tmp_path / "accelerated/checkpoints/checkpoint-2", agent)
        b = agent_weights(straight / "straight/checkpoints/checkpoint-2", agent)
        assert a and sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a)


def test_sampling_a_sharded_model_sets_no_attribute_on_it(monkeypatch):
    # full_weights records which sharded models are gathered in cooprl.parallel.fsdp's own set: nothing named cooprl_*
    # is
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
