"""Memory options of the update (issue 16 §4): chunked log-probs, gradient checkpointing, bf16 autocast on CPU.

Each option must leave the numbers as they are (chunks, checkpointing: to float rounding) or close (bf16), for
both layouts of `completion_logprobs` (token trie and padded), with and without LoRA.
"""

import copy

import pytest
import torch

from cooprl.config import ConfigError, LoraSection, Run, load_config
from cooprl.models.loading import (TINY_RANDOM, MemoryOptions, add_lora, load_causal_lm, load_tokenizer, memory_options,
                           set_memory_options)
from cooprl.models.logprobs import _padded_logprobs, completion_logprobs
from cooprl.rollout.generation import HFGenerator, SamplingParams
from cooprl.update.policy_gradient import frozen_reference
from tests.cooprl.models.test_logprobs import mixed_group, two_turn_tree

LAYOUTS = {"trie": completion_logprobs, "padded": _padded_logprobs}


@pytest.fixture(scope="module")
def tiny():
    torch.set_num_threads(1)
    return load_causal_lm(TINY_RANDOM, device="cpu", torch_dtype="float32"), load_tokenizer(TINY_RANDOM)


def logps_and_grads(model, fn, pad_id, case=two_turn_tree):
    """Return (log-probs, {parameter: gradient}) of a policy-gradient-like loss on `case`'s batch."""
    prompts, completions = case()
    model.train()
    model.zero_grad(set_to_none=True)
    logps, mask = fn(model, prompts, completions, pad_id)
    (logps.sum(-1) * torch.linspace(-1, 1, len(prompts))).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return logps.detach(), grads


def assert_grads_close(a, b, rtol=1e-5):
    assert a.keys() == b.keys() and a
    for name in a:
        scale = a[name].abs().max().item()
        assert (a[name] - b[name]).abs().max().item() <= rtol * scale + 1e-9, name


def head_rows(model):
    """Return (a list that records the positions of every call that computes logits, the hook's handle); the
    chunked forward's outer call, whose head returns the [M] log-probs it computes chunk by chunk, is left out."""
    rows = []

    def record(module, args, out):
        if out.dim() > 1:
            rows.append(args[0].shape[:-1].numel())
    return rows, model.get_output_embeddings().register_forward_hook(record)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case", [mixed_group, two_turn_tree])
def test_chunked_logprobs_equal_unchunked_with_gradients(tiny, layout, case):
    model, tokenizer = tiny
    plain_logps, plain_grads = logps_and_grads(model, LAYOUTS[layout], tokenizer.pad_token_id, case)
    chunked = set_memory_options(copy.deepcopy(model), logprob_chunk_size=7)
    rows, handle = head_rows(chunked)
    logps, grads = logps_and_grads(chunked, LAYOUTS[layout], tokenizer.pad_token_id, case)
    handle.remove()
    # log-probs near -11 (a 49k vocabulary): 1e-6 relative is float32 rounding of a differently blocked matmul
    torch.testing.assert_close(logps, plain_logps, rtol=1e-6, atol=1e-6)
    assert_grads_close(grads, plain_grads)
    # never more than 7 positions' logits at once: the forward's chunks, then the backward recomputing each one
    predictions = sum(len(c) for c in case()[1])
    assert max(rows) == 7 and sum(rows) == 2 * predictions


def test_chunked_logprobs_without_gradient_and_through_a_reference_view(tiny):
    model, tokenizer = tiny
    prompts, completions = mixed_group()
    with torch.no_grad():
        plain, _ = completion_logprobs(model, prompts, completions, tokenizer.pad_token_id)
    lora = set_memory_options(add_lora(copy.deepcopy(model), LoraSection(r=4, alpha=8, dropout=0.0)),
                              logprob_chunk_size=5)
    reference = frozen_reference(lora)   # adapters switched off for the forward: the start model
    assert memory_options(reference) == MemoryOptions(5, "none")
    rows, handle = head_rows(lora)
    with torch.no_grad():
        chunked, _ = completion_logprobs(reference, prompts, completions, tokenizer.pad_token_id)
    handle.remove()
    torch.testing.assert_close(chunked, plain, rtol=1e-6, atol=1e-6)
    assert max(rows) == 5 and sum(rows) == sum(len(c) for c in completions)   # no recomputation without gradient


def test_a_head_with_a_logit_transform_keeps_the_unchunked_path(tiny):
    model, tokenizer = tiny
    softcapped = set_memory_options(copy.deepcopy(model), logprob_chunk_size=4)
    softcapped.config.final_logit_softcapping = 30.0   # a Gemma-2-like head: logits are not the head's output
    rows, handle = head_rows(softcapped)
    prompts, completions = mixed_group()
    with torch.no_grad():
        completion_logprobs(softcapped, prompts, completions, tokenizer.pad_token_id)
    handle.remove()
    assert len(rows) == 1 and rows[0] > 4


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("lora", [False, True])
def test_gradient_checkpointing_gives_the_same_gradients(tiny, layout, lora):
    model, tokenizer = tiny
    base = copy.deepcopy(model)
    if lora:
        torch.manual_seed(0)
        base = add_lora(base, LoraSection(r=4, alpha=8, dropout=0.0))
        for name, p in base.named_parameters():   # LoRA's B starts at 0: give it values so every path has gradient
            if "lora_B" in name:
                p.data.normal_(0, 0.02)
    plain_logps, plain_grads = logps_and_grads(base, LAYOUTS[layout], tokenizer.pad_token_id)
    checkpointed = set_memory_options(copy.deepcopy(base), gradient_checkpointing=True)
    # transformers checkpoints a layer's forward (its hooks stay outside): count a module inside it
    mlp = next(m for m in checkpointed.modules() if type(m).__name__ == "LlamaDecoderLayer").mlp
    calls = []
    mlp.register_forward_pre_hook(lambda *args: calls.append(1))   # the recomputation stops early, before its end
    logps, grads = logps_and_grads(checkpointed, LAYOUTS[layout], tokenizer.pad_token_id)
    torch.testing.assert_close(logps, plain_logps, rtol=1e-6, atol=1e-6)
    assert_grads_close(grads, plain_grads)
    assert len(calls) == 2   # the layer ran in the forward and again in the backward: checkpointed
    if lora:
        assert all("lora_" in name for name in grads)   # only the adapters train


