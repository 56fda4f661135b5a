"""The stale-weights guard (cooprl.rollout.vllm_guard) against a fake engine that scores with a model of its own: the
gap's figures, the bound per dtype, the one error, and a check after every push and wake-up, not after every sample.
Against vLLM's real CPU build: tests/cooprl/vllm_real/test_guard.py."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import pytest
import torch

from cooprl.errors import UserError
from cooprl.models.loading import TINY_RANDOM, load_causal_lm
from cooprl.rollout import vllm_generation
from cooprl.rollout.generation import SamplingParams
from cooprl.rollout.vllm_guard import (DEFAULT_BOUNDS, PROBE_SEED, PROBE_TOKENS, EngineWeightsError, LogprobGap,
                                       ProbeSequence, WeightGuard, logprob_gap, probe_prompts, trainer_logprobs,
                                       weight_guard)
from tests.cooprl.rollout.test_vllm_generation import (FakeLLM, FakeLogprob, FakeOutput, FakeRequestOutput,  # noqa: F401
                                                       fake_vllm, make_generator, tiny_tokenizer)

PARAMS = SamplingParams(max_new_tokens=2, temperature=1.0)


def test_the_gap_is_the_mean_and_the_largest_difference_over_the_probe_tokens():
    engine = [torch.tensor([-1.0, -2.0]), torch.tensor([-3.0])]
    assert logprob_gap(engine, [torch.tensor([-1.5, -2.0]), torch.tensor([-2.0])]) == LogprobGap(0.5, 1.0, 3)
    nan = logprob_gap([torch.tensor([float("nan"), -2.0])], [torch.tensor([-1.0, -2.0])])
    assert nan.mean == nan.largest == float("inf")   # an engine returning NaN is never within a bound


def test_the_bound_fits_the_dtype_unless_the_key_sets_it_and_0_turns_the_guard_off():
    assert weight_guard(None, torch.float32, "agent 1") == WeightGuard(0.01, "agent 1")
    assert weight_guard(None, torch.bfloat16, "agent 0").bound == DEFAULT_BOUNDS[torch.bfloat16] == 0.1
    assert weight_guard(0.3, torch.float32, "agent 0").bound == 0.3
    assert weight_guard(0, torch.bfloat16, "agent 0") is None


def greedy_probes(model, prompts: list[list[int]]) -> list[tuple[ProbeSequence, torch.Tensor]]:
    """What an engine holding `model`'s weights returns for the probes: a continuation of each (here the prompt's own
    tokens again, scored in one forward) with its tokens' log-softmax."""
    out = []
    for prompt in prompts:
        completion = (list(prompt) * PROBE_TOKENS)[:PROBE_TOKENS]
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([list(prompt) + completion])).logits[0, len(prompt) - 1:-1]
        logps = torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(completion).unsqueeze(-1)).squeeze(-1)
        out.append((ProbeSequence(list(prompt), completion), logps))
    return out


def test_the_probes_continuations_are_scored_token_by_token():
    model, tokenizer = load_causal_lm(TINY_RANDOM, device="cpu"), tiny_tokenizer()
    prompts = probe_prompts(tokenizer)
    assert len(prompts) == 4 and all(len(p) >= 8 for p in prompts)
    probes = [ProbeSequence(p, [11, 12, 13, 11]) for p in prompts]
    model.train()
    scores = trainer_logprobs(model, probes)
    assert model.training   # put back as it was
    assert [len(s) for s in scores] == [4] * 4
    probe = probes[0]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([probe.ids])).logits[0].float()
    expected = [torch.log_softmax(logits[len(probe.prompt) - 1 + k], -1)[token].item()
                for k, token in enumerate(probe.completion)]
    assert scores[0].tolist() == pytest.approx(expected, abs=1e-6)


def test_a_gap_above_the_bound_is_one_error_naming_the_agent_the_sync_and_the_gap():
    model, tokenizer = load_causal_lm(TINY_RANDOM, device="cpu"), tiny_tokenizer()
    guard = WeightGuard(0.01, "agent 1")
    exact = guard.check(lambda prompts: greedy_probes(model, prompts), model, tokenizer, "a push")
    assert exact.mean < 1e-6 and exact.tokens == 4 * PROBE_TOKENS and guard.checks == 1

    def off_by_half(prompts):   # every token's log-prob 0.5 away, the last one 2.0
        probes = greedy_probes(model, prompts)
        probes[-1][1][-1] += 1.5
        return [(probe, logprobs + 0.5) for probe, logprobs in probes]

    with pytest.raises(EngineWeightsError) as caught:
        guard.check(off_by_half, model, tokenizer, "the merged weight push of version 3")
    tokens = 4 * PROBE_TOKENS
    message = str(caught.value)
    assert isinstance(caught.value, UserError)   # the command line prints it as one `error:` line, exit 2
    assert message.startswith("agent 1's vLLM engine samples other weights than the trained model after the merged "
                              f"weight push of version 3: the mean log-prob gap on {tokens} probe tokens is "
                              f"{0.5 + 1.5 / tokens:.3g} (largest 2), above the bound 0.01")
    assert "agent_model.vllm_weight_check" in message


# ------------------------------------------------------------------------------------- the guard inside the generator
@dataclass
class ScoringEngineModel:
    """The engine's torch model: a copy of the trained model, loaded with what is pushed."""

    model: torch.nn.Module
    events: list

    def load_weights(self, weights):
        missing, unexpected = self.model.load_state_dict(dict(weights), strict=False)
        assert not unexpected
        self.events.append("load")


