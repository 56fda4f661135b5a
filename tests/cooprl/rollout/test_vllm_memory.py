"""What a model and a vLLM engine hold (cooprl.rollout.vllm_memory), counted from the model's config: its shape (shipped
for the reference model, a local folder's config.json otherwise offline), the optimizer's bytes per weight as
build_adamw keeps them, the KV cache an engine is sized by (agent_model.vllm_kv_cache_bytes) and the utilization an
engine sized in bytes is given. The per-GPU plan that adds them up: tests/cooprl/rollout/test_memory_plan.py."""

from __future__ import annotations

import json

import pytest
import torch

from cooprl.config import ConfigError, Run, load_config
from cooprl.models.loading import SMOLLM2, TINY_RANDOM, load_causal_lm, resolve_model_path
import cooprl.rollout.vllm_memory as memory
import cooprl.rollout.vllm_platform as backend
from tests.cooprl.rollout.test_vllm_generation import FakeLLM, fake_vllm, two_gpus  # noqa: F401

GIB = 1 << 30
# Qwen2.5-Coder-3B (the reference configs' model): 3.086e9 parameters (tied embeddings), 36 layers, 2 KV heads of 128
QWEN_3B = memory.ModelShape(parameters=3_085_938_688, lora_parameters=0, kv_elements_per_token=36 * 2 * 2 * 128,
                            vector_parameters=36 * (2 * 2048 + 2048 + 2 * 256) + 2048, layers=36, hidden=2048,
                            intermediate=11008, heads=16, kv_dim=256, vocab=151936)


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
    # the shipped fields of the embedded models are those of the folders cooprl.models.loading builds
    for name in (TINY_RANDOM, SMOLLM2):
        assert memory.model_shape(name) == memory.model_shape(resolve_model_path(name))


def test_optimizer_bytes_are_those_build_adamw_keeps():
    from cooprl.update.optim import build_adamw

    def measured(dtype: torch.dtype, bf16_optimizer: str, shape: tuple[int, ...]) -> int:
        weight = torch.nn.Parameter(torch.zeros(shape, dtype=dtype))
        optimizer = build_adamw([weight], lr=1e-3, bf16_optimizer=bf16_optimizer)
        weight.grad = torch.ones_like(weight)
        optimizer.step()
        return sum(t.element_size() for t in optimizer.state[weight].values()
                   if torch.is_tensor(t) and t.numel() == weight.numel())

    assert memory.optimizer_state_bytes(torch.float32, "kahan") == measured(torch.float32, "kahan", (8, 8)) == 8
    assert memory.optimizer_state_bytes(torch.bfloat16, "pure") == measured(torch.bfloat16, "pure", (8, 8)) == 4
    # KahanAdamW on a matrix: bf16 first moment, float32 second moment, bf16 compensation buffer
    assert memory.optimizer_state_bytes(torch.bfloat16, "kahan") == measured(torch.bfloat16, "kahan", (8, 8)) == 8
    # on a 1-D tensor the plan counts a float32 buffer (kahan_buffer_bytes): never less than what is kept
    assert memory.optimizer_state_bytes(torch.bfloat16, "kahan", vector=True) == 10
    assert memory.optimizer_state_bytes(torch.bfloat16, "kahan", vector=True) >= measured(torch.bfloat16, "kahan",
                                                                                           (64,))


def test_engines_are_sized_for_the_runs_largest_sampling_call():
    """magrpo_he_config's calls hold 16 sequences (a second turn: 4 children x 4 samples; an evaluation: its 16
    problems at once, eval_batch_size null), not the 4 of (eval_batch_size or 1) x G: the KV cache and vLLM's batch
    limits follow, the batched tokens capped at TRL's 4,096 (vLLM's own: 1,024 sequences, 16,384 tokens)."""
    from cooprl.config import load_config as load
    config = load("configs/magrpo_he_config.yaml", [])
    assert memory.largest_call_sequences(config.magrpo) == 16
    one_turn = load(None, ["magrpo.num_turns=1", "magrpo.num_generations=6", "magrpo.eval_num_samples=2"])
    assert memory.largest_call_sequences(one_turn.magrpo) == 6
    assert memory.largest_call_sequences(None) == memory.EVAL_SEQUENCES
    assert memory.engine_batch_limits(config.agent_model, config.magrpo, 2048) == (16, 4096)
    assert memory.engine_batch_limits(one_turn.agent_model, one_turn.magrpo, 256) == (6, 1536)
    assert memory.engine_batch_limits(one_turn.agent_model, one_turn.magrpo, 8192) == (6, 8192)   # one whole sequence
    given = load(None, ["agent_model.vllm_max_num_seqs=32", "agent_model.vllm_max_num_batched_tokens=1024"])
    assert memory.engine_batch_limits(given.agent_model, given.magrpo, 2048) == (32, 1024)


