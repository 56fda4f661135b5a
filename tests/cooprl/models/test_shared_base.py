"""Agents on one shared base (cooprl.models.shared_base): the view's contract, its saved layout, and trainer runs
that equal the same runs with a base model per agent (same seeds), resume exactly and start from either layout."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file

from cooprl.config import ConfigError, LoraSection, Run, load_config
from cooprl.models.loading import TINY_RANDOM, load_agent_weights_from_folder, load_causal_lm
from cooprl.models.shared_base import SharedBaseModel, check_shareable, load_shared_base
from cooprl.trainers.loop import seed_everything
from cooprl.trainers.team import AgentRunner, build_team
from cooprl.update.policy_gradient import frozen_reference
from tests.cooprl.parallel import test_scale_out
from tests.cooprl.trainers import test_actor_critic, test_madpo, test_magrpo

LORA = LoraSection(r=4, alpha=8, dropout=0.0)
LORA_KEY = "agent_model.lora={r: 4, alpha: 8, dropout: 0.05}"   # LoRA dropout: the draws must match too
SHARED = "agent_model.share_base=true"
IDS = torch.tensor([[1, 2, 3, 4, 5]])


def adapters(model) -> list[torch.Tensor]:
    """Return an agent's trainable tensors in the model's order (a view's: its own adapter)."""
    return [p.detach().clone() for p in model.parameters() if p.requires_grad]


def adapter_state(model) -> dict[str, torch.Tensor]:
    """Return an agent's adapter tensors by the names peft saves them under (without the adapter's name)."""
    adapter = model.adapter_name if isinstance(model, SharedBaseModel) else "default"
    return {name.replace(f".{adapter}.", "."): p.detach() for name, p in model.named_parameters() if p.requires_grad}


@pytest.fixture
def views_and_separate():
    torch.manual_seed(0)
    views = load_shared_base(TINY_RANDOM, [None, None], lora=LORA, torch_dtype="float32", device="cpu")
    torch.manual_seed(0)
    separate = [load_causal_lm(TINY_RANDOM, device="cpu", lora=LORA) for _ in range(2)]
    return views, separate


def test_views_draw_separate_loads_adapters_and_touch_only_their_own(views_and_separate):
    views, separate = views_and_separate
    assert views[0].peft_model is views[1].peft_model
    for view, model in zip(views, separate, strict=True):   # agent i's random A matrices are separate load i's
        own, theirs = adapters(view), adapters(model)
        assert len(own) == len(theirs) == 16 and all(torch.equal(a, b) for a, b in zip(own, theirs, strict=True))
    assert not {id(p) for p in views[0].parameters()} & {id(p) for p in views[1].parameters()}
    base = views[0](input_ids=IDS).logits.detach()
    with torch.no_grad():
        for name, parameter in views[1].named_parameters():
            if "lora_B" in name:
                parameter.fill_(0.1)
    assert torch.equal(views[0](input_ids=IDS).logits, base)            # B = 0: agent 0 is still the base
    assert not torch.allclose(views[1](input_ids=IDS).logits, base)     # agent 1's adapter acts on its calls
    assert torch.equal(frozen_reference(views[1])(input_ids=IDS).logits, base)   # its reference: adapters off
    views[1](input_ids=IDS).logits.sum().backward()
    assert all(p.grad is None for p in views[0].parameters())
    assert all(p.grad is not None for p in views[1].parameters())
    assert all(p.requires_grad for view in views for p in view.parameters())   # whichever adapter was active


def test_each_view_keeps_its_own_train_mode(views_and_separate):
    views, _ = views_and_separate
    views[0].train()
    views[1].eval()
    views[0](input_ids=IDS)
    assert views[0].peft_model.training and views[0].training and not views[1].training
    views[1](input_ids=IDS)
    assert not views[1].peft_model.training


def test_agents_of_one_base_never_run_at_once(views_and_separate):
    views, separate = views_and_separate
    shared = AgentRunner([SimpleNamespace(model=view, generator=None) for view in views], "mp")
    assert not shared.concurrent_sampling and not shared.concurrent_updates
    assert AgentRunner([SimpleNamespace(model=model, generator=None) for model in separate], "mp").concurrent_updates


def test_a_view_saves_and_loads_the_separate_layout(views_and_separate, tmp_path):
    views, separate = views_and_separate
    with torch.no_grad():
        for parameter in [*views[1].parameters(), *separate[1].parameters()]:
            if parameter.requires_grad:
                parameter.add_(0.5)
    views[1].save_pretrained(tmp_path / "shared")
    separate[1].save_pretrained(tmp_path / "separate")
    files = sorted(p.name for p in (tmp_path / "separate").iterdir())
    assert sorted(p.name for p in (tmp_path / "shared").iterdir()) == files
    assert "adapter_model.safetensors" in files and "adapter_config.json" in files
    config = [json.loads((tmp_path / kind / "adapter_config.json").read_text()) for kind in ("shared", "separate")]
    assert config[0] == config[1]
    saved = [load_file(tmp_path / kind / "adapter_model.safetensors") for kind in ("shared", "separate")]
    assert saved[0].keys() == saved[1].keys() and all(torch.equal(saved[0][k], saved[1][k]) for k in saved[0])
    load_agent_weights_from_folder(views[0], tmp_path / "separate")      # into agent 0's adapter, not agent 1's
    assert all(torch.equal(a, b) for a, b in zip(adapters(views[0]), adapters(separate[1]), strict=True))
    fresh = load_causal_lm(TINY_RANDOM, device="cpu", lora=LORA)
    load_agent_weights_from_folder(fresh, tmp_path / "shared")
    assert all(torch.equal(a, b) for a, b in zip(adapters(fresh), adapters(separate[1]), strict=True))


def test_what_cannot_share_one_base_is_refused_before_loading(tmp_path):
    with pytest.raises(ConfigError, match="different base models"):
        check_shareable(["a", "b"], ["cpu", "cpu"], [None, None])
    with pytest.raises(ConfigError, match="different devices"):
        check_shareable(["a", "a"], ["cpu", "cuda:0"], [None, None])
    (tmp_path / "agent_0").mkdir()
    with pytest.raises(ConfigError, match="own full weights"):
        check_shareable(["a", "a"], ["cpu", "cpu"], [tmp_path / "agent_0", tmp_path / "agent_0"])
    config = load_config(None, [f"agent_model.name={TINY_RANDOM}", "agent_model.device=cpu", SHARED, LORA_KEY,
                                f"agents=[{TINY_RANDOM}, offline:smollm2-135m-instruct]"])
    with pytest.raises(ConfigError, match="different base models"):
        build_team(Run.of(config, "magrpo"), 2)


@pytest.mark.parametrize("overrides,message", [
    ([SHARED], "agent_model.share_base needs agent_model.lora"),
    ([SHARED, LORA_KEY, "magrpo.parallel_training=fsdp"], "magrpo.parallel_training: fsdp with agent_model.share_base"),
    ([SHARED, LORA_KEY, "magrpo.parallel_training=mp", "magrpo.agent_devices=[cuda:0, cuda:1]"],
     "magrpo.agent_devices: cuda:0, cuda:1 with agent_model.share_base"),
])
def test_config_rules_refuse_a_base_that_cannot_be_shared(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


# ------------------------------------------------------------------------------------------ trainer runs
def assert_same_events(separate: list[dict], shared: list[dict]) -> None:
    assert [e["step"] for e in separate] == [e["step"] for e in shared]
    for a, b in zip(separate, shared, strict=True):
        keys = {k for k in a if not k.startswith("time/") and k != "wall_time"}
        assert keys == {k for k in b if not k.startswith("time/") and k != "wall_time"}
        for key in keys:
            assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-6), key


def assert_same_adapters(separate_models, shared_models) -> None:
    for m1, m2 in zip(separate_models, shared_models, strict=True):
        assert isinstance(m2, SharedBaseModel)
        for p1, p2 in zip(adapters(m1), adapters(m2), strict=True):
            assert torch.allclose(p1, p2, atol=1e-6)
    # trained: the B matrices left zero (so the equality is not vacuous)
    assert all(any(torch.count_nonzero(p) for n, p in m.named_parameters() if "lora_B" in n) for m in shared_models)


@pytest.mark.slow
def test_magrpo_on_a_shared_base_equals_separate_bases(tmp_path):
    common = ["magrpo.max_steps=2", LORA_KEY, "magrpo.reference_kl_coef=0.05"]
    separate, _ = test_magrpo.run_magrpo(tmp_path, "separate", common)
    shared, _ = test_magrpo.run_magrpo(tmp_path, "shared", [*common, SHARED])
    events = [test_magrpo.train_events(tmp_path / name) for name in ("separate", "shared")]
    assert any("agent_1/loss" in e for e in events[0]) and any("kl" in key for key in events[0][0])
    assert_same_events(*events)
    assert_same_adapters(separate.models, shared.models)


@pytest.mark.slow
def test_iac_with_value_heads_on_a_shared_base_equals_separate_bases(tmp_path):
    common = ["iac.max_steps=2", LORA_KEY, "iac.use_separate_critic=false", "iac.critic_type=q"]
    separate = test_actor_critic.run_actor_critic(tmp_path, "iac", "separate", *common)
    shared = test_actor_critic.run_actor_critic(tmp_path, "iac", "shared", *common, SHARED)
    events = [test_actor_critic.train_events(tmp_path / name) for name in ("separate", "shared")]
    assert any("agent_0/value_loss" in e for e in events[0])
    assert_same_events(*events)
    assert_same_adapters(separate.models[:2], shared.models[:2])
    heads = [[c.model.head.weight for c in run.critics] for run in (separate, shared)]
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(*heads, strict=True))


