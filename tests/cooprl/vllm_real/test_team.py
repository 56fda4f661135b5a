"""One engine for a team (cooprl.rollout.vllm_team) against vLLM's real CPU build: two agents whose adapters differ each
sample from their own adapter on the one engine (their sampler log-probs are their own model's, not the other's), and
a new adapter version of one agent never changes the other's samples. Prints the gaps it saw (`pytest -s`)."""

from __future__ import annotations

import json

import pytest
import torch

from cooprl.config import LoraSection
from cooprl.models.loading import load_causal_lm, load_tokenizer
from cooprl.rollout.vllm_engines import EngineOptions
from cooprl.rollout.vllm_generation import VLLMGenerator, close_engines
from cooprl.rollout.vllm_guard import weight_guard
from cooprl.rollout.vllm_platform import check_vllm_backend
from cooprl.rollout.vllm_team import TeamEngine
from tests.cooprl.vllm_real.test_engine import PROMPTS, UNWARPED, hf_logprobs


def agent_model(folder: str, seed: int):
    """Return a LoRA model of `folder` whose adapter is its own (seeded: fresh adapters are zero, B is drawn here)."""
    torch.manual_seed(seed)
    model = load_causal_lm(folder, device="cpu", torch_dtype="float32", lora=LoraSection(r=8, alpha=16, dropout=0.0))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(std=0.5)
    return model


def sampled_gaps(generator: VLLMGenerator, models) -> tuple[list, list[float]]:
    """Return (the samples: ids and sampler log-probs, seeded) and max |sampler log-prob - each model's log-softmax|."""
    torch.manual_seed(5)   # the request seeds are drawn from torch's generator: the same draws each call
    completions = [c for samples in generator.sample(PROMPTS, 2, UNWARPED) for c in samples]
    gaps = [max((c.sampler_logprobs - hf_logprobs(model, c)).abs().max().item() for c in completions)
            for model in models]
    return [(c.completion_ids.tolist(), c.sampler_logprobs) for c in completions], gaps


def test_two_agents_sample_their_own_adapters_and_one_agents_push_leaves_the_other_alone(tiny32):
    models = [agent_model(tiny32, seed) for seed in (1, 2)]
    tokenizer = load_tokenizer(tiny32)
    team = TeamEngine(2)
    options = EngineOptions(model_path=tiny32, max_prompt_tokens=32, max_model_len=128, sampler_logprobs=True,
                            weight_sync="lora", max_loras=2)
    first = VLLMGenerator(models[0], tokenizer, options, vllm_module=check_vllm_backend("cpu"),
                          guard=weight_guard(None, torch.float32, "agent 0"))
    generators = [team.seat_first(first), team.join(models[1], tokenizer, weight_guard(None, torch.float32, "agent 1"),
                                                    "cpu")]
    samples, gaps = {}, {}
    for a in (0, 1):
        samples[a], gaps[a] = sampled_gaps(generators[a], models)
        print(f"agent {a}: max gap to agent 0's model {gaps[a][0]:.2e}, to agent 1's {gaps[a][1]:.2e}")
        assert gaps[a][a] < 1e-4 and gaps[a][1 - a] > 0.05   # each samples its own adapter, not the other's

    # agent 1's samples before agent 0's push: from a call that, like the one after it, runs no guard check (a check
    # draws from torch's generator before the request seeds are drawn)
    before, _ = sampled_gaps(generators[1], models)
    with torch.no_grad():                                     # agent 0's optimizer step...
        for name, p in models[0].named_parameters():
            if "lora_B" in name:
                p.add_(torch.randn_like(p) * 0.5)
    generators[0].mark_stale()                                # ... and its hook: a new adapter version
    pushed, pushed_gaps = sampled_gaps(generators[0], models)
    print(f"agent 0 after its new version: max gap to its model {pushed_gaps[0]:.2e}")
    assert pushed_gaps[0] < 1e-4 and [ids for ids, _ in pushed] != [ids for ids, _ in samples[0]]
    again, again_gaps = sampled_gaps(generators[1], models)
    print(f"agent 1 after agent 0's new version: max gap to its model {again_gaps[1]:.2e}")
    assert [ids for ids, _ in again] == [ids for ids, _ in before]   # the same tokens...
    for (_, logprobs), (_, earlier) in zip(again, before, strict=True):
        torch.testing.assert_close(logprobs, earlier, rtol=0, atol=1e-6)   # ... with the same log-probs
    assert [g.guard.checks for g in generators] == [2, 1]    # each agent's adapter checked once per version
    assert close_engines(generators) == 1