class ScoringLLM(FakeLLM):
    """FakeLLM that scores prompt log-probs with its own copy of `ScoringLLM.source` (read at its build, as vLLM reads
    the checkpoint). Sleep at level 2 discards its weights and, as vLLM #29341 does, `lost_at_sleep` buffers."""

    source: torch.nn.Module
    lost_at_sleep: tuple[str, ...] = ()

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.engine_model = ScoringEngineModel(copy.deepcopy(ScoringLLM.source).eval(), self.events)
        self.llm_engine.model_executor.driver_worker.worker.model_runner.model = self.engine_model

    def sleep(self, level=1):
        super().sleep(level)
        with torch.no_grad():
            for name, tensor in [*self.engine_model.model.named_parameters(), *self.engine_model.model.named_buffers()]:
                if level == 2 and ("." + name.rpartition(".")[2] in self.lost_at_sleep or "." not in name
                                   or isinstance(tensor, torch.nn.Parameter)):
                    tensor.zero_()

    def generate(self, prompts, sampling_params, use_tqdm=True, **options):
        if sampling_params[0].seed != PROBE_SEED:
            return super().generate(prompts, sampling_params, use_tqdm, **options)
        self.events.append("score")
        probe = sampling_params[0]
        assert (probe.n, probe.max_tokens, probe.temperature, probe.top_p, probe.ignore_eos, probe.logprobs) == \
            (1, PROBE_TOKENS, 1.0, 1.0, True, 0)   # the plain log-softmax, never cut short by an EOS
        outputs = []
        for sampled, logprobs in greedy_probes(self.engine_model.model, [p["prompt_token_ids"] for p in prompts]):
            positions = [{t: FakeLogprob(lp)} for t, lp in zip(sampled.completion, logprobs.tolist(), strict=True)]
            outputs.append(FakeRequestOutput([FakeOutput(0, sampled.completion, "length", None, positions)]))
        return outputs


@pytest.fixture
def scoring_vllm(fake_vllm, monkeypatch):   # noqa: F811 (the fixture imported above)
    monkeypatch.setattr(fake_vllm, "LLM", ScoringLLM)
    monkeypatch.setattr(ScoringLLM, "lost_at_sleep", ())
    return fake_vllm


def guarded(model, fake, **kwargs):
    ScoringLLM.source = model
    generator = make_generator((model, tiny_tokenizer()), fake, guard=WeightGuard(1e-4, "agent 0"), **kwargs)
    return generator, FakeLLM.instances[-1]


def a_step(model):
    """What an optimizer step does to the weights: every matrix moves."""
    torch.manual_seed(3)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.add_(torch.randn_like(p) * 0.05)


def test_every_push_is_checked_once_and_a_push_missing_a_layer_stops_the_next_sample(scoring_vllm, monkeypatch):
    model = load_causal_lm(TINY_RANDOM, device="cpu")
    generator, engine = guarded(model, scoring_vllm)
    generator.sample(["x"], 1, PARAMS)
    generator.sample(["y"], 1, PARAMS)   # no push since: no check
    assert engine.events == ["load", "reset", "score", "generate", "generate"]
    a_step(model)
    generator.mark_stale()
    generator.sample(["x"], 1, PARAMS)
    assert engine.events[5:] == ["load", "reset", "score", "generate"] and generator.guard.checks == 2
    pushed = vllm_generation.merged_weights   # now a push that leaves layer 1 out
    monkeypatch.setattr(vllm_generation, "merged_weights",
                        lambda m: ((n, t) for n, t in pushed(m) if ".layers.1." not in n))
    a_step(model)
    generator.mark_stale()
    with pytest.raises(EngineWeightsError, match="^agent 0's vLLM engine samples other weights than the trained model "
                                                 "after the merged weight push of version 3: the mean log-prob gap"):
        generator.sample(["x"], 1, PARAMS)
    assert engine.events[-1] == "score"   # stopped before sampling


def test_a_wake_from_level_2_is_checked_and_a_lost_buffer_is_caught(scoring_vllm, monkeypatch):
    monkeypatch.setattr(vllm_generation, "MERGED_SLEEP_LEVEL", 2)   # level 1 until a GPU proves level 2
    model = load_causal_lm(TINY_RANDOM, device="cpu")
    generator, engine = guarded(model, scoring_vllm, sleep=True)
    generator.sample(["x"], 1, PARAMS)
    ids = torch.tensor([[1, 2, 3]])
    model(input_ids=ids).logits.sum().backward()   # the update: the engine sleeps, its weights discarded
    generator.sample(["x"], 1, PARAMS)             # no step: the wake-up reloads the same weights, then the check
    assert engine.events[4:] == ["sleep2", "wake_up:weights", "load", "wake_up:kv_cache", "reset", "score", "generate"]
    monkeypatch.setattr(ScoringLLM, "lost_at_sleep", (".inv_freq",))   # the rotary table gone with the weights
    model(input_ids=ids).logits.sum().backward()
    with pytest.raises(EngineWeightsError, match="after the merged weight push of version 1, on waking from a level-2 "
                                                 "sleep: the mean log-prob gap"):
        generator.sample(["x"], 1, PARAMS)


def test_no_guard_no_scoring(scoring_vllm):
    ScoringLLM.source = load_causal_lm(TINY_RANDOM, device="cpu")
    generator = make_generator((ScoringLLM.source, tiny_tokenizer()), scoring_vllm)
    generator.sample(["x"], 1, PARAMS)
    assert "score" not in FakeLLM.instances[-1].events
