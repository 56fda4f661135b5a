"""The memory plan (cooprl.rollout.memory_plan): its activation term against what autograd really keeps, the largest
forward of the reference configs, each backend's plan per GPU with its exact figures, and the refusal that names the
keys to change (before any model loads)."""

from __future__ import annotations

import logging

import pytest
import torch

import cooprl.rollout.memory_plan as plan
import cooprl.rollout.vllm_memory as memory
import cooprl.rollout.vllm_platform as backend
from cooprl.config import ConfigError, Run, load_config
from tests.cooprl.rollout.test_vllm_generation import fake_vllm  # noqa: F401
from tests.cooprl.rollout.test_vllm_memory import QWEN_3B

GIB = 1 << 30


# ------------------------------------------------------------------------------------------ the activation term
def _kept_by_autograd(layers: int, shape: tuple[int, int, int, int], prompt: int, completions: list[int]
                      ) -> tuple[int, memory.ModelShape]:
    """Return the bytes autograd saves (parameters aside, each storage once) in completion_logprobs's forward of a
    bf16 Qwen2 of `layers` layers, shape (hidden, intermediate, heads, KV heads), over one prompt of `prompt` tokens
    and completions of the given lengths (a trie); and the model's ModelShape."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    from cooprl.models.logprobs import completion_logprobs
    hidden, intermediate, heads, kv_heads = shape
    torch.manual_seed(0)
    config = Qwen2Config(hidden_size=hidden, intermediate_size=intermediate, num_attention_heads=heads,
                         num_key_value_heads=kv_heads, num_hidden_layers=layers, vocab_size=256,
                         tie_word_embeddings=True)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").to(torch.bfloat16).train()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            saved[storage.data_ptr()] = storage.nbytes()
        return t

    prompt_ids = torch.randint(0, 256, (prompt,))
    completion_ids = [torch.randint(0, 256, (n,)) for n in completions]
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        completion_logprobs(model, [prompt_ids] * len(completions), completion_ids, 0)
    head_size = hidden // heads
    return sum(saved.values()), memory.ModelShape(0, 0, 0, layers=layers, hidden=hidden, intermediate=intermediate,
                                                  heads=heads, kv_dim=kv_heads * head_size, vocab=256)


@pytest.mark.parametrize("shape", [(128, 352, 4, 2), (192, 512, 6, 6)])
def test_the_activation_term_is_what_autograd_keeps_per_layer_and_token(shape):
    prompt, completions = 60, [30, 30, 30]
    one, model_shape = _kept_by_autograd(1, shape, prompt, completions)
    two, _ = _kept_by_autograd(2, shape, prompt, completions)
    tokens = prompt + sum(completions)
    per_layer = two - one   # the second layer's saved tensors: everything else is the same in both models
    formula = tokens * plan.activation_bytes_per_token_layer(model_shape, torch.bfloat16)
    forward = plan.Forward(tokens, sum(completions), len(completions), trie=True)
    masks = plan.trie_mask_bytes(model_shape, torch.bfloat16, forward, prompt + max(completions), max(completions))
    # the layer's own tensors exactly, plus what the trie's masked segments add (their masks and gathered K/V on this
    # torch's CPU kernels: 0.7 of the bound here), which the plan bounds from above
    assert formula <= per_layer <= formula + masks


def test_a_layer_of_the_reference_model_keeps_131_kib_per_token():
    # gpu-review-3 measured 133 KiB with its masks by the same walk of saved tensors
    assert plan.activation_bytes_per_token_layer(QWEN_3B, torch.bfloat16) == 134_216


# ------------------------------------------------------------------------------------------ the largest forward
def _run(path: str, trainer: str, *overrides: str) -> Run:
    return Run.of(load_config(path, list(overrides)), trainer)


def test_the_largest_forward_of_the_reference_configs():
    def largest(path: str, trainer: str, *overrides: str) -> plan.Forward:
        run = _run(path, trainer, *overrides)
        return plan.largest_forward(run.section, run.config.agent_model.max_length)

    # nodes: 2 nodes x G 4 = 8 sequences after 2 prompts of 1,792 (2,048 - 256): 5,632 tokens; the trie's parts
    # above MAX_TRIE_TOKENS all wait for the one backward, so none is left out
    assert largest("configs/magrpo_he_config.yaml", "magrpo") == plan.Forward(5632, 2048, 8, True)
    assert largest("configs/magrpo_he_config.yaml", "magrpo", "agent_model.max_length=512") == plan.Forward(
        2 * 256 + 8 * 256, 2048, 8, True)
    # items: one tree (1 + 4 nodes, 20 sequences)
    assert largest("configs/magrpo_he_config.yaml", "magrpo", "magrpo.update_schedule=items",
                   "magrpo.train_batch_size=null") == plan.Forward(5 * 1792 + 20 * 256, 20 * 256, 20, True)
    # actor-critics: 4 turn samples of distinct prompts, padded
    assert largest("configs/iac_he_config.yaml", "iac") == plan.Forward(4 * 2048, 4 * 256, 4, False)
    # MADPO: 2 pairs, winner and loser after one prompt each
    assert largest("configs/madpo_he_config.yaml", "madpo") == plan.Forward(2 * 1792 + 4 * 256, 4 * 256, 4, True)


def test_the_datasets_longest_first_prompt_bounds_single_turn_runs_only():
    run = _run("configs/magrpo_he_config.yaml", "magrpo", "magrpo.num_turns=1")
    assert plan.largest_forward(run.section, 2048, 824) == plan.Forward(2 * 824 + 8 * 256, 2048, 8, True)
    assert plan.largest_forward(run.section, 512, 824) == plan.Forward(2 * 256 + 8 * 256, 2048, 8, True)
    # turn 2's prompts hold turn 1's prompt and code and the feedback: at max_length
    two_turns = _run("configs/magrpo_he_config.yaml", "magrpo").section
    assert plan.largest_forward(two_turns, 2048, 824) == plan.Forward(5632, 2048, 8, True)


def test_a_prompt_is_counted_by_its_tokenizer_or_bounded_by_its_characters():
    prompts = ["def f(x):\n    return x\n", "x" * 41]
    bound = plan.prompt_bound(prompts, None, "some/model")
    assert bound == plan.PromptBound(21, "41 characters / 2 per token: some/model's tokenizer is not on this machine")
    tokenizer = plan.local_tokenizer("offline:smollm2-135m-instruct")
    counted = plan.prompt_bound(prompts, tokenizer, "offline:smollm2-135m-instruct")
    assert counted.tokens == max(len(tokenizer(p)["input_ids"]) for p in prompts)
    assert counted.how == "counted by offline:smollm2-135m-instruct's tokenizer"
    assert plan.local_tokenizer("nobody/no-such-model") is None   # never the network


def test_the_chars_per_token_floor_holds_for_every_humaneval_prompt():
    # the floor the plan uses when the run's tokenizer is not on the machine, measured with the embedded SmolLM2
    # tokenizer over HumanEval's 164 problems as both agents see them: the densest prompt has 2.20 characters a token
    from types import SimpleNamespace

    from envs.code_generation.data import load_problems
    from envs.code_generation.prompts import agent_prompts
    tokenizer = plan.local_tokenizer("offline:smollm2-135m-instruct")
    problems = load_problems(SimpleNamespace(name="openai/openai_humaneval", type="humaneval", path=None), "test")
    prompts = [p for problem in problems for p in agent_prompts(problem, 2)]
    ratios = [len(p) / len(ids) for p, ids in zip(prompts, tokenizer(prompts)["input_ids"], strict=True)]
    assert len(prompts) == 328 and f"{min(ratios):.2f}" == "2.20" and min(ratios) > plan.CHARS_PER_TOKEN_FLOOR
    assert max(map(len, prompts)) == 1648 and plan.prompt_bound(prompts, None, "m").tokens == 824
    assert plan.prompt_bound(prompts, tokenizer, "m").tokens == 467


# ------------------------------------------------------------------------------------------ the plan per backend
@pytest.fixture
def gpus(fake_vllm, monkeypatch):
    """GPUs of 80 GiB (cuda:N), vLLM's CUDA build (fake); loading a model fails the test (the plan comes first)."""
    import cooprl.trainers.team as agents
    monkeypatch.setattr(memory, "gpu_total_bytes", lambda device: 80 * GIB)
    monkeypatch.setattr(backend, "check_vllm_backend", lambda device="auto", sleep=False: fake_vllm)
    monkeypatch.setattr(backend, "vllm_platform_is_cpu", lambda: False)
    monkeypatch.setattr(agents, "load_causal_lm", lambda *a, **k: pytest.fail("a model was loaded"))


