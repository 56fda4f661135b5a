"""One vLLM engine for a team that shares a base model (cooprl.rollout.vllm_team), against the fake `vllm` module of
test_vllm_generation: one engine built for every agent, each agent's requests carry its own LoRA request, a new adapter
version (and LoRA id) per agent after its own optimizer step, one sleep and one wake per rollout, each agent's adapter
checked by the stale-weights guard, one engine per rank under ddp. Against vLLM's real CPU build:
tests/cooprl/vllm_real/test_team.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from cooprl.config import ConfigError, Run, load_config
from cooprl.models.loading import TINY_RANDOM
from cooprl.parallel.order import Ranks
from cooprl.rollout import vllm_platform
from cooprl.rollout.generation import SamplingParams
from cooprl.rollout.vllm_engines import AgentEngine, EngineOptions
from cooprl.rollout.vllm_generation import VLLMGenerator, build_vllm_generator, close_engines
from cooprl.rollout.vllm_guard import WeightGuard
from cooprl.rollout.vllm_team import TeamEngine
from tests.cooprl.rollout.test_vllm_generation import FakeLLM, fake_vllm, lora_model, tiny_tokenizer  # noqa: F401
from tests.environment import child_env

ROOT = Path(__file__).resolve().parents[3]
TORCHRUN = Path(sys.executable).with_name("torchrun")

PARAMS = SamplingParams(max_new_tokens=2, temperature=1.0)


@dataclass
class RecordingGuard(WeightGuard):
    """A stale-weights guard that records, per check, the model checked, the LoRA request its probes were sampled
    with and the event named (the fake engine has no log-probs to compare)."""

    seen: list = field(default_factory=list)

    def check(self, engine_sample, model, tokenizer, event):
        engine = FakeLLM.instances[-1]
        engine_sample([])   # no probes: the fake engine records the request they would be sampled with
        self.seen.append((model, engine.lora_requests[-1], event))


def team_of_two(fake_vllm, tmp_path, sleep=False, guards=False):
    """Return two LoRA agents' generators on one engine (`TeamEngine`), with recording guards or none."""
    models = [lora_model(seed=0), lora_model(seed=1)]
    guard = RecordingGuard if guards else lambda *args: None
    team = TeamEngine(2)
    options = EngineOptions(model_path="m", max_prompt_tokens=16, max_model_len=32, weight_sync="lora", sleep=sleep,
                            adapter_dir=str(tmp_path / "agent0"), max_loras=2)
    first = VLLMGenerator(models[0], tiny_tokenizer(), options, vllm_module=fake_vllm, guard=guard(0.01, "agent 0"))
    generators = [team.seat_first(first), team.join(models[1], tiny_tokenizer(), guard(0.01, "agent 1"), "cpu")]
    return models, generators


def saved_adapter(request) -> dict[str, torch.Tensor]:
    return load_file(os.path.join(request.lora_path, "adapter_model.safetensors"))


def own_adapter(model) -> dict[str, torch.Tensor]:
    return {name: p.detach() for name, p in model.named_parameters() if "lora_" in name}


def test_one_engine_serves_each_agent_its_own_adapter_as_its_own_lora_request(fake_vllm, tmp_path):
    models, generators = team_of_two(fake_vllm, tmp_path)
    assert len(FakeLLM.instances) == 1                       # one engine for the team
    engine = FakeLLM.instances[0]
    assert (engine.kwargs["enable_lora"], engine.kwargs["max_loras"], engine.kwargs["max_lora_rank"]) == (True, 2, 8)
    assert all(g.llm is engine for g in generators)
    for generator in generators:
        generator.sample(["x"], 1, PARAMS)
    first = engine.lora_requests[-2:]
    assert [(r.lora_name, r.lora_int_id) for r in first] == [("cooprl-agent0-v1", 1), ("cooprl-agent1-v1", 2)]
    for request, model in zip(first, models, strict=True):   # each request holds its own agent's adapter
        saved, own = saved_adapter(request), own_adapter(model)
        assert {k.replace(".default", "") for k in own} == {k for k in saved}
        assert all(torch.equal(saved[k.replace(".default", "")], v) for k, v in own.items())
    assert not torch.equal(*[saved_adapter(r)["base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"]
                             for r in first])                # and the two adapters differ

    with torch.no_grad():                                    # agent 0's optimizer step (its hook marks it stale)
        for name, p in models[0].named_parameters():
            if "lora_B" in name:
                p.add_(1.0)
    generators[0].mark_stale()
    for generator in generators:
        generator.sample(["x"], 1, PARAMS)
    second = engine.lora_requests[-2:]
    assert (second[0].lora_name, second[0].lora_int_id) == ("cooprl-agent0-v2", 3)   # a new version, a new id
    assert second[1] is first[1]                             # agent 1 took no step: its request is unchanged
    assert not os.path.exists(first[0].lora_path) and os.path.exists(first[1].lora_path)
    generators[1].mark_stale()
    generators[1].sample(["x"], 1, PARAMS)
    assert engine.lora_requests[-1].lora_int_id == 4         # ids never repeat over agents and versions
    with models[1].disable_adapter():                        # a comparator's start model: the shared base
        generators[1].sample(["x"], 1, PARAMS)
    assert engine.lora_requests[-1] is None
    assert "load" not in engine.events                       # nothing is ever pushed: the base never changes

    assert close_engines(generators) == 1 and engine.events[-1] == "shutdown"   # closed once, for the team
    assert engine.events.count("shutdown") == 1 and not any(hasattr(g, "llm") for g in generators)


