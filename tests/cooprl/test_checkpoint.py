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


# ------------------------------------------------------------------------------------------------ issue 43: messages
def _saved_agent(tmp_path, model) -> "ckpt.Path":
    checkpoint = tmp_path / "checkpoint-1"
    ckpt.save_model(model, checkpoint / "agent_0")
    return checkpoint


def test_a_checkpoint_of_another_weights_kind_is_named_so_not_damaged(tmp_path):
    # full weights loaded under a LoRA config were "damaged: agent_0/? is missing"
    import pytest

    from cooprl.config import LoraSection
    from cooprl.models.loading import TINY_RANDOM, add_lora, load_causal_lm
    full = _saved_agent(tmp_path / "full", load_causal_lm(TINY_RANDOM, device="cpu"))
    lora_model = add_lora(load_causal_lm(TINY_RANDOM, device="cpu"), LoraSection(r=2, alpha=4))
    with pytest.raises(ckpt.CheckpointError) as err:
        ckpt.load_agent_weights(lora_model, full, 0)
    assert str(err.value) == (f"checkpoint {full}: agent_0/ holds full weights (a run without LoRA), and this config "
                              "has agent_model.lora set (LoRA adapters); evaluate it with the config of the run that "
                              "saved it (--run RUN), or --override agent_model.lora=null")
    adapters = _saved_agent(tmp_path / "lora", lora_model)
    with pytest.raises(ckpt.CheckpointError, match="agent_0/ holds LoRA adapters, and this config has "
                                                   "agent_model.lora=null .* --override agent_model.lora as the run"):
        ckpt.load_agent_weights(load_causal_lm(TINY_RANDOM, device="cpu"), adapters, 0)
    ckpt.load_agent_weights(add_lora(load_causal_lm(TINY_RANDOM, device="cpu"), LoraSection(r=2, alpha=4)),
                            adapters, 0)   # the same kind loads


def test_a_checkpoint_of_another_model_says_which_tensor_differs_in_one_line(tmp_path):
    # torch's size-mismatch message puts the shapes after its first line, which was all that was shown
    import pytest
    from transformers import LlamaConfig, LlamaForCausalLM

    from cooprl.models.loading import TINY_RANDOM, load_causal_lm
    model = load_causal_lm(TINY_RANDOM, device="cpu")
    other = LlamaForCausalLM(LlamaConfig(**{**model.config.to_dict(), "hidden_size": 32, "intermediate_size": 64}))
    checkpoint = _saved_agent(tmp_path, other)
    with pytest.raises(ckpt.CheckpointError) as err:
        ckpt.load_agent_weights(model, checkpoint, 0)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"checkpoint {checkpoint}: agent_0/ does not match the model (")
    assert "saved tensors differ in shape from the model's (e.g. model.embed_tokens.weight: saved [" in message
    assert ", 32], the model's [" in message and ", 64]): saved from another model)" in message
    assert message.endswith("evaluate it with --run on that run (its config.yaml), or give its agent_model")


def test_torch_s_mismatch_lines_after_its_first_are_kept(tmp_path, monkeypatch):
    # a LoRA model's adapters load through peft, whose size mismatch is torch's message: its first line named only
    # the model class
    import pytest

    from cooprl.models.loading import TINY_RANDOM, load_causal_lm
    checkpoint = _saved_agent(tmp_path, load_causal_lm(TINY_RANDOM, device="cpu"))

    def mismatch(model, folder):
        raise RuntimeError("Error(s) in loading state_dict for PeftModelForCausalLM:\n\tsize mismatch for a.lora_A: "
                           "copying a param with shape torch.Size([8, 64]) from checkpoint, the shape in current "
                           "model is torch.Size([4, 64]).\n\tsize mismatch for b.lora_A: ...\n\tsize mismatch for c")
    monkeypatch.setattr(ckpt, "load_agent_weights_from_folder", mismatch)
    with pytest.raises(ckpt.CheckpointError, match=r"PeftModelForCausalLM: size mismatch for a.lora_A: copying a "
                                                   r"param with shape torch.Size\(\[8, 64\]\) from checkpoint, the "
                                                   r"shape in current model is torch.Size\(\[4, 64\]\). "
                                                   r"\(and 2 more\)"):
        ckpt.load_agent_weights(load_causal_lm(TINY_RANDOM, device="cpu"), checkpoint, 0)