def he_run(*overrides: str) -> Run:
    return _run("configs/magrpo_he_config.yaml", "magrpo", "agent_model.device=cuda:0", *overrides)


def _update(run: Run) -> tuple[int, int, int]:
    """Return the reference model's (gradients, activations, log-softmax) in the largest forward of `run`."""
    model_cfg = run.config.agent_model
    forward = plan.largest_forward(run.section, model_cfg.max_length)
    return (QWEN_3B.parameters * 2,
            plan.activation_bytes(QWEN_3B, torch.bfloat16, forward, model_cfg, run.section.max_new_tokens),
            plan.logits_bytes(QWEN_3B, torch.bfloat16, forward, model_cfg.logprob_chunk_size))


def test_the_hf_backend_is_planned_with_the_update_and_warned_about_on_80_gib(gpus, caplog):
    from cooprl.trainers.team import build_team
    run = he_run()
    states = memory.optimizer_bytes(QWEN_3B, torch.bfloat16, False, "kahan")
    gradients, activations, logits = _update(run)
    planner = plan.Planner(run.config, run, gpu_bytes=80 * GIB, offline=True)
    accounts = plan.plan_accounts(planner, ["cuda:0", "cuda:0"], [])
    assert accounts["cuda:0"].items == [
        ("agent 0 weights", QWEN_3B.parameters * 2), ("agent 0 optimizer states", states),
        ("agent 1 weights", QWEN_3B.parameters * 2), ("agent 1 optimizer states", states),
        ("agent 0 gradients (its update)", gradients),
        ("agent 0 activations (5632 tokens of 8 sequences, trie)", activations),
        ("agent 0 log-softmax (2048 positions, float32)", logits)]
    assert f"{states / GIB:.1f}" == "23.0" and f"{activations / GIB:.1f}" == "26.2"
    account = accounts["cuda:0"]
    assert f"{account.total() / GIB:.1f}" == "92.9" and account.bounded == activations + logits
    # of 79 usable: 63.2 held whatever the lengths, + half the bound (14.9) fits: it may not fit, and starts
    assert f"{account.held() / GIB:.1f}" == "63.2" and plan.verdicts(planner) == {"cuda:0": "may not fit"}
    with caplog.at_level(logging.WARNING, logger="cooprl.rollout.memory_plan"):
        with pytest.raises(pytest.fail.Exception, match="a model was loaded"):
            build_team(run, 2)   # past the plan: the first model loads
    assert "cuda:0 would hold 92.9 GiB at the update's peak, of the 79.0 GiB usable of its 80.0 GiB" in caplog.text
    assert "63.2 GiB held whatever the lengths, 15.8 GiB left for the update's activations" in caplog.text


