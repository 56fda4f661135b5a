"""cooprl.checkpoint: what a trainer's state may hold, and states saved by earlier versions."""

from pathlib import Path

import pytest
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
    # fields added since (with defaults) take them: a run checkpointed before them resumes
    assert group.samples[0].truncated is False and group.samples[0].sampling_logps is None
    with pytest.raises(ValueError, match="fields of cooprl.samples:TrainSample do not match"):   # a field unknown
        ckpt.from_plain({**old["fields"]["samples"][0], "class": "cooprl.samples:TrainSample",
                         "fields": {**fields, "mystery": 1}})
    with pytest.raises(ValueError, match="do not match"):   # a field without a default, missing
        ckpt.from_plain({**old["fields"]["samples"][0], "fields": {"prompt_ids": torch.tensor([1])}})
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


# ------------------------------------------------------------------------------------------ saves that cannot complete
class TinyModel(torch.nn.Module):
    """A model with save_pretrained, as save_checkpoint writes it (a safetensors file)."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.arange(1024, dtype=torch.float32))

    def save_pretrained(self, folder, state_dict=None):
        from safetensors.torch import save_file
        folder.mkdir(parents=True, exist_ok=True)
        save_file({"weight": self.weight.detach()}, str(folder / "model.safetensors"))


def test_a_full_disk_keeps_the_last_checkpoint_and_says_what_the_save_needed(tmp_path, monkeypatch):
    import errno

    import pytest
    ckpt.save_checkpoint(tmp_path, 1, [TinyModel()], {"x": 1})
    first = (tmp_path / "checkpoint-1" / "agent_0" / "model.safetensors").read_bytes()

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")
    # the weights' writer, the state's writer, and the writer of the third file: each one fails the save alike
    for target, name in ((TinyModel, "save_pretrained"), (ckpt.torch, "save"), (ckpt.Path, "write_text")):
        with monkeypatch.context() as patch:
            patch.setattr(target, name, full)
            with pytest.raises(ckpt.SaveError) as failed:
                ckpt.save_checkpoint(tmp_path, 2, [TinyModel()], {"x": 2})
        message = str(failed.value)
        assert "checkpoint-2 could not be saved: no space left on the device" in message
        assert "the newest complete checkpoint, checkpoint-1, is kept" in message
        assert "it needs about " in message and " free)" in message
        # no half-written folder, the earlier checkpoint intact
        assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-1"]
        assert (tmp_path / "checkpoint-1" / "agent_0" / "model.safetensors").read_bytes() == first
    ckpt.check_checkpoint(tmp_path / "checkpoint-1")


def test_safetensors_own_error_on_a_full_disk_is_a_save_error(tmp_path, monkeypatch):
    # safetensors reports a full disk as its own SafetensorError ("IoError(Os { code: 28 ...)"), not an OSError
    import pytest
    from safetensors import SafetensorError

    def full(self, folder, state_dict=None):
        raise SafetensorError("Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "
                              "\"No space left on device\" })")
    monkeypatch.setattr(TinyModel, "save_pretrained", full)
    with pytest.raises(ckpt.SaveError, match="checkpoint-3 could not be saved: no space left on the device .* no "
                                             "earlier checkpoint was saved"):
        ckpt.save_checkpoint(tmp_path / "ckpts", 3, [TinyModel()], {})
    assert list((tmp_path / "ckpts").iterdir()) == []


def test_a_save_is_refused_before_writing_when_the_disk_has_less_free_space_than_it_needs(tmp_path, monkeypatch):
    import collections

    import pytest
    ckpt.save_checkpoint(tmp_path, 1, [TinyModel()], {"x": 1})
    needed = ckpt.folder_size(tmp_path / "checkpoint-1")   # the newest checkpoint's size: what the next one needs
    assert ckpt.expected_size(tmp_path, [TinyModel()]) == needed
    # before the first save: the trained weights and their two float32 AdamW moments
    assert ckpt.expected_size(tmp_path / "none", [TinyModel()]) == 1024 * (4 + 8)
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(ckpt.shutil, "disk_usage", lambda path: usage(10**9, 10**9 - needed + 1, needed - 1))
    monkeypatch.setattr(TinyModel, "save_pretrained", lambda *a, **k: pytest.fail("wrote though the disk is full"))
    said = rf"no space left on the device \(it needs about {round(needed / 1024)} KiB, {round((needed - 1) / 1024)} KiB"
    with pytest.raises(ckpt.SaveError, match=said + r" free\)"):
        ckpt.save_checkpoint(tmp_path, 2, [TinyModel()], {"x": 2})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-1"]


def test_a_read_only_checkpoint_folder_is_a_save_error_naming_why(tmp_path, monkeypatch):
    import errno

    import pytest

    def refused(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied")
    monkeypatch.setattr(ckpt.tempfile, "mkdtemp", refused)
    with pytest.raises(ckpt.SaveError, match="checkpoint-1 could not be saved: Permission denied"):
        ckpt.save_checkpoint(tmp_path, 1, [TinyModel()], {})


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


# ----------------------------------------------------------------------------------------- a shared policy's checkpoint
def test_a_shared_policy_checkpoint_holds_its_model_once_and_resumes_only_as_a_shared_policy(tmp_path):
    import json

    trained = TinyModel()
    with torch.no_grad():
        trained.weight.add_(1.0)
    shared = ckpt.save_checkpoint(tmp_path / "shared", 1, [trained], {}, shared_agents=2)
    assert sorted(p.name for p in shared.iterdir() if p.is_dir()) == ["agent_0"]
    assert json.loads((shared / ckpt.SHARED_POLICY_FILE).read_text()) == {"agents": 2}
    with pytest.raises(ckpt.CheckpointError, match=r"holds a shared policy of 2 agents \(agent_model.shared_policy\) "
                                                   r"and this run has a model per agent; resume or evaluate it with "
                                                   r"--override agent_model.shared_policy=true$"):
        ckpt.load_team_weights([TinyModel()], shared, 0)
    with pytest.raises(ckpt.CheckpointError, match=r"holds a shared policy of 2 agents \(agent_model.shared_policy\) "
                                                   r"and this run has a shared policy of 3 agents$"):
        ckpt.load_team_weights([TinyModel()], shared, 3)
    separate = ckpt.save_checkpoint(tmp_path / "separate", 1, [TinyModel(), TinyModel()], {})
    assert not (separate / ckpt.SHARED_POLICY_FILE).exists()
    with pytest.raises(ckpt.CheckpointError, match="holds a model per agent .* and this run has a shared policy of 2 "
                                                   "agents; .* --override agent_model.shared_policy=false"):
        ckpt.load_team_weights([TinyModel()], separate, 2)
    model = TinyModel()
    ckpt.load_team_weights([model], shared, 2)
    assert torch.equal(model.weight, trained.weight)
    # a team of separate agents started from it (agent_model.init_from): every agent from the one model
    assert ckpt.init_folders(str(shared), 2) == [shared / "agent_0"] * 2
    (shared / ckpt.SHARED_POLICY_FILE).write_text("{}")
    with pytest.raises(ckpt.CheckpointError, match="shared_policy.json holds no number of agents"):
        ckpt.load_team_weights([model], shared, 2)


def test_init_from_a_run_of_other_agents_says_which_run_fits(tmp_path):
    # "holds 1 agent(s), this run has 2 agent(s)" said the mismatch, not what a run to start from needs
    from cooprl.models.loading import ModelError
    (tmp_path / "run" / "final" / "agent_0").mkdir(parents=True)
    with pytest.raises(ModelError) as err:
        ckpt.init_folders(str(tmp_path / "run"), 2)
    assert str(err.value) == (f"agent_model.init_from: {tmp_path / 'run' / 'final'} holds 1 agent(s), this run has 2 "
                              "agent(s); each agent starts from the saved agent of its index: name a run of 2 agent(s)")


def test_pruning_keeps_the_newest_complete_checkpoints(tmp_path):
    for step in (1, 2, 3):
        ckpt.save_checkpoint(tmp_path, step, [TinyModel()], {"x": step})
    (tmp_path / "checkpoint-4").mkdir()   # no `done` marker: not a checkpoint, never counted nor removed
    ckpt.prune_checkpoints(tmp_path, None)
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == ["checkpoint-1", "checkpoint-2", "checkpoint-3"]
    ckpt.prune_checkpoints(tmp_path, 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-2", "checkpoint-3", "checkpoint-4"]