def test_the_guard_checks_each_agents_adapter_after_its_new_version_and_every_wake(fake_vllm, tmp_path):
    models, generators = team_of_two(fake_vllm, tmp_path, sleep=True, guards=True)
    guards = [g.guard for g in generators]
    for generator in generators * 2:                         # checked once per version, not per sample
        generator.sample(["x"], 1, PARAMS)
    assert [[(m, r.lora_int_id) for m, r, _ in g.seen] for g in guards] == [[(models[0], 1)], [(models[1], 2)]]
    generators[0].mark_stale()
    for generator in generators:
        generator.sample(["x"], 1, PARAMS)
    assert [len(g.seen) for g in guards] == [2, 1] and guards[0].seen[-1][1].lora_int_id == 3
    models[1](input_ids=torch.tensor([[1, 2, 3]])).logits.sum().backward()   # an update: the engine sleeps
    for generator in generators:
        generator.sample(["x"], 1, PARAMS)
    assert [len(g.seen) for g in guards] == [3, 2]           # after the wake both adapters are checked again
    assert all("on waking from a level-1 sleep" in g.seen[-1][2] for g in guards)


def test_the_team_engine_sleeps_once_per_update_and_wakes_once_per_rollout(fake_vllm, tmp_path):
    models, generators = team_of_two(fake_vllm, tmp_path, sleep=True)
    engine = FakeLLM.instances[0]
    assert engine.kwargs["enable_sleep_mode"] is True
    ids = torch.tensor([[1, 2, 3]])
    for _ in range(2):
        for generator in generators:                         # a rollout: every agent samples
            generator.sample(["x"], 1, PARAMS)
        for model, generator in zip(models, generators, strict=True):   # the update: every agent's forward
            model(input_ids=ids).logits.sum().backward()
            generator.mark_stale()
    assert engine.events == ["generate"] * 2 + ["sleep1", "wake_up"] + ["generate"] * 2 + ["sleep1"]


@pytest.mark.integration   # a trainer runs in-process (tests/conftest.py's lanes)
def test_magrpo_builds_one_engine_for_a_shared_base_team_and_steps_each_adapter(fake_vllm, monkeypatch, tmp_path):
    from cooprl.trainers.loop import seed_everything
    from cooprl.trainers.magrpo import build_magrpo
    from tests.scripted import scripted_task

    monkeypatch.setattr(vllm_platform, "check_vllm_backend", lambda device="auto", sleep=False: fake_vllm)
    config = load_config(None, [
        f"agent_model.name={TINY_RANDOM}", "agent_model.device=cpu", "agent_model.generation_backend=vllm",
        "agent_model.lora.r=8", "agent_model.share_base=true", "agent_model.vllm_weight_sync=lora",
        "agent_model.vllm_sleep=true", "magrpo.max_new_tokens=4", "magrpo.num_generations=2", "magrpo.num_turns=1",
        "magrpo.learning_rate=1e-2", "agent_model.temperature=1.0", "wandb.mode=disabled",
        "magrpo.rollout_buffer_size=1", f"output.base_dir={tmp_path}"])
    seed_everything(config.seed)
    algo = build_magrpo(Run.of(config, "magrpo"), scripted_task(num_agents=2))
    assert len(FakeLLM.instances) == 1 and FakeLLM.instances[0].kwargs["max_loras"] == 2   # a sleeping team engine
    engine = FakeLLM.instances[0]
    for step in range(2):
        algo.train_step(algo.task.train_items[step], step)   # a rollout of both agents, then each one's step
    assert engine.events.count("sleep1") == 2 and engine.events.count("wake_up") == 1
    assert [g._version for g in (agent.generator for agent in algo.team)] == [3, 3]   # one step each per train step
    by_agent = {}
    for request in engine.lora_requests:
        by_agent.setdefault(request.lora_name.split("-v")[0], set()).add(request.lora_int_id)
    assert by_agent == {"cooprl-agent0": {1, 3}, "cooprl-agent1": {2, 4}}   # each agent samples its own versions


