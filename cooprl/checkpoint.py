"""Atomic checkpoints that resume bit-for-bit: weights (or adapters), optimizers, RNG states, position.

A checkpoint is a folder `checkpoint-<step>/` holding `agent_<i>/` (HF `save_pretrained` output, LoRA
adapters only when peft wraps the model; a value model adds its head), `trainer_state.pt` (optimizer states, RNG states, counters,
anything else the trainer passes) and `done` (written last). It is written under a temporary name and
renamed, so a crash mid-save leaves the previous checkpoints intact and never a half-written one.
"""

from __future__ import annotations

import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch


def rng_state() -> dict[str, Any]:
    """Return the state of every random generator the training uses."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore the generators saved by `rng_state`."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(directory: Path, step: int, models: list[Any], state: dict[str, Any],
                    keep_last: int | None = None) -> Path:
    """Write checkpoint-<step> atomically under `directory`, prune to the newest `keep_last`; return its path."""
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"checkpoint-{step}"
    tmp = Path(tempfile.mkdtemp(prefix=f".checkpoint-{step}-", dir=directory))
    try:
        for i, model in enumerate(models):
            model.save_pretrained(tmp / f"agent_{i}")
        torch.save({**state, "rng": rng_state(), "step": step}, tmp / "trainer_state.pt")
        (tmp / "done").write_text(str(step))
        if final.exists():  # re-saving the same step (e.g. the final save right after an interval save)
            shutil.rmtree(final)
        tmp.rename(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if keep_last:
        for old in list_checkpoints(directory)[:-keep_last]:
            shutil.rmtree(old, ignore_errors=True)
    return final


def list_checkpoints(directory: Path) -> list[Path]:
    """Return the complete checkpoints under `directory`, oldest first."""
    if not directory.is_dir():
        return []
    found = [p for p in directory.glob("checkpoint-*") if (p / "done").is_file()]
    return sorted(found, key=lambda p: int(p.name.rsplit("-", 1)[1]))


def find_checkpoint(spec: str, default_dir: Path) -> Path:
    """Return the checkpoint folder named by `spec` ('latest' = newest under `default_dir`)."""
    if spec == "latest":
        found = list_checkpoints(default_dir)
        if not found:
            raise FileNotFoundError(f"resume_from_checkpoint=latest: no complete checkpoint under {default_dir}")
        return found[-1]
    path = Path(spec)
    if (path / "done").is_file():
        return path
    found = list_checkpoints(path)  # a checkpoint_dir was given: take its newest
    if found:
        return found[-1]
    raise FileNotFoundError(f"resume_from_checkpoint={spec!r}: not a complete checkpoint folder")


def load_trainer_state(checkpoint: Path) -> dict[str, Any]:
    """Return the trainer state saved in `checkpoint` (RNG states are restored by the caller)."""
    return torch.load(checkpoint / "trainer_state.pt", weights_only=False)


def load_agent_weights(model: Any, checkpoint: Path, agent: int) -> None:
    """Load model `agent`'s saved weights (full model, LoRA adapters, or a value model) into `model` in place."""
    folder = checkpoint / f"agent_{agent}"
    if hasattr(model, "load_weights"):  # a ValueModel (critic or reward model) knows its own layout
        model.load_weights(folder)
        return
    load_agent_weights_from_folder(model, folder)


def load_agent_weights_from_folder(model: Any, folder: Path) -> None:
    """Load a `save_pretrained` folder (full weights or LoRA adapters) into `model` in place."""
    from safetensors.torch import load_file
    if hasattr(model, "peft_config"):
        from peft import set_peft_model_state_dict
        set_peft_model_state_dict(model, load_file(folder / "adapter_model.safetensors"))
        return
    state = {}
    for shard in sorted(folder.glob("*.safetensors")):
        if shard.name != "value_head.safetensors":
            state.update(load_file(shard))
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith("lm_head.weight")]  # tied to the embeddings
    if missing or unexpected:
        raise RuntimeError(f"{folder}: weights do not match the model (missing {missing[:3]}, unexpected {unexpected[:3]})")
    if hasattr(model, "tie_weights"):
        model.tie_weights()