def test_the_hf_backend_is_refused_before_any_model_loads_on_24_gib(gpus, monkeypatch):
    from cooprl.trainers.team import build_team
    monkeypatch.setattr(memory, "gpu_total_bytes", lambda device: 24 * GIB)
    with pytest.raises(ConfigError) as refused:
        build_team(he_run(), 2)
    message = str(refused.value)
    assert "cuda:0 would hold 92.9 GiB at the update's peak, of the 23.0 GiB usable of its 24.0 GiB" in message
    assert "agent 0 activations (5632 tokens of 8 sequences, trie) 26.2 GiB" in message
    assert "change agent_model.gradient_checkpointing=true" in message and "agent_model.memory_plan=warn" in message


def test_a_single_turn_runs_plan_at_its_start_is_bounded_by_the_tasks_prompts(gpus, caplog):
    run = he_run("magrpo.num_turns=1")
    with caplog.at_level(logging.WARNING, logger="cooprl.rollout.memory_plan"):
        # 824 tokens at most
        plan.check_memory(run.config, ["cuda:0", "cuda:0"], run, prompts=lambda: ["x" * 1648, "y"])
    assert "cuda:0 would hold 84.2 GiB" in caplog.text and "(3696 tokens of 8 sequences, trie)" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="cooprl.rollout.memory_plan"):
        plan.check_memory(run.config, ["cuda:0", "cuda:0"], run)   # no prompts: at max_length
    assert "cuda:0 would hold 92.9 GiB" in caplog.text