def test_under_ddp_each_rank_builds_one_engine_for_its_team(fake_vllm, monkeypatch, tmp_path):
    monkeypatch.setattr(vllm_platform, "check_vllm_backend", lambda device="auto", sleep=False: fake_vllm)
    model_cfg = load_config(None, ["agent_model.lora.r=8", "agent_model.share_base=true",
                                   "agent_model.generation_backend=vllm", "agent_model.vllm_weight_sync=lora",
                                   "agent_model.device=cpu"]).agent_model
    team, ranks = TeamEngine(2), Ranks(rank=1, world_size=2, local_rank=1)
    generators = [build_vllm_generator(lora_model(seed=i), tiny_tokenizer(), model_cfg,
                                       AgentEngine("m", 16, 4, seed=7, device="cpu", name=f"agent {i}"), ranks=ranks,
                                       team=team) for i in range(2)]
    assert len(FakeLLM.instances) == 1                       # this rank's one engine, for both agents
    options = FakeLLM.instances[0].kwargs
    assert options["distributed_executor_backend"] == "external_launcher" and options["seed"] == 8   # seeded apart
    assert options["max_loras"] == 2 and generators[1].llm is generators[0].llm and generators[1]._rank == 1


def test_a_team_engine_sized_by_the_utilization_reserves_its_share_once(fake_vllm, monkeypatch):
    monkeypatch.setattr(vllm_platform, "check_vllm_backend", lambda device="auto", sleep=False: fake_vllm)
    overrides = ["agent_model.device=cuda:0", "agent_model.lora.r=8", "agent_model.generation_backend=vllm",
                 "agent_model.vllm_weight_sync=lora", "agent_model.vllm_gpu_memory_utilization=0.5",
                 "agent_model.vllm_kv_cache_bytes=0"]
    with pytest.raises(ConfigError, match="2 vLLM engines on cuda:0 would reserve 1.00"):   # an engine per agent
        vllm_platform.check_vllm_devices(load_config(None, overrides).agent_model, ["cuda:0", "cuda:0"])
    shared = load_config(None, [*overrides, "agent_model.share_base=true"]).agent_model
    vllm_platform.check_vllm_devices(shared, ["cuda:0", "cuda:0"])   # one engine for the team: 0.5 of the GPU


