"""What a GPU run needs of code that runs on CPU here: checkpoints that load into CPU memory, evaluation that leaves
every generator as it was, sampling with exactly the configured parameters, models that follow each process's GPU
under ddp. Where a GPU is needed, the CUDA calls are observed instead (no GPU runs these tests)."""

from pathlib import Path

import pytest
import torch

from cooprl import checkpoint as ckpt
from cooprl.optim import build_adamw


# ------------------------------------------------------------------------------------------------ checkpoints
def trained_linear():
    from safetensors.torch import save_file
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4)

    def save_pretrained(folder: Path) -> None:
        folder.mkdir(parents=True)
        save_file(model.state_dict(), folder / "model.safetensors")
    model.save_pretrained = save_pretrained
    optimizer = build_adamw(model.parameters(), lr=1e-2)
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    return model, optimizer


def test_a_checkpoint_written_on_a_gpu_loads_into_cpu_memory(tmp_path, monkeypatch):
    """The optimizer states of a GPU run are CUDA tensors in trainer_state.pt. Loading puts them in CPU memory: on a
    machine without that GPU the checkpoint is not "damaged", and a resume holds no second GPU copy of them (the
    optimizer moves each state to its parameter)."""
    model, optimizer = trained_linear()
    with monkeypatch.context() as patch:   # as torch.save records the tensors of a run on cuda:0
        patch.setattr(torch.serialization, "location_tag", lambda storage: "cuda:0")
        path = ckpt.save_checkpoint(tmp_path, 3, [model], {"algorithm": {"optimizer": optimizer.state_dict()}})
    assert ckpt.find_checkpoint("latest", tmp_path) == path   # (it was "every checkpoint ... is damaged" on a CPU)
    state = ckpt.load_trainer_state(path)["algorithm"]["optimizer"]
    tensors = [v for slots in state["state"].values() for v in slots.values() if isinstance(v, torch.Tensor)]
    assert tensors and {t.device.type for t in tensors} == {"cpu"}
    resumed = build_adamw(model.parameters(), lr=1e-2)
    resumed.load_state_dict(state)
    for p in model.parameters():
        for key in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(resumed.state[p][key], optimizer.state[p][key])
            assert resumed.state[p][key].device == p.device


def test_loading_reads_into_cpu_memory(tmp_path, monkeypatch):
    """Whatever machine loads it (a GPU one too), torch.load is told to map every tensor to the CPU."""
    model, optimizer = trained_linear()
    path = ckpt.save_checkpoint(tmp_path, 1, [model], {"algorithm": {"optimizer": optimizer.state_dict()}})
    seen = []
    real_load = torch.load

    def load(*args, **kwargs):
        seen.append(kwargs.get("map_location"))
        return real_load(*args, **kwargs)
    monkeypatch.setattr(torch, "load", load)
    ckpt.check_checkpoint(path)
    ckpt.load_trainer_state(path)
    assert seen and set(seen) == {"cpu"}