def test_a_plan_refused_at_half_its_update_bound(gpus, monkeypatch):
    # 63.2 held + 29.7 bounded: refused where 63.2 + 14.9 does not fit (a GPU of 78 GiB, 77 usable)
    for gib, verdict in ((80, "may not fit"), (79.2, "may not fit"), (78, "too big")):
        planner = plan.Planner(he_run().config, he_run(), gpu_bytes=int(gib * GIB), offline=True)
        plan.plan_accounts(planner, ["cuda:0", "cuda:0"], [])
        assert plan.verdicts(planner) == {"cuda:0": verdict}, gib


def test_the_vllm_backend_adds_its_engines_to_the_same_plan(gpus):
    run = he_run("agent_model.generation_backend=vllm", "agent_model.lora.r=16",
                 "agent_model.gradient_checkpointing=true")
    kv = 16 * 2048 * 36 * 1024   # the default KV cache: the largest call's 16 sequences x 2,048 tokens x 36 KiB
    lora = memory.model_shape("Qwen/Qwen2.5-Coder-3B", run.config.agent_model.lora, offline=True)
    planner = plan.Planner(run.config, run, gpu_bytes=80 * GIB, offline=True)
    items = dict(plan.plan_accounts(planner, ["cuda:0", "cuda:0"], [["cuda:0"], ["cuda:0"]])["cuda:0"].items)
    engine = QWEN_3B.parameters * 2 + kv + memory.ENGINE_OVERHEAD_BYTES
    assert items["engine 0 (weights + KV cache 1.12 GiB + overhead)"] == engine
    assert items["engine 1 (weights + KV cache 1.12 GiB + overhead)"] == engine
    assert items["agent 0 optimizer states"] == lora.lora_parameters * (4 + 8)   # float32 adapters + AdamW
    assert items["agent 0 gradients (its update)"] == lora.lora_parameters * 4
    plan.check_memory(run.config, ["cuda:0", "cuda:0"], run)   # 2 x (5.75 + 7.0) GiB and the update: fits
    # engines sized by vllm_gpu_memory_utilization 0.4 each take 0.8 of the GPU: refused, naming the engine key
    shared = he_run("agent_model.generation_backend=vllm", "agent_model.lora.r=16",
                    "agent_model.vllm_kv_cache_bytes=0", "agent_model.vllm_gpu_memory_utilization=0.4")
    with pytest.raises(ConfigError, match=r"engine 0 \(vllm_gpu_memory_utilization 0.4\) 32.0 GiB.*"
                                          r"change .*agent_model.vllm_kv_cache_bytes"):
        plan.check_memory(shared.config, ["cuda:0", "cuda:0"], shared)


@pytest.mark.parametrize("backend_overrides", [[], ["agent_model.generation_backend=vllm",
                                                     "agent_model.vllm_weight_sync=lora"]])
def test_a_team_sharing_one_base_counts_one_base_and_one_engine(gpus, backend_overrides):
    lora = ["agent_model.lora.r=16", *backend_overrides]
    runs = {share: he_run(*lora, f"agent_model.share_base={share}") for share in ("false", "true")}
    engines = [["cuda:0"], ["cuda:0"]] if backend_overrides else []
    accounts = {share: plan.plan_accounts(plan.Planner(run.config, run, gpu_bytes=80 * GIB, offline=True),
                                          ["cuda:0", "cuda:0"], engines)["cuda:0"] for share, run in runs.items()}
    apart, shared = (dict(accounts[share].items) for share in ("false", "true"))
    weights = QWEN_3B.parameters * 2   # bf16
    assert apart["agent 0 weights"] == apart["agent 1 weights"] == weights
    assert shared["agent 0 weights (the one base of the 2 agents: agent_model.share_base)"] == weights
    assert not any(what.startswith("agent 1 weights") for what in shared)
    assert shared["agent 1 optimizer states"] == apart["agent 1 optimizer states"] > 0   # each agent's own adapter
    saved = weights
    if backend_overrides:   # one engine, with a LoRA slot (r 16: vLLM's slot 16) per agent in bf16
        slot = memory.lora_slots_bytes("Qwen/Qwen2.5-Coder-3B", 16, 1, torch.bfloat16, offline=True)
        assert slot == 16 * 36 * (2 * (2048 + 2048) + 2 * (2048 + 256) + 3 * (2048 + 11008)) * 2   # A+B, 7 layers
        one = weights + 16 * 2048 * 36 * 1024 + memory.ENGINE_OVERHEAD_BYTES   # weights + default KV + overhead
        assert apart["engine 1 (weights + KV cache 1.12 GiB + 1 LoRA slot 0.06 GiB + overhead)"] == one + slot
        assert shared["engine of the 2 agents (weights + KV cache 1.12 GiB + 2 LoRA slots 0.11 GiB + overhead)"] == (
            one + 2 * slot)
        saved += one   # two engines of one slot each against one of two slots
    assert accounts["false"].total() - accounts["true"].total() == saved


