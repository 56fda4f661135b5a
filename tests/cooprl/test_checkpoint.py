"""cooprl.checkpoint: what a trainer's state may hold, and states saved by earlier versions."""

from pathlib import Path

import torch

from cooprl import checkpoint as ckpt
from cooprl.samples import CriticSample, NodeGroup, Step, TrainSample


def test_buffer_records_round_trip_through_plain_data():
    sample = TrainSample(torch.tensor([1, 2]), torch.tensor([3]), 0.5, torch.tensor([1.0]))
    state = {"buffer": [NodeGroup(1, [sample])], "steps": [Step([sample], [CriticSample(torch.tensor([4]), 0.1, 0.2)])]}
    back = ckpt.from_plain(ckpt.to_plain(state))
    assert type(back["buffer"][0]) is NodeGroup and back["buffer"][0].turn == 1
    assert torch.equal(back["buffer"][0].samples[0].prompt_ids, torch.tensor([1, 2]))
    assert back["steps"][0].critics[0].target == 0.2


def test_a_state_saved_under_the_records_former_module_names_still_loads():
    # checkpoints written before the buffer records moved to cooprl.samples name them by the trainer modules
    fields = {"prompt_ids": torch.tensor([1]), "completion_ids": torch.tensor([2]), "advantage": 1.5,
              "importance_weights": None}
    old = {ckpt._TAG: "dataclass", "class": "cooprl.trainers.magrpo:NodeGroup",
           "fields": {"turn": 0, "samples": [{ckpt._TAG: "dataclass", "class": "cooprl.policy_update:TrainSample",
                                              "fields": fields}]}}
    group = ckpt.from_plain(old)
    assert type(group) is NodeGroup and type(group.samples[0]) is TrainSample and group.samples[0].advantage == 1.5
    # what is saved now names cooprl.samples
    assert ckpt.to_plain(group)["class"] == "cooprl.samples:NodeGroup"


def test_a_resume_reads_the_trainer_state_and_rank_states_memory_mapped(tmp_path, monkeypatch):
    """trainer_state.pt and rank_<r>.pt are read memory-mapped (their tensors come from the page cache, shared by a
    ddp resume's processes, not read into each process's memory); a write to a loaded tensor does not reach the file."""
    import torch

    from cooprl import checkpoint as ckpt
    moments = torch.arange(1000, dtype=torch.float32)
    path = ckpt.save_checkpoint(tmp_path, 1, [], {"algorithm": {"moments": moments}},
                                rank_states=[{"shard": moments * 2}])
    reads, load = [], torch.load
    monkeypatch.setattr(torch, "load", lambda file, **kwargs: reads.append((Path(file).name, kwargs.get("mmap")))
                        or load(file, **kwargs))
    state = ckpt.load_trainer_state(path)
    shard = ckpt.load_rank_state(path, state, 0)["shard"]
    assert reads == [(ckpt.STATE_FILE, True), (ckpt.rank_file(0), True)]
    loaded = state["algorithm"]["moments"]
    assert torch.equal(loaded, moments) and torch.equal(shard, moments * 2)
    loaded.add_(1)   # an optimizer step on a CPU state
    assert torch.equal(ckpt.load_trainer_state(path)["algorithm"]["moments"], moments)
