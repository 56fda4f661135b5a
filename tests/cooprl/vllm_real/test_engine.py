"""The vLLM backend against vLLM's real engine (CPU build): the engine samples from the trained model's distribution
(its sampler log-probs are the HF model's log-softmax) for every way of syncing weights, a stale engine is caught,
and greedy texts, stop strings and the continuation round are HF's own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from cooprl.config import LoraSection
from cooprl.models.loading import SMOLLM2, load_causal_lm, load_tokenizer, resolve_model_path
from cooprl.rollout.generation import HFGenerator, SamplingParams
from cooprl.rollout.vllm_engines import EngineOptions
from cooprl.rollout.vllm_generation import VLLMGenerator
from cooprl.rollout.vllm_platform import check_vllm_backend, gpu_executor
from envs.code_generation.data import problem_from_record
from envs.code_generation.prompts import aux_prompt, main_prompt, stop_strings

PROMPTS = ["def add(a, b):", "Write a function that reverses a list.\n\ndef reverse(items):"]
UNWARPED = SamplingParams(max_new_tokens=16, temperature=1.0, top_p=1.0)   # vLLM's log-probs are then log-softmax


def hf_logprobs(model, completion) -> torch.Tensor:
    """Return the HF model's log-softmax of each completion token given the prompt and the tokens before it."""
    ids = torch.cat([completion.prompt_ids, completion.completion_ids]).unsqueeze(0)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(completion.prompt_ids) - 1:-1].float()
    return torch.log_softmax(logits, -1).gather(-1, completion.completion_ids.unsqueeze(-1)).squeeze(-1)


def largest_gap(generator: VLLMGenerator, model) -> float:
    """Return max |vLLM sampler log-prob - HF log-softmax| over 2 prompts x 2 samples."""
    gaps = []
    for samples in generator.sample(PROMPTS, 2, UNWARPED):
        for completion in samples:
            assert len(completion.sampler_logprobs) == len(completion.completion_ids) > 0
            gaps.append((completion.sampler_logprobs - hf_logprobs(model, completion)).abs().max().item())
    return max(gaps)


def trained_model(folder: str, lora: bool):
    model = load_causal_lm(folder, device="cpu", torch_dtype="float32",
                           lora=LoraSection(r=8, alpha=16, dropout=0.0) if lora else None)
    if lora:   # fresh adapters are zero: make them change the weights
        torch.manual_seed(1)
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.data.normal_(std=0.5)
    return model


def perturb(model) -> None:
    """Change every trained matrix, as an optimizer step would (without telling the engine)."""
    torch.manual_seed(2)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad and p.dim() == 2:
                p.add_(torch.randn_like(p) * (0.5 if p.shape[0] <= 16 or p.shape[1] <= 16 else 0.05))


@pytest.mark.parametrize("mode", ["full", "merged_lora", "lora_request"])
def test_sampler_logprobs_are_the_models_and_follow_every_update(tiny32, mode):
    model = trained_model(tiny32, lora=mode != "full")
    tokenizer = load_tokenizer(tiny32)
    options = EngineOptions(model_path=tiny32, max_prompt_tokens=32, max_model_len=128, sampler_logprobs=True,
                            weight_sync="lora" if mode == "lora_request" else "merged")
    generator = VLLMGenerator(model, tokenizer, options, vllm_module=check_vllm_backend("cpu"))
    assert largest_gap(generator, model) < 1e-4          # the first sample syncs: the engine samples our model
    perturb(model)
    assert largest_gap(generator, model) > 0.05          # not told: the engine still samples the old weights
    generator.mark_stale()                               # what the optimizer hook does after every step
    assert largest_gap(generator, model) < 1e-4