def test_memory_plan_warn_starts_anyway_with_the_figures(gpus, caplog, monkeypatch):
    run = he_run("agent_model.memory_plan=warn")
    monkeypatch.setattr(memory, "gpu_total_bytes", lambda device: 24 * GIB)   # too big: refused without warn
    with caplog.at_level(logging.WARNING, logger="cooprl.rollout.memory_plan"):
        plan.check_memory(run.config, ["cuda:0", "cuda:0"], run)
    assert "cuda:0 would hold 92.9 GiB" in caplog.text and "memory_plan=warn" not in caplog.text


def test_a_plan_within_the_margin_is_warned_about(gpus, caplog, monkeypatch):
    run = he_run("agent_model.gradient_checkpointing=true")   # 68.2 GiB
    monkeypatch.setattr(memory, "gpu_total_bytes", lambda device: 76 * GIB)   # 75 usable: 68.2 is within 10%
    with caplog.at_level(logging.WARNING, logger="cooprl.rollout.memory_plan"):
        plan.check_memory(run.config, ["cuda:0", "cuda:0"], run)
    assert "within 10% of what it can hold" in caplog.text


def test_mp_counts_each_gpus_own_update_and_fsdp_shares_the_states():
    run = he_run("magrpo.parallel_training=mp", "magrpo.agent_devices=[cuda:0, cuda:1]")
    accounts = plan.plan_accounts(plan.Planner(run.config, run, gpu_bytes=80 * GIB, offline=True),
                                  ["cuda:0", "cuda:1"], [])
    assert [what for what, _ in accounts["cuda:1"].items] == [
        "agent 1 weights", "agent 1 optimizer states", "agent 1 gradients (its update)",
        "agent 1 activations (5632 tokens of 8 sequences, trie)", "agent 1 log-softmax (2048 positions, float32)"]
    sharded = he_run("magrpo.parallel_training=fsdp", "magrpo.update_schedule=items", "magrpo.rollout_buffer_size=1")
    items = dict(plan.plan_accounts(plan.Planner(sharded.config, sharded, gpu_bytes=80 * GIB, processes=8,
                                                 offline=True), ["cuda:0", "cuda:0"], [])["cuda:0"].items)
    states = memory.optimizer_bytes(QWEN_3B, torch.bfloat16, False, "kahan")
    assert items["agent 0 optimizer states (1/8: fsdp)"] == states // 8
    assert items["agent 0 weights"] == QWEN_3B.parameters * 2   # gathered whole for sampling
    assert items["agent 0 gradients (its update)"] == QWEN_3B.parameters * 2 // 8


def test_references_and_critics_are_counted_where_they_sit(gpus):
    run = _run("configs/iac_he_config.yaml", "iac", "agent_model.device=cuda:0", "iac.critic_devices=cuda:1",
               "iac.use_separate_critic=true", "iac.reference_kl_coef=0.1")
    accounts = plan.plan_accounts(plan.Planner(run.config, run, offline=True), ["cuda:0", "cuda:0"], [],
                                  ["cuda:1", "cuda:1"])
    assert ("agent 1 reference", QWEN_3B.parameters * 2) in accounts["cuda:0"].items
    assert [what for what, _ in accounts["cuda:1"].items][:4] == [
        "critic 0 weights", "critic 0 optimizer states", "critic 1 weights", "critic 1 optimizer states"]
    together = _run("configs/iac_he_config.yaml", "iac", "agent_model.device=cuda:0", "iac.critic_devices=cuda:0")
    # two 3B agents and two 3B critics with their AdamW states on one 80 GiB GPU
    with pytest.raises(ConfigError, match=r"cuda:0 would hold .*critic 1 optimizer states"):
        plan.check_memory(together.config, ["cuda:0", "cuda:0"], together)