@pytest.mark.slow
def test_madpo_with_its_reference_on_a_shared_base_equals_separate_bases(tmp_path):
    common = ["madpo.max_steps=2", "madpo.pair_selection=all", "madpo.reference_model=true", LORA_KEY]
    separate, _ = test_madpo.run_madpo(tmp_path, "separate", common)
    shared, _ = test_madpo.run_madpo(tmp_path, "shared", [*common, SHARED])
    events = [test_madpo.train_events(tmp_path / name) for name in ("separate", "shared")]
    assert any(e.get("dpo/pairs") for e in events[0])
    assert_same_events(*events)
    assert_same_adapters(separate.models, shared.models)


@pytest.mark.slow
def test_a_shared_base_run_resumes_exactly_and_saves_each_agents_adapter_alone(tmp_path):
    common = ["magrpo.update_schedule=items", "magrpo.rollout_buffer_size=1", LORA_KEY, SHARED]
    straight, _ = test_magrpo.run_magrpo(tmp_path, "straight", ["magrpo.max_steps=4", *common])
    test_magrpo.run_magrpo(tmp_path, "resumed", ["magrpo.max_steps=2", *common])
    files = sorted(p.name for p in (tmp_path / "resumed" / "checkpoints" / "checkpoint-2" / "agent_1").iterdir())
    assert files == ["README.md", "adapter_config.json", "adapter_model.safetensors"]
    resumed, _ = test_magrpo.run_magrpo(tmp_path, "resumed", ["magrpo.max_steps=4",
                                                              "checkpoint.resume_from_checkpoint=latest", *common])
    a, b = (test_magrpo.train_events(tmp_path / name) for name in ("straight", "resumed"))
    assert [e["step"] for e in b] == [1, 2, 3, 4]
    for key in ("turn_1/reward_mean", "agent_0/loss", "agent_1/loss"):
        assert [e.get(key) for e in a] == [e.get(key) for e in b], key
    for m1, m2 in zip(straight.models, resumed.models, strict=True):
        assert all(torch.equal(p1, p2) for p1, p2 in zip(adapters(m1), adapters(m2), strict=True))