@pytest.mark.distributed
@pytest.mark.skipif(not TORCHRUN.exists(), reason="torchrun is not in the interpreter's folder")
def test_under_torchrun_each_rank_serves_its_team_from_one_engine(tmp_path):
    from tests.cooprl.parallel.test_scale_out import DDP_OVERRIDES
    records = tmp_path / "records"
    records.mkdir()
    env = child_env(OMP_NUM_THREADS="1", WANDB_MODE="disabled", VLLM_CACHE_ROOT=str(tmp_path / "cache"))
    result = subprocess.run(
        [str(TORCHRUN), "--standalone", "--nproc_per_node=2", "tests/fake_vllm_run.py", str(records),
         "train_magrpo.py", "--config", "configs/magrpo_che_config.yaml", "--override", *DDP_OVERRIDES,
         "agent_model.generation_backend=vllm", "agent_model.lora.r=8", "agent_model.share_base=true",
         "agent_model.vllm_weight_sync=lora", "magrpo.max_steps=2", "magrpo.rollout_buffer_size=1",
         f"output.base_dir={tmp_path}", "output.run_name=ddp-team"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    ranks = [json.loads((records / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    assert [len(engines) for engines in ranks] == [1, 1]   # one engine per rank, for both agents
    for (engine,) in ranks:
        assert engine["executor"] == "external_launcher" and engine["group_at_shutdown"]
        names = set(engine["lora_requests"]) - {None}
        assert {"cooprl-agent0-v1", "cooprl-agent1-v1", "cooprl-agent0-v2", "cooprl-agent1-v2"} <= names
    assert ranks[1][0]["seed"] == ranks[0][0]["seed"] + 1


def test_an_agent_on_another_device_cannot_join_the_team_engine(fake_vllm, tmp_path):
    _, generators = team_of_two(fake_vllm, tmp_path)
    team = TeamEngine(3)
    team.seat_first(generators[0])
    with pytest.raises(ConfigError, match="agent 1 is on cuda:1, the team's vLLM engine on cpu"):
        team.join(lora_model(), tiny_tokenizer(), None, "cuda:1")


def test_merged_weight_sync_with_a_shared_base_is_refused_at_load():
    with pytest.raises(ConfigError, match="share_base with generation_backend vllm.*vllm_weight_sync=lora"):
        load_config(None, ["agent_model.lora.r=8", "agent_model.share_base=true",
                           "agent_model.generation_backend=vllm"])


def shared_base_team(monkeypatch, fake_vllm, tmp_path, *overrides):
    """Return a two-agent share_base team built by build_team on the fake engine (LoRA sync, a bf16 base)."""
    from cooprl.trainers.team import build_team
    monkeypatch.setattr(vllm_platform, "check_vllm_backend", lambda device="auto", sleep=False: fake_vllm)
    config = load_config(None, [
        f"agent_model.name={TINY_RANDOM}", "agent_model.device=cpu", "agent_model.torch_dtype=bfloat16",
        "agent_model.lora.r=4", "agent_model.lora.dropout=0.0", "agent_model.share_base=true",
        "agent_model.generation_backend=vllm", "agent_model.vllm_weight_sync=lora", "magrpo.max_new_tokens=2",
        "wandb.mode=disabled", f"output.base_dir={tmp_path}", *overrides])
    team = build_team(Run.of(config, "magrpo"), 2)
    with torch.no_grad():   # fresh adapters are zero: make the two differ
        for i, agent in enumerate(team):
            for name, p in agent.model.named_parameters():
                if "lora_B" in name:
                    p.fill_(0.1 * (i + 1))
    return team


def test_a_shared_base_team_engine_takes_the_bases_dtype_and_each_views_adapter_alone(fake_vllm, monkeypatch,
                                                                                      tmp_path):
    from cooprl.rollout import vllm_generation
    guard_dtypes = []   # the fake engine cannot score probes: the guard is off, the dtype it would be made for kept
    monkeypatch.setattr(vllm_generation, "weight_guard", lambda bound, dtype, agent: guard_dtypes.append(dtype))
    team = shared_base_team(monkeypatch, fake_vllm, tmp_path)
    views = [agent.model for agent in team]
    assert {p.dtype for view in views for p in view.parameters()} == {torch.float32}   # a view's own: its adapter's
    (engine,) = FakeLLM.instances
    # the engine computes in the base's dtype, its slot holds the views' rank; the guards would bound bf16's gaps
    assert (engine.kwargs["dtype"], engine.kwargs["max_lora_rank"], engine.kwargs["max_loras"]) == ("bfloat16", 8, 2)
    assert guard_dtypes == [torch.bfloat16] * 2
    for agent in team:
        agent.generator.sample(["x"], 1, PARAMS)
    for i, (request, view) in enumerate(zip(engine.lora_requests, views, strict=True)):
        # saved through save_pretrained_on_this_rank: this view's adapter alone, at the folder's root
        assert sorted(os.listdir(request.lora_path)) == ["README.md", "adapter_config.json",
                                                         "adapter_model.safetensors"]
        saved = saved_adapter(request)
        own = {name.replace(f".agent_{i}", ""): p.detach() for name, p in view.named_parameters()}
        assert saved.keys() == own.keys() and all(torch.equal(saved[k], own[k]) for k in own)
    assert [r.lora_int_id for r in engine.lora_requests] == [1, 2]
    with views[1].disable_adapter():   # adapters off on the shared base (a KL reference's samples): no request
        team[1].generator.sample(["x"], 1, PARAMS)
    assert engine.lora_requests[-1] is None
    close_engines([agent.generator for agent in team])


def test_the_guard_scores_each_views_own_adapter_whichever_ran_last(fake_vllm, monkeypatch, tmp_path):
    from cooprl.rollout.vllm_guard import ProbeSequence, trainer_logprobs
    team = shared_base_team(monkeypatch, fake_vllm, tmp_path, "agent_model.torch_dtype=float32")
    views = [agent.model for agent in team]
    probes = [ProbeSequence([1, 2, 3], [4, 5, 6])]
    views[1].train()
    alone = [trainer_logprobs(view, probes)[0] for view in views]
    assert not torch.allclose(alone[0], alone[1])            # the two adapters score differently
    for last, view in ((1, views[0]), (0, views[1])):        # the other view ran last: its adapter was active
        views[last](input_ids=torch.tensor([[1, 2]]))
        torch.testing.assert_close(trainer_logprobs(view, probes)[0], alone[views.index(view)], rtol=0, atol=0)
    assert views[1].training and views[1].peft_model.active_adapter == "agent_1"   # its mode kept after the check
    close_engines([agent.generator for agent in team])