def test_exact_figures_for_a_tiny_model():
    shape = memory.model_shape(TINY_RANDOM)
    p, v = shape.parameters, shape.vector_parameters
    assert 0 < v < p
    assert memory.trained_model_bytes(shape, torch.float32, lora=False, bf16_optimizer="kahan") == p * (4 + 4 + 8)
    assert memory.trained_model_bytes(shape, torch.bfloat16, lora=False, bf16_optimizer="pure") == p * (2 + 2 + 4)
    assert memory.optimizer_bytes(shape, torch.bfloat16, False, "kahan") == (p - v) * 8 + v * 10
    lora = memory.ModelShape(p, 1000, shape.kv_elements_per_token)
    assert memory.trained_model_bytes(lora, torch.bfloat16, lora=True, bf16_optimizer="kahan") == p * 2 + 1000 * 16
    config = load_config(None, [f"agent_model.name={TINY_RANDOM}", "agent_model.max_length=100",
                                "magrpo.max_new_tokens=20", "magrpo.num_generations=3",
                                "magrpo.eval_num_generations=5", "magrpo.eval_batch_size=2"])
    # 2 prompts x 5 samples of 112 tokens (100 rounded up to vLLM's 16-token blocks), bf16
    expected = 2 * 5 * 112 * shape.kv_elements_per_token * 2
    assert memory.default_kv_cache_bytes(config.agent_model, config.magrpo, 20, shape.kv_elements_per_token,
                                         torch.bfloat16) == expected


def test_the_shipped_shape_of_the_reference_model_needs_no_hub(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    shape = memory.model_shape("Qwen/Qwen2.5-Coder-3B", offline=True)
    assert shape == QWEN_3B
    # 36 layers x (2 norms of 2,048 + q/k/v biases 2,048 + 256 + 256) + the final norm
    assert shape.vector_parameters == 36 * (2 * 2048 + 2048 + 2 * 256) + 2048


def test_an_unknown_model_offline_says_how_to_give_its_shape(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConfigError, match="not known offline.*local folder holding its config.json"):
        memory.model_shape("nobody/no-such-model-7b", offline=True)
    folder = tmp_path / "my-model"   # a folder with config.json alone (no weights) gives the shape
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(memory.shipped_shapes()[TINY_RANDOM]))
    assert memory.model_shape(str(folder), offline=True) == memory.model_shape(TINY_RANDOM)


def test_the_utilization_of_an_engine_sized_in_bytes_is_what_it_takes():
    weights, kv = 6 * GIB, GIB // 2
    # (6 + 0.5 + 1 overhead) of 80 GiB, rounded up to the hundredth
    assert memory.engine_memory_utilization(weights, kv, 80 * GIB) == 0.1
    assert memory.engine_memory_utilization(1, 1, 80 * GIB) == 0.02
    assert memory.engine_memory_utilization(80 * GIB, kv, 80 * GIB) == 0.95   # vLLM's bound


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


@pytest.mark.slow   # loads a model
def test_an_engine_sized_in_bytes_on_a_gpu_asks_vllm_for_what_it_takes(fake_vllm, monkeypatch, two_gpus):
    from cooprl.rollout.vllm_engines import AgentEngine
    from cooprl.rollout.vllm_generation import build_vllm_generator
    from tests.cooprl.rollout.test_vllm_generation import GPUWorkerLLM, tiny_tokenizer
    monkeypatch.setattr(backend, "check_vllm_backend", lambda device="auto", sleep=False: fake_vllm)
    monkeypatch.setattr(fake_vllm, "LLM", GPUWorkerLLM)
    model = load_causal_lm(TINY_RANDOM, device="cpu")   # its weights on the CPU: there is no GPU here

    def utilization(*overrides: str, device: str = "cuda:1") -> float:
        config = load_config(None, [f"agent_model.name={TINY_RANDOM}", "agent_model.generation_backend=vllm",
                                    "agent_model.vllm_gpu_memory_utilization=0.4", *overrides])
        build_vllm_generator(model, tiny_tokenizer(), config.agent_model, AgentEngine("m", 32, 8, 0, device=device),
                             section=config.magrpo)
        return FakeLLM.instances[-1].kwargs["gpu_memory_utilization"]

    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    kv = 3 * GIB
    # two_gpus: 80 GiB each; (weights + 3 GiB + 1 GiB) / 80 GiB, not the key's 0.4
    assert utilization(f"agent_model.vllm_kv_cache_bytes={kv}") == memory.engine_memory_utilization(
        weights, kv, 80 * GIB) == 0.06
    assert utilization("agent_model.vllm_kv_cache_bytes=0") == 0.4   # vLLM sizes the cache by the key's share
    assert utilization(f"agent_model.vllm_kv_cache_bytes={kv}", device="cpu") == 0.4   # vLLM's CPU build: the key