def team_from(tmp_path: Path, init_from: Path, *overrides: str):
    config = load_config(None, [f"agent_model.name={TINY_RANDOM}", "agent_model.device=cpu", LORA_KEY,
                                f"agent_model.init_from={init_from}", *overrides])
    seed_everything(config.seed)
    return build_team(Run.of(config, "magrpo"), 2)


@pytest.mark.slow
@pytest.mark.parametrize("saved_by,started_by", [([], [SHARED]), ([SHARED], [])], ids=["separate-to-shared",
                                                                                       "shared-to-separate"])
def test_init_from_reads_either_layout(tmp_path, saved_by, started_by):
    test_magrpo.run_magrpo(tmp_path, "first", ["magrpo.max_steps=2", "magrpo.num_turns=1", LORA_KEY, *saved_by])
    team = team_from(tmp_path, tmp_path / "first", *started_by)
    assert isinstance(team[0].model, SharedBaseModel) == bool(started_by)
    for i, agent in enumerate(team):
        saved = load_file(tmp_path / "first" / "checkpoints" / "checkpoint-2" / f"agent_{i}" /
                          "adapter_model.safetensors")
        own = adapter_state(agent.model)
        assert own.keys() == saved.keys() and all(torch.equal(own[k], saved[k]) for k in saved)
        assert any(torch.count_nonzero(v) for k, v in saved.items() if "lora_B" in k)   # trained, not fresh


@pytest.mark.distributed
@pytest.mark.skipif(not test_scale_out.TORCHRUN.exists(), reason="torchrun is not in the interpreter's folder")
def test_ddp_on_a_shared_base_averages_each_agents_adapter(tmp_path):
    # 2 ranks x 1 item per step (2 steps) against 1 process x 2 items (4 steps), both on a shared base
    common = [SHARED, "agent_model.lora={r: 4, alpha: 8, dropout: 0.0}"]
    two = test_scale_out.launch(tmp_path, "two", 2, ["magrpo.rollout_buffer_size=1", "magrpo.max_steps=2", *common])
    assert "every agent's adapter on one base" in two.stderr
    test_scale_out.launch(tmp_path, "one", 1, ["magrpo.rollout_buffer_size=2", "magrpo.max_steps=4", *common])
    for agent in (0, 1):
        a = test_scale_out.agent_weights(tmp_path / "two/checkpoints/checkpoint-2", agent)
        b = test_scale_out.agent_weights(tmp_path / "one/checkpoints/checkpoint-4", agent)
        assert a.keys() == b.keys() and max((a[k] - b[k]).abs().max().item() for k in a) < 1e-5
        assert any(torch.count_nonzero(v) for k, v in a.items() if "lora_B" in k)
