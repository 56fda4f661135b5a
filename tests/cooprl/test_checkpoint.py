"""cooprl.checkpoint: what a trainer's state may hold, and states saved by earlier versions."""

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