# ------------------------------------------------------------------------------------- greedy texts and stop strings
def test_vllm_builds_the_engine_with_the_executor_that_names_its_gpu(tiny32, monkeypatch):
    """`gpu_executor` (what a GPU engine gets, to sit on its agent's GPU) goes through vLLM's own LLM -> EngineArgs ->
    ParallelConfig -> Executor.get_class, and vLLM asks it for the worker's local rank. The CPU build has rank 0
    only: the engine built with it samples greedily what the HF model does."""
    vllm = check_vllm_backend("cpu")
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    asked = []

    class Recorded(gpu_executor(0)):
        def _distributed_args(self):
            asked.append(super()._distributed_args())
            return asked[-1]

    llm = vllm.LLM(model=tiny32, tokenizer=tiny32, dtype="float32", seed=0, max_model_len=128,
                   distributed_executor_backend=Recorded)
    assert isinstance(llm.llm_engine.model_executor, Recorded) and [args[1:] for args in asked] == [(0, 0)]
    tokenizer = load_tokenizer(tiny32)
    prompt = tokenizer(PROMPTS[0], add_special_tokens=False)["input_ids"]
    [result] = llm.generate([{"prompt_token_ids": prompt}], vllm.SamplingParams(temperature=0.0, max_tokens=8,
                                                                                 ignore_eos=True), use_tqdm=False)
    model = load_causal_lm(tiny32, device="cpu", torch_dtype="float32")
    ids = list(prompt)
    with torch.no_grad():   # greedy, EOS or not (as ignore_eos)
        for _ in range(8):
            ids.append(int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
    assert list(result.outputs[0].token_ids) == ids[len(prompt):]


@pytest.fixture(scope="module")
def smollm2():
    folder = resolve_model_path(SMOLLM2)   # the embedded SmolLM2-135M-Instruct, converted once per cache
    return load_causal_lm(folder, device="cpu", torch_dtype="float32"), load_tokenizer(folder), folder


def coop_prompts(count: int) -> list[str]:
    lines = (Path(__file__).parents[3] / "envs/code_generation/data/coop.jsonl").read_text().splitlines()[:count]
    problems = [problem_from_record(json.loads(line), "coop.jsonl") for line in lines]
    return [prompt for problem in problems for prompt in (aux_prompt(problem), main_prompt(problem))]


@pytest.mark.parametrize("chat_template", [False, True])
def test_greedy_texts_and_stops_are_hfs(smollm2, chat_template):
    model, tokenizer, folder = smollm2
    # the coop task's prompts (aux and main) and two that SmolLM2 continues with a blank line and a new `def`
    prompts = coop_prompts(3) + ["def add(a, b):\n    return a + b\n\n", "def add(a, b):\n    return a + b\n\n\n"]
    params = SamplingParams(max_new_tokens=64, temperature=0.0, stop_strings=tuple(stop_strings("main")))
    hf = HFGenerator(model, tokenizer, max_prompt_tokens=448, chat_template=chat_template).sample(prompts, 1, params)
    options = EngineOptions(model_path=folder, max_prompt_tokens=448, max_model_len=512, chat_template=chat_template)
    generator = VLLMGenerator(model, tokenizer, options, vllm_module=check_vllm_backend("cpu"))
    rounds = []
    generate = generator._generate
    generator._generate = lambda requests, p: rounds.append(len(requests)) or generate(requests, p)
    ours = generator.sample(prompts, 1, params)
    for [h], [v] in zip(hf, ours):
        assert (v.text, v.completion_ids.tolist(), v.truncated) == (h.text, h.completion_ids.tolist(), h.truncated)
    assert any(not v.truncated for [v] in ours)   # some stopped at a stop string or EOS, not only at the budget
    assert rounds[0] == len(prompts)
    if not chat_template:   # vLLM stopped some at a stop string opening the completion (ours skip it): a second round
        assert len(rounds) >= 2


# ------------------------------------------------------------------------------------- one process, several engines
def test_each_engine_reads_its_own_cache_root_and_makes_its_own_rotary_embedding(tiny32, tmp_path, monkeypatch):
    """vLLM freezes its environment at the first engine's build and caches one rotary module per shape process-wide:
    a second engine (on another GPU, on a GPU machine) reads the cache root set for it and makes its own module
    (cooprl.rollout.vllm_engines.prepare_engine_build). Against the real vllm.envs and _ROPE_DICT."""
    import vllm.envs as envs
    from vllm.model_executor.layers.rotary_embedding import _ROPE_DICT
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path / "cache"))
    model, tokenizer = trained_model(tiny32, lora=False), load_tokenizer(tiny32)
    engines = []   # kept alive: an engine's shutdown (when collected) resets vLLM's distributed state and environment

    def engine() -> tuple[str, object]:
        generator = VLLMGenerator(model, tokenizer,
                                  EngineOptions(model_path=tiny32, max_prompt_tokens=32, max_model_len=128),
                                  vllm_module=check_vllm_backend("cpu"))
        engines.append(generator)
        rotary = generator.llm.llm_engine.model_executor.driver_worker.worker.model_runner.model.model.layers[0]
        return envs.VLLM_CACHE_ROOT, rotary.self_attn.rotary_emb

    first_root, first_rotary = engine()
    assert hasattr(envs.__getattr__, "cache_clear")   # vLLM froze its environment at the end of the build
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path / "elsewhere"))   # as another device's root would differ
    second_root, second_rotary = engine()
    assert first_root == str(tmp_path / "cache" / "cooprl-engines-on-cpu")
    assert second_root == str(tmp_path / "elsewhere" / "cooprl-engines-on-cpu")   # read afresh, not the frozen one
    assert second_rotary is not first_rotary and list(_ROPE_DICT.values()) == [second_rotary]