def shared_base_team(folder: str, learning_rate: float = 0.1):
    """Return a two-agent team of `folder` built by cooprl.trainers.team.build_team as a run configures it: one base
    with an adapter per agent (agent_model.share_base), one vLLM engine serving both adapters as LoRA requests."""
    from cooprl.config import Run, load_config
    from cooprl.trainers.team import build_team
    config = load_config(None, [
        f"agent_model.name={folder}", "agent_model.device=cpu", "agent_model.torch_dtype=float32",
        "agent_model.lora.r=8", "agent_model.lora.alpha=16", "agent_model.lora.dropout=0.0",
        "agent_model.share_base=true", "agent_model.generation_backend=vllm", "agent_model.vllm_weight_sync=lora",
        "agent_model.vllm_importance_cap=2.0", "agent_model.max_length=128", "magrpo.max_new_tokens=16",
        f"magrpo.learning_rate={learning_rate}", "wandb.mode=disabled"])
    return build_team(Run.of(config, "magrpo"), 2)


def test_a_shared_base_team_built_by_build_team_samples_each_view_from_its_own_adapter_on_one_engine(tiny32):
    from cooprl.models.shared_base import SharedBaseModel
    team = shared_base_team(tiny32)
    views, generators = [agent.model for agent in team], [agent.generator for agent in team]
    assert all(isinstance(view, SharedBaseModel) for view in views) and views[0].peft_model is views[1].peft_model
    assert generators[1].llm is generators[0].llm             # one engine for the team
    torch.manual_seed(3)
    with torch.no_grad():                                     # fresh adapters are zero: make the two differ
        for view in views:
            for name, p in view.named_parameters():
                if "lora_B" in name:
                    p.normal_(std=0.5)
    samples, gaps = {}, {}
    for a in (0, 1):   # each view's first sample: its adapter saved (through the view) and checked by its guard
        samples[a], gaps[a] = sampled_gaps(generators[a], views)
        print(f"view {a}: max gap to view 0 {gaps[a][0]:.2e}, to view 1 {gaps[a][1]:.2e}")
        assert gaps[a][a] < 1e-4 and gaps[a][1 - a] > 0.05   # each samples its own adapter, not the other's
    requests = [g._lora_request for g in generators]
    assert [(r.lora_name, r.lora_int_id) for r in requests] == [("cooprl-agent0-v1", 1), ("cooprl-agent1-v1", 2)]

    before, _ = sampled_gaps(generators[1], views)   # (no guard check in this call, nor in the one it is compared to)
    adapter_1 = {name: p.detach().clone() for name, p in views[1].named_parameters()}
    ids = torch.tensor([samples[0][0][0]])
    loss = -torch.log_softmax(views[0](input_ids=ids).logits[0, :-1], -1).gather(-1, ids[0, 1:, None]).mean()
    loss.backward()
    team[0].optimizer.step()                                  # agent 0's optimizer step (its hook: a new version)
    assert all(torch.equal(p, adapter_1[name]) for name, p in views[1].named_parameters())   # agent 1's untouched
    pushed, pushed_gaps = sampled_gaps(generators[0], views)
    print(f"view 0 after its step: max gap to its adapter {pushed_gaps[0]:.2e}")
    assert pushed_gaps[0] < 1e-4 and [ids for ids, _ in pushed] != [ids for ids, _ in samples[0]]
    again, _ = sampled_gaps(generators[1], views)
    assert [ids for ids, _ in again] == [ids for ids, _ in before]   # agent 1's seeded samples: the same tokens...
    for (_, logprobs), (_, earlier) in zip(again, before, strict=True):
        torch.testing.assert_close(logprobs, earlier, rtol=0, atol=1e-6)   # ... with the same log-probs
    assert [(g._version, g._lora_request.lora_int_id) for g in generators] == [(2, 3), (1, 2)]
    assert generators[1]._lora_request is requests[1]          # only agent 0's adapter version changed
    assert [g.guard.checks for g in generators] == [2, 1]      # the guard passed for each view after each version
    assert close_engines(generators) == 1