def test_gradient_checkpointing_with_chunks_on_the_trie(tiny):
    model, tokenizer = tiny
    plain_logps, plain_grads = logps_and_grads(model, completion_logprobs, tokenizer.pad_token_id)
    both = set_memory_options(copy.deepcopy(model), logprob_chunk_size=16, gradient_checkpointing=True)
    logps, grads = logps_and_grads(both, completion_logprobs, tokenizer.pad_token_id)
    torch.testing.assert_close(logps, plain_logps, rtol=1e-6, atol=1e-6)
    assert_grads_close(grads, plain_grads)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("chunk", [None, 8])
def test_bf16_autocast_logprobs_are_close_to_float32(tiny, layout, chunk):
    model, tokenizer = tiny
    plain_logps, plain_grads = logps_and_grads(model, LAYOUTS[layout], tokenizer.pad_token_id)
    autocast = set_memory_options(copy.deepcopy(model), logprob_chunk_size=chunk, autocast="bf16")
    dtypes = []
    # (the chunked forward's outer call, whose head returns the [M] float32 log-probs of its chunks: left out)
    handle = autocast.get_output_embeddings().register_forward_hook(
        lambda m, a, out: None if out.dim() == 1 else dtypes.append(out.dtype))
    logps, grads = logps_and_grads(autocast, LAYOUTS[layout], tokenizer.pad_token_id)
    handle.remove()
    assert set(dtypes) == {torch.bfloat16}                              # the head ran in bfloat16 ...
    assert logps.dtype == torch.float32                                 # ... the log-softmax in float32
    assert all(p.dtype == torch.float32 for p in autocast.parameters())   # weights untouched
    assert grads.keys() == plain_grads.keys()
    # bfloat16 keeps 8 bits of mantissa: log-probs near -11 move by a few hundredths
    assert (logps - plain_logps).abs().max().item() < 0.1
    assert torch.corrcoef(torch.stack([logps.flatten(), plain_logps.flatten()]))[0, 1] > 0.999


def test_bf16_autocast_generation_runs(tiny):
    model, tokenizer = tiny
    autocast = set_memory_options(copy.deepcopy(model), autocast="bf16")
    dtypes = []
    autocast.get_output_embeddings().register_forward_hook(lambda m, a, out: dtypes.append(out.dtype))
    torch.manual_seed(0)
    out = HFGenerator(autocast, tokenizer, max_prompt_tokens=32).sample(["def f(x):", "x ="], 2,
                                                                      SamplingParams(max_new_tokens=4))
    assert [len(row) for row in out] == [2, 2]
    assert all(0 < len(c.completion_ids) <= 4 for row in out for c in row)
    assert dtypes and set(dtypes) == {torch.bfloat16}


def test_agent_model_fields_reach_the_agents():
    from cooprl.trainers.team import build_team
    config = load_config(None, [f"agent_model.name={TINY_RANDOM}", "agent_model.device=cpu",
                                "agent_model.torch_dtype=float32", "agent_model.logprob_chunk_size=64",
                                "agent_model.gradient_checkpointing=true", "agent_model.autocast=bf16"])
    model = build_team(Run.of(config, "grpo"), 1)[0].model
    assert memory_options(model) == MemoryOptions(64, "bf16")
    assert all(layer.gradient_checkpointing for layer in model.model.layers)
    default = load_config(None, [])
    assert (default.agent_model.logprob_chunk_size, default.agent_model.gradient_checkpointing,
            default.agent_model.autocast) == (None, False, "none")


@pytest.mark.parametrize("override, message", [
    ("agent_model.logprob_chunk_size=0", "agent_model.logprob_chunk_size"),
    ("agent_model.autocast=fp16", "agent_model.autocast"),
    ("agent_model.gradient_checkpointing=sometimes", "agent_model.gradient_checkpointing"),
])
def test_bad_memory_options_name_their_key(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, [override])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_chunked_logprobs_of_a_sharded_model_equal_the_unsharded_ones(tiny, layout, tmp_path):
    """fsdp with a chunk size: the head runs inside the root unit's forward, which holds its whole weights, and its
    backward gathers them again for the chunks' recomputation (run after the forward, the head met its sharded
    weight: "aten.mm got mixed torch.Tensor and DTensor"). One process: its shards are the whole tensors."""
    from cooprl.parallel import fsdp
    model, tokenizer = tiny
    plain_logps, plain_grads = logps_and_grads(model, LAYOUTS[layout], tokenizer.pad_token_id)
    torch.distributed.init_process_group("gloo", init_method=f"file://{tmp_path}/group", rank=0, world_size=1)
    try:
        sharded = fsdp.shard_model(set_memory_options(copy.deepcopy(model), logprob_chunk_size=7))
        with fsdp.full_weights(sharded):   # as a step's rollout: afterwards every unit reshards after its forward
            pass
        logps, grads = logps_and_grads(sharded, LAYOUTS[layout], tokenizer.pad_token_id)
    finally:
        torch.distributed.destroy_process_group()
    torch.testing.assert_close(logps, plain_logps, rtol=1e-6, atol=1e-6)
    assert_grads_close({name: grad.full_tensor() for name, grad in grads.items()}, plain_grads)