def test_a_cpu_run_has_no_plan():
    run = _run("configs/magrpo_che_cpu.yaml", "magrpo")
    planner = plan.Planner(run.config, run, offline=True)
    assert plan.plan_accounts(planner, ["cpu", "cpu"], []) == {}
    plan.check_memory(run.config, ["cpu", "cpu"], run)


def test_marlhfs_reward_model_is_counted_where_it_sits():
    run = _run("configs/marlhf_he_config.yaml", "marlhf", "agent_model.device=cuda:0",
               "marlhf.reward_model_device=cuda:1")
    accounts = plan.plan_accounts(plan.Planner(run.config, run, gpu_bytes=80 * GIB, offline=True),
                                  ["cuda:0", "cuda:0"], [], reward_device="cuda:1")
    assert [what for what, _ in accounts["cuda:1"].items][:2] == ["reward model weights",
                                                                 "reward model optimizer states"]
    frozen = _run("configs/marlhf_he_config.yaml", "marlhf", "agent_model.device=cuda:0",
                  "marlhf.reward_freeze_backbone=true")
    accounts = plan.plan_accounts(plan.Planner(frozen.config, frozen, gpu_bytes=80 * GIB, offline=True),
                                  ["cuda:0", "cuda:0"], [], reward_device="cuda:0")
    assert ("reward model weights (frozen backbone)", QWEN_3B.parameters * 2) in accounts["cuda:0"].items


def test_a_model_on_the_cpu_beside_gpu_agents_is_not_in_the_plan():
    run = _run("configs/iac_he_config.yaml", "iac", "agent_model.device=cuda:0", "iac.critic_devices=cpu",
               "iac.use_separate_critic=true")
    accounts = plan.plan_accounts(plan.Planner(run.config, run, gpu_bytes=80 * GIB, offline=True),
                                  ["cuda:0", "cuda:0"], [], ["cpu", "cpu"])
    assert list(accounts) == ["cuda:0"]
    assert not any(what.startswith("critic") for what, _ in accounts["cuda:0"].items)


def test_each_agent_is_planned_with_its_own_max_new_tokens(gpus):
    import dataclasses
    # a single-turn run bounded by prompts of 100 tokens: an agent's completions add its own budget to the forward
    run = he_run("magrpo.num_turns=1", "magrpo.max_new_tokens=256", "magrpo.parallel_training=mp",
                 "magrpo.agent_devices=[cuda:0, cuda:1]", "agent_model.generation_backend=vllm",
                 "agent_model.lora.r=16", "agents=[{max_new_tokens: 1024}, {temperature: 0.9}]")
    planner = plan.Planner(run.config, run, gpu_bytes=80 * GIB, offline=True, first_prompt=100)
    accounts = plan.plan_accounts(planner, ["cuda:0", "cuda:1"], [["cuda:0"], ["cuda:1"]])
    for device, agent, budget in (("cuda:0", 0, 1024), ("cuda:1", 1, 256)):
        forward = plan.largest_forward(dataclasses.replace(run.section, max_new_tokens=budget), 2048, 100)
        label = f"agent {agent} activations ({forward.tokens} tokens of {forward.sequences} sequences, trie)"
        assert label in dict(accounts[device].items), (label, accounts[device].items)
    own, shared = (plan.largest_forward(dataclasses.replace(run.section, max_new_tokens=n), 2048, 100).tokens
                   for n in (1024, 256))
    assert own > shared


def test_a_shared_policy_is_planned_as_one_model(capsys):
    # `--memory-plan`: two agents hold two models' weights and optimizer states; a shared policy one of each
    import re

    def planned(*overrides: str) -> list[str]:
        with pytest.raises(ConfigError):   # neither fits 24 GiB in full fine-tuning
            plan.print_memory_plan(he_run(*overrides), 24)
        return re.findall(r"^ +[\d.]+ GiB +(.*)$", capsys.readouterr().out, re.M)

    separate, shared = planned(), planned("agent_model.shared_policy=true")
    assert sum("weights" in line for line in separate) == 2 * sum("weights" in line for line in shared) == 2