def magrpo_run(folder, tiny32: str, share_base: bool) -> tuple[list[dict], list[dict[str, torch.Tensor]]]:
    """Return (the metrics rows, each agent's adapter at the end) of a 2-step two-agent MAGRPO run on vLLM's CPU build
    (LoRA requests, seeded): one base and one engine for the team (`share_base`), or a base and an engine per agent."""
    from safetensors.torch import load_file

    from tests.cooprl.vllm_real.test_runs import run
    name = f"share-base-{str(share_base).lower()}"
    folder.mkdir()
    result = run(["train_magrpo.py", "--config", "configs/magrpo_che_cpu.yaml", "--override",
                  f"agent_model.name={tiny32}", "agent_model.generation_backend=vllm", "agent_model.lora.r=8",
                  f"agent_model.share_base={str(share_base).lower()}", "agent_model.vllm_weight_sync=lora",
                  "agent_model.vllm_importance_cap=2.0", "agent_model.max_length=512", "magrpo.max_steps=2",
                  "magrpo.max_new_tokens=24", "magrpo.num_generations=2", "magrpo.eval_at_start=false",
                  "magrpo.eval_num_samples=2", "magrpo.advantage_mode=raw", "magrpo.advantage_normalization=false",
                  "magrpo.learning_rate=1e-2", "checkpoint.checkpoint_interval=2", f"output.base_dir={folder / 'runs'}",
                  f"output.run_name={name}"], folder)
    output = result.stdout + result.stderr   # vLLM logs to stdout
    assert result.returncode == 0 and "Traceback" not in output, output[-3000:]
    assert output.count("init engine (profile") == (1 if share_base else 2), output[-3000:]   # engines built
    run_folder = folder / "runs" / name
    metrics = [json.loads(line) for line in (run_folder / "metrics.jsonl").read_text().splitlines()]
    adapters = [load_file(run_folder / f"checkpoints/checkpoint-2/agent_{a}/adapter_model.safetensors")
                for a in (0, 1)]
    return metrics, adapters


def test_a_magrpo_run_on_one_base_and_one_engine_equals_the_run_with_a_base_and_an_engine_per_agent(tiny32, tmp_path):
    # the same seeds: vLLM's seeded requests draw the same tokens from the same log-probs, in one engine or two
    (shared, shared_adapters), (separate, separate_adapters) = (
        magrpo_run(tmp_path / f"share-{s}", tiny32, s) for s in (True, False))
    steps = [row for row in shared if "agent_0/loss" in row]
    assert len(steps) == 2 and all(row["agent_0/loss"] != row["agent_1/loss"] for row in steps)   # each its samples
    assert len(shared) == len(separate) == 3   # two steps and the final evaluation
    for ours, theirs in zip(shared, separate, strict=True):
        timings = {key for key in ours if key.startswith("time/") or key == "wall_time"}
        assert ours.keys() == theirs.keys()
        assert {k: v for k, v in ours.items() if k not in timings} == pytest.approx(
            {k: v for k, v in theirs.items() if k not in timings}, rel=1e-6, abs=1e-9)   # observed: equal
    for ours, theirs in zip(shared_adapters, separate_adapters, strict=True):   # the trained adapters, too
        assert ours.keys() == theirs.keys()
        for key, tensor in ours.items():
            torch.testing.assert_close(tensor, theirs[key], rtol=0, atol=1e-6)   # observed: equal
