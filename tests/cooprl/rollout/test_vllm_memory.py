"""The per-GPU memory check of runs with vLLM engines (cooprl.rollout.vllm_memory): what the trainer holds (weights,
gradients, optimizer states, references, critics) plus what each engine reserves, counted before any model loads,
and the KV cache an engine is sized by (agent_model.vllm_kv_cache_bytes)."""

from __future__ import annotations

import pytest
import torch

from cooprl.config import ConfigError, Run, load_config
from cooprl.models.loading import TINY_RANDOM, load_causal_lm
import cooprl.rollout.vllm_memory as memory
import cooprl.rollout.vllm_platform as backend
from tests.cooprl.rollout.test_vllm_generation import FakeLLM, fake_vllm  # noqa: F401

GIB = 1 << 30
H200 = 143_771 << 20           # what torch reports for a 141 GB H200 (140.4 GiB)
# Qwen2.5-Coder-3B (the reference configs' model): 3.086e9 parameters (tied embeddings), 36 layers, 2 KV heads of 128
QWEN_3B = memory.ModelShape(parameters=3_085_938_688, lora_parameters=0, kv_elements_per_token=36 * 2 * 2 * 128)


@pytest.mark.slow   # loads models
def test_a_models_shape_is_read_from_its_config_without_weights():
    from dataclasses import replace

    from cooprl.config import LoraSection
    model = load_causal_lm(TINY_RANDOM, device="cpu")
    shape = memory.model_shape(TINY_RANDOM)
    assert shape.parameters == sum(p.numel() for p in model.parameters())
    c = model.config
    assert shape.kv_elements_per_token == c.num_hidden_layers * 2 * c.num_key_value_heads * (
        c.hidden_size // c.num_attention_heads)
    lora = replace(LoraSection(), r=4)
    with_lora = load_causal_lm(TINY_RANDOM, device="cpu", lora=lora)
    trained = sum(p.numel() for p in with_lora.parameters() if p.requires_grad)
    assert memory.model_shape(TINY_RANDOM, lora).lora_parameters == trained   # what peft really trains


def test_optimizer_bytes_are_those_build_adamw_keeps():
    assert memory.optimizer_state_bytes(torch.float32, "kahan") == 8     # torch AdamW: two float32 moments
    assert memory.optimizer_state_bytes(torch.bfloat16, "pure") == 4     # torch AdamW on bf16: two bf16 moments
    assert memory.optimizer_state_bytes(torch.bfloat16, "kahan") >= 6    # optimi: moments + a bf16 Kahan buffer


def test_exact_figures_for_a_tiny_model():
    shape = memory.model_shape(TINY_RANDOM)
    p = shape.parameters
    assert memory.trained_model_bytes(shape, torch.float32, lora=False, bf16_optimizer="kahan") == p * (4 + 4 + 8)
    assert memory.trained_model_bytes(shape, torch.bfloat16, lora=False, bf16_optimizer="pure") == p * (2 + 2 + 4)
    lora = memory.ModelShape(p, 1000, shape.kv_elements_per_token)
    assert memory.trained_model_bytes(lora, torch.bfloat16, lora=True, bf16_optimizer="kahan") == p * 2 + 1000 * 16
    config = load_config(None, [f"agent_model.name={TINY_RANDOM}", "agent_model.max_length=100",
                                "magrpo.max_new_tokens=20", "magrpo.num_generations=3",
                                "magrpo.eval_num_generations=5", "magrpo.eval_batch_size=2"])
    # 2 prompts x 5 samples of 112 tokens (100 rounded up to vLLM's 16-token blocks), bf16
    expected = 2 * 5 * 112 * shape.kv_elements_per_token * 2
    assert memory.default_kv_cache_bytes(config.agent_model, config.magrpo, 20, shape.kv_elements_per_token,
                                         torch.bfloat16) == expected
    accounts = memory.memory_accounts(config, "magrpo", config.magrpo, 20, ["cuda:0", "cuda:0"],
                                      [["cuda:0"], ["cuda:1"]])
    bf16 = memory.optimizer_state_bytes(torch.bfloat16, "kahan")
    assert accounts["cuda:0"].items == [("agent 0 (weights, gradients, optimizer)", p * (4 + bf16)),
                                        (f"engine 0 (weights + KV cache {expected / GIB:.2f} GiB)", p * 2 + expected),
                                        ("agent 1 (weights, gradients, optimizer)", p * (4 + bf16))]
    assert accounts["cuda:1"].items == [(f"engine 1 (weights + KV cache {expected / GIB:.2f} GiB)", p * 2 + expected)]


@pytest.fixture
def on_h200(fake_vllm, monkeypatch):
    """One 141 GB GPU (cuda:0), Qwen2.5-Coder-3B's shape for every model, vLLM's CUDA build (fake); loading a model
    fails the test (the check comes first)."""
    import cooprl.trainers.team as agents
    monkeypatch.setattr(memory, "gpu_total_bytes", lambda device: H200)
    monkeypatch.setattr(memory, "model_shape", lambda name, lora=None: QWEN_3B)
    monkeypatch.setattr(backend, "check_vllm_backend", lambda device="auto", sleep=False: fake_vllm)
    monkeypatch.setattr(backend, "vllm_platform_is_cpu", lambda: False)
    monkeypatch.setattr(agents, "load_causal_lm", lambda *a, **k: pytest.fail("a model was loaded"))


def he_config(*overrides: str):
    return load_config("configs/magrpo_he_config.yaml", ["agent_model.generation_backend=vllm",
                                                        "agent_model.device=cuda:0", *overrides])


def test_magrpo_he_config_with_engines_at_0_3_is_refused_at_start_with_the_figures(on_h200):
    from cooprl.trainers.team import build_team
    config = he_config("agent_model.vllm_kv_cache_bytes=0")   # engines sized by vllm_gpu_memory_utilization 0.3
    trainer = 2 * QWEN_3B.parameters * (4 + memory.optimizer_state_bytes(torch.bfloat16, "kahan"))
    engines = 2 * int(0.3 * H200)
    with pytest.raises(ConfigError) as refused:
        build_team(Run.of(config, "magrpo"), 2)
    message = str(refused.value)
    assert f"cuda:0 would hold {(trainer + engines) / GIB:.1f} GiB" in message
    assert (
        f"of its {H200 / GIB:.1f} GiB" in message and "engine 0 (vllm_gpu_memory_utilization 0.3) 42.1 GiB" in message
    )
    assert f"agent 0 (weights, gradients, optimizer) {trainer / 2 / GIB:.1f} GiB" in message
    assert "change agent_model.vllm_kv_cache_bytes" in message and "agent_model.lora" in message


def test_magrpo_he_config_with_engines_sized_by_their_kv_cache_fits(on_h200, monkeypatch):
    config = he_config()   # vllm_kv_cache_bytes null: sized from the run
    kv = memory.engine_kv_cache_bytes(config.agent_model, config.magrpo, 256, QWEN_3B.kv_elements_per_token,
                                      torch.bfloat16)
    assert kv == 4 * 2048 * 36 * 1024   # 4 samples x 2,048 tokens x 36 KiB per token
    memory.check_vllm_memory(config, ["cuda:0", "cuda:0"], Run.of(config, "magrpo"))   # fits: no error
    with pytest.raises(ConfigError, match="cuda:0 would hold"):   # a KV cache of 40 GiB per engine does not
        memory.check_vllm_memory(he_config(f"agent_model.vllm_kv_cache_bytes={40 * GIB}"), ["cuda:0", "cuda:0"],
                                 Run.of(config, "magrpo"))


def test_references_and_critics_are_counted_where_they_sit(on_h200):
    config = load_config("configs/iac_he_config.yaml", [
        "agent_model.generation_backend=vllm", "agent_model.device=cuda:0", "agent_model.torch_dtype=bfloat16",
        "iac.critic_devices=cuda:1", "iac.use_separate_critic=true", "iac.reference_kl_coef=0.1"])
    run = Run.of(config, "iac")
    accounts = memory.memory_accounts(config, "iac", run.section, 256, ["cuda:0", "cuda:0"], [["cuda:0"], ["cuda:0"]],
                                      ["cuda:1", "cuda:1"])
    assert ("agent 1 reference", QWEN_3B.parameters * 2) in accounts["cuda:0"].items
    assert [what for what, _ in accounts["cuda:1"].items] == ["critic 0 (weights, gradients, optimizer)",
                                                             "critic 1 (weights, gradients, optimizer)"]
    together = load_config("configs/iac_he_config.yaml", ["agent_model.generation_backend=vllm",
                                                         "agent_model.device=cuda:0", "iac.critic_devices=cuda:0"])
    # two 3B agents and two 3B critics with their AdamW states, and two engines, on one 141 GB GPU
    with pytest.raises(ConfigError, match=r"cuda:0 would hold .*critic 1 \(weights, gradients, optimizer\)"):
        memory.check_vllm_memory(together, ["cuda:0", "cuda:0"], Run.of(together, "iac"))


@pytest.mark.slow   # loads models
def test_an_engines_kv_cache_in_bytes_reaches_vllm(fake_vllm, monkeypatch, tmp_path):
    from cooprl.trainers.team import build_team
    monkeypatch.setattr(backend, "check_vllm_backend", lambda device="auto", sleep=False: fake_vllm)
    base = [f"agent_model.name={TINY_RANDOM}", "agent_model.device=cpu", "agent_model.generation_backend=vllm",
            "magrpo.num_generations=2", "magrpo.max_new_tokens=8"]
    config = load_config(None, base)
    build_team(Run.of(config, "magrpo"), 1)
    shape = memory.model_shape(TINY_RANDOM)
    assert FakeLLM.instances[-1].kwargs["kv_cache_memory_bytes"] == memory.default_kv_cache_bytes(
        config.agent_model, config.magrpo, 8, shape.kv_elements_per_token, torch.float32)
    build_team(Run.of(load_config(None, [*base, "agent_model.vllm_kv_cache_bytes=123456"]), "magrpo"), 1)
    assert FakeLLM.instances[-1].kwargs["kv_cache_memory_bytes"] == 123456
    build_team(Run.of(load_config(None, [*base, "agent_model.vllm_kv_cache_bytes=0"]), "magrpo"), 1)
    assert "kv_cache_memory_bytes" not in FakeLLM.instances[-1].kwargs   # vLLM's sizing by utilization
