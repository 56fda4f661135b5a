"""Batched log-probs, exact resume, LoRA checkpoints and the KL term, with the tiny random model."""

import json
from pathlib import Path

import pytest
import torch

from cooprl.checkpoint import list_checkpoints, load_agent_weights
from cooprl.config import MAGRPOSection, Run, load_config
from cooprl.models.loading import TINY_RANDOM, load_causal_lm, load_tokenizer
from cooprl.models.logprobs import completion_logprobs
from cooprl.rollout.generation import HFGenerator, SamplingParams
from cooprl.trainers.loop import seed_everything, train_loop
from cooprl.samples import NodeGroup, TrainSample
from cooprl.trainers.magrpo import build_magrpo, optimizer_batches
from tests.scripted import scripted_task

pytestmark = pytest.mark.slow   # end to end (trainers, command lines, subprocesses): not in `make test-fast`


@pytest.fixture(scope="module")
def tiny():
    return load_causal_lm(TINY_RANDOM, device="cpu"), load_tokenizer(TINY_RANDOM)


def test_batched_logprobs_equal_one_at_a_time(tiny):
    model, tokenizer = tiny
    prompts = [torch.tensor(tokenizer(t)["input_ids"]) for t in ["def aux(x):", "a much longer prompt with more tokens "
                                                                                "in it", "x"]]
    completions = [torch.tensor([5, 6, 7, 8, 9]), torch.tensor([11]), torch.tensor([3, 4, 5])]
    batched, mask = completion_logprobs(model, prompts, completions, tokenizer.pad_token_id)
    assert mask.tolist() == [[1, 1, 1, 1, 1], [1, 0, 0, 0, 0], [1, 1, 1, 0, 0]]
    assert (batched[mask == 0] == 0).all()  # padding after a completion's end contributes nothing
    for row, (p, c) in enumerate(zip(prompts, completions)):
        single, _ = completion_logprobs(model, [p], [c], tokenizer.pad_token_id)
        assert torch.allclose(batched[row, :len(c)], single[0], atol=1e-5)
    # and both agree with a plain forward over the unpadded sequence
    p, c = prompts[1], completions[0]
    logits = model(input_ids=torch.cat([p, c])[None]).logits[0, len(p) - 1:-1]
    manual = torch.log_softmax(logits.float(), -1).gather(-1, c[:, None])[:, 0]
    single, _ = completion_logprobs(model, [p], [c], tokenizer.pad_token_id)
    assert torch.allclose(single[0], manual, atol=1e-5)


def test_generation_is_batched_and_trims_at_eos(tiny):
    model, tokenizer = tiny
    generator = HFGenerator(model, tokenizer, max_prompt_tokens=64)
    torch.manual_seed(0)
    out = generator.sample(["def f(x):", "hello"], 3, SamplingParams(max_new_tokens=5, temperature=1.0))
    assert [len(group) for group in out] == [2 * 0 + 3, 3]
    for group in out:
        for completion in group:
            assert 1 <= len(completion.completion_ids) <= 5
            assert tokenizer.pad_token_id not in completion.completion_ids[:-1].tolist()


def run_magrpo(tmp_path: Path, name: str, overrides: list[str], task=None):
    config = load_config(None, [
        f"agent_model.name={TINY_RANDOM}", "agent_model.device=cpu", "magrpo.max_new_tokens=6",
        "magrpo.num_generations=2", "magrpo.num_turns=2", "magrpo.learning_rate=1e-2", "magrpo.eval_interval=0",
        "magrpo.eval_num_samples=1", "wandb.mode=disabled", f"output.base_dir={tmp_path}", f"output.run_name={name}",
        "agent_model.temperature=1.0", "agent_model.top_p=1.0", *overrides])
    seed_everything(config.seed)
    task = task or scripted_task()
    algorithm = build_magrpo(Run.of(config, "magrpo"), task)
    summary = train_loop(Run.of(config, "magrpo"), task, algorithm, tmp_path / name)
    return algorithm, summary


def train_events(run_dir: Path):
    events = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [e for e in events if "turn_1/reward_mean" in e]


@pytest.mark.parametrize("schedule", [
    # upstream's: 3 nodes per item, 4 per update: the checkpoint at step 2 holds 2 buffered nodes per agent
    ["magrpo.update_schedule=nodes", "magrpo.rollout_buffer_size=4"],
    ["magrpo.update_schedule=items", "magrpo.rollout_buffer_size=1"]])
def test_resume_matches_uninterrupted_run(tmp_path, schedule):
    straight, _ = run_magrpo(tmp_path, "straight", ["magrpo.max_steps=4", *schedule])
    run_magrpo(tmp_path, "resumed", ["magrpo.max_steps=2", *schedule])
    resumed, _ = run_magrpo(tmp_path, "resumed", ["magrpo.max_steps=4", "checkpoint.resume_from_checkpoint=latest",
                                                  *schedule])
    a, b = train_events(tmp_path / "straight"), train_events(tmp_path / "resumed")
    assert [e["step"] for e in b] == [1, 2, 3, 4]
    assert any("agent_0/loss" in e for e in a[2:])   # an update after the resume point
    for key in ("turn_1/reward_mean", "turn_2/reward_mean", "agent_0/loss", "agent_1/loss", "env_step"):
        assert [e.get(key) for e in a] == [e.get(key) for e in b], key
    for m1, m2 in zip(straight.models, resumed.models):
        for (n1, p1), (_, p2) in zip(m1.named_parameters(), m2.named_parameters()):
            assert torch.equal(p1, p2), n1
    # the straight run changed the weights (so the equality above is not vacuous)
    fresh = load_causal_lm(TINY_RANDOM, device="cpu")
    assert not torch.equal(fresh.model.embed_tokens.weight, straight.models[0].model.embed_tokens.weight)


def test_a_new_run_in_a_used_folder_starts_its_metrics_afresh(tmp_path):
    # the CPU demo has a fixed run_name: running it twice must not mix two runs' steps in metrics.jsonl
    run_magrpo(tmp_path, "again", ["magrpo.max_steps=2", "magrpo.num_turns=1"])
    _, summary = run_magrpo(tmp_path, "again", ["magrpo.max_steps=2", "magrpo.num_turns=1"])
    assert [e["step"] for e in train_events(tmp_path / "again")] == [1, 2]
    assert summary["steps"] == 2


def test_checkpoint_total_limit_keeps_newest(tmp_path):
    run_magrpo(tmp_path, "limit", ["magrpo.max_steps=3", "checkpoint.checkpoint_interval=1",
                                   "checkpoint.checkpoint_total_limit=2", "magrpo.num_turns=1"])
    names = [p.name for p in list_checkpoints(tmp_path / "limit" / "checkpoints")]
    assert names == ["checkpoint-2", "checkpoint-3"]


def test_lora_adapters_train_save_and_load(tmp_path):
    algorithm, _ = run_magrpo(tmp_path, "lora", ["magrpo.max_steps=2", "magrpo.num_turns=1",
                                                "agent_model.lora={r: 4, alpha: 8, dropout: 0.0}"])
    model = algorithm.models[0]
    assert hasattr(model, "peft_config")
    checkpoint = list_checkpoints(tmp_path / "lora" / "checkpoints")[-1]
    saved = list((checkpoint / "agent_0").iterdir())
    assert any(p.name == "adapter_model.safetensors" for p in saved)  # adapters only, not the full model
    from cooprl.config import LoraSection
    fresh = load_causal_lm(TINY_RANDOM, device="cpu", lora=LoraSection(r=4, alpha=8, dropout=0.0))
    lora_b = {n: p for n, p in fresh.named_parameters() if "lora_B" in n}
    assert all(torch.count_nonzero(p) == 0 for p in lora_b.values())  # fresh adapters start at zero
    load_agent_weights(fresh, checkpoint, 0)
    trained = dict(model.named_parameters())
    for name, p in fresh.named_parameters():
        if "lora_" in name:
            assert torch.equal(p, trained[name]), name
    assert any(torch.count_nonzero(p) > 0 for n, p in fresh.named_parameters() if "lora_B" in n)


def test_reference_kl_is_reported_and_nonnegative(tmp_path):
    run_magrpo(tmp_path, "kl", ["magrpo.max_steps=2", "magrpo.num_turns=1", "magrpo.reference_kl_coef=0.1",
                                "magrpo.rollout_buffer_size=1"])
    events = train_events(tmp_path / "kl")
    assert all(e["agent_0/kl"] >= 0 for e in events if "agent_0/kl" in e)
    assert events[-1]["agent_0/kl"] > 0  # after one update the policy differs from the reference


def test_ctrl_c_saves_a_checkpoint_and_stops(tmp_path):
    import os
    import signal
    config = load_config(None, [f"agent_model.name={TINY_RANDOM}", "agent_model.device=cpu", "magrpo.max_new_tokens=4",
                                "magrpo.num_generations=2", "magrpo.num_turns=1", "magrpo.max_steps=5",
                                "wandb.mode=disabled", f"output.base_dir={tmp_path}"])
    task = scripted_task()
    algorithm = build_magrpo(Run.of(config, "magrpo"), task)
    step_once = algorithm.train_step

    def interrupted_step(item, step):
        metrics = step_once(item, step)
        if step == 2:
            os.kill(os.getpid(), signal.SIGINT)  # as if the user pressed Ctrl-C during step 2
        return metrics

    algorithm.train_step = interrupted_step
    summary = train_loop(Run.of(config, "magrpo"), task, algorithm, tmp_path / "run")
    assert summary["interrupted"] and summary["steps"] == 2
    assert [p.name for p in list_checkpoints(tmp_path / "run" / "checkpoints")] == ["checkpoint-2"]


def test_nonfinite_loss_skips_the_update(tiny):
    import copy
    from cooprl.samples import TrainSample
    from tests.scripted import policy_gradient_step
    model = copy.deepcopy(tiny[0])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    before = model.lm_head.weight.clone()
    sample = TrainSample(torch.tensor([5, 6]), torch.tensor([7, 8]), float("nan"))
    metrics = policy_gradient_step(model, optimizer, [sample], tiny[1].pad_token_id)
    assert metrics["skipped_nonfinite"] == 1.0
    assert torch.equal(model.lm_head.weight, before)
    metrics = policy_gradient_step(model, optimizer, [TrainSample(sample.prompt_ids, sample.completion_ids, 1.0)],
                                   tiny[1].pad_token_id)
    assert metrics["skipped_nonfinite"] == 0.0 and not torch.equal(model.lm_head.weight, before)


def test_summary_prints_zero_not_negative_zero(tmp_path, capsys):
    import json as _json
    from cooprl.trainers.loop import summarize
    # -7e-8: what the demo's cooperation_bonus mean was (float sums of small negative parts)
    events = [{"step": s, "env_step": s, "turn_1/reward_mean": 0.0, "turn_1/uses_aux": -0.0,
               "turn_1/cooperation_bonus": -7.142857141873016e-08} for s in (1, 2)]
    (tmp_path / "metrics.jsonl").write_text("".join(_json.dumps(e) + "\n" for e in events))
    summarize(tmp_path, 2, {}, False)
    out = capsys.readouterr().out
    assert "uses_aux" in out and "cooperation_bonus" in out and "-0.000" not in out


def test_summary_judges_by_the_evaluations_before_and_after_training(tmp_path, capsys):
    # offline MADPO trains on pairs from the start policy and logs that policy's samples: the training reward stays
    # flat while the policies improve; the evaluation at step 0 and at the end says so
    import json as _json
    from cooprl.trainers.loop import summarize
    events = [{"step": 0, "eval/turn_1/reward_mean": 0.297}] + [
        {"step": s, "turn_1/reward_mean": 0.5} for s in (1, 2)]
    (tmp_path / "metrics.jsonl").write_text("".join(_json.dumps(e) + "\n" for e in events))
    summary = summarize(tmp_path, 2, {"eval/turn_1/reward_mean": 0.615}, False)
    out = capsys.readouterr().out
    assert summary["learned"] is True
    assert "eval reward: 0.297 (before training) -> 0.615 (after 2 steps): learned" in out
    assert "mean training reward: 0.500 (first 1 steps) -> 0.500 (last 1 steps)\n" in out   # no verdict of its own
    summary = summarize(tmp_path, 2, {"eval/turn_1/reward_mean": 0.2}, False)
    assert summary["learned"] is False and "(after 2 steps): did not improve" in capsys.readouterr().out


def test_a_fresh_run_evaluates_before_its_first_step_and_a_resumed_run_does_not(tmp_path):
    run_magrpo(tmp_path, "ev", ["magrpo.max_steps=1", "magrpo.num_turns=1"])
    run_magrpo(tmp_path, "ev", ["magrpo.max_steps=2", "magrpo.num_turns=1", "checkpoint.resume_from_checkpoint=latest"])
    events = [json.loads(line) for line in (tmp_path / "ev" / "metrics.jsonl").read_text().splitlines()]
    eval_steps = [e["step"] for e in events if "eval/turn_1/reward_mean" in e]
    assert eval_steps == [0, 1, 2]   # the start, the first run's end, the resumed run's end; no second step 0


def node_group(turn: int, size: int = 3) -> NodeGroup:
    return NodeGroup(turn, [TrainSample(torch.tensor([1, turn]), torch.tensor([2]), 1.0) for _ in range(size)])


def test_nodes_schedule_runs_each_optimizer_step_in_one_forward():
    # one turn-1 node and four turn-2 nodes of G=3 samples, 5 nodes a step: one step per turn, each one forward
    buffer = [node_group(turn=0), *[node_group(turn=1) for _ in range(4)]]
    section = MAGRPOSection(update_schedule="nodes", train_batch_size=5, rollout_buffer_size=5)
    steps = optimizer_batches(buffer, section, buffered_items=1)
    assert [(len(groups), forward) for groups, forward in steps] == [(1, 3), (4, 12)]
    # items: one step on everything, the forward batch an item's samples
    section = MAGRPOSection(update_schedule="items", train_batch_size=None, rollout_buffer_size=2)
    assert [(len(groups), forward) for groups, forward in optimizer_batches(buffer, section, 2)] == [(5, 8)]


# the objective options on: 2 clipped passes, DAPO's token mean and clip-higher, tied groups resampled; upstream's
# nodes schedule keeps 2 buffered nodes (and their sampling log-probs) across the checkpoint. Not
# mask_truncated_completions: the tiny random model's 6-token completions all run out of tokens, and nothing would
# train (tests/cooprl/update/test_policy_gradient.py tests the mask)
EVERY_OPTION = ["magrpo.update_schedule=nodes", "magrpo.rollout_buffer_size=4", "magrpo.num_iterations=2",
                "magrpo.epsilon_high=0.28", "magrpo.loss_type=dapo", "magrpo.tied_groups=resample",
                "magrpo.max_resamples=1"]


def test_resume_matches_uninterrupted_run_with_every_objective_option(tmp_path):
    straight, _ = run_magrpo(tmp_path, "straight", ["magrpo.max_steps=4", *EVERY_OPTION])
    run_magrpo(tmp_path, "resumed", ["magrpo.max_steps=2", *EVERY_OPTION])
    resumed, _ = run_magrpo(tmp_path, "resumed", ["magrpo.max_steps=4", "checkpoint.resume_from_checkpoint=latest",
                                                  *EVERY_OPTION])
    a, b = train_events(tmp_path / "straight"), train_events(tmp_path / "resumed")
    assert [{k: v for k, v in e.items() if not k.startswith(("time/", "wall"))} for e in a] == \
        [{k: v for k, v in e.items() if not k.startswith(("time/", "wall"))} for e in b]
    updates = [e for e in a if "agent_0/loss" in e]
    assert updates and all("agent_0/clip_fraction" in e and "agent_0/ratio_max" in e for e in updates)
    assert all(e["agent_0/optimizer_steps"] % 2 == 0 for e in updates)   # every step taken twice, one per pass
    assert all("tied_groups/turn_1" in e and "tied_groups/resamples" in e for e in a)
    for m1, m2 in zip(straight.models, resumed.models):
        for (n1, p1), (_, p2) in zip(m1.named_parameters(), m2.named_parameters()):
            assert torch.equal(p1, p2), n1
    fresh = load_causal_lm(TINY_RANDOM, device="cpu")   # trained: the equality is not vacuous
    assert not torch.equal(fresh.model.embed_tokens.weight, straight.models[0].model.embed_tokens.weight)


def test_each_agent_trains_with_its_own_learning_rate_and_max_new_tokens(tmp_path, monkeypatch):
    import cooprl.trainers.base as base   # the policy step every policy-gradient trainer takes
    seen = []   # (agent's model, dr_grpo's constant, the longest completion) of every policy term

    def recorded(model, samples, *args, objective, **kwargs):
        seen.append((model, objective.max_new_tokens, max(len(s.completion_ids) for s in samples)))
        return term(model, samples, *args, objective=objective, **kwargs)

    term = base.policy_gradient_term
    monkeypatch.setattr(base, "policy_gradient_term", recorded)
    algorithm, _ = run_magrpo(tmp_path, "own", ["magrpo.max_steps=2", "magrpo.loss_type=dr_grpo",
                                                "agents=[{learning_rate: 0.0, max_new_tokens: 2}, {}]"])
    first, second = algorithm.models
    assert {(n, longest <= n) for model, n, longest in seen if model is first} == {(2, True)}
    assert {n for model, n, _ in seen if model is second} == {6}
    assert max(longest for model, _, longest in seen if model is second) > 2
    fresh = load_causal_lm(TINY_RANDOM, device="cpu")   # learning rate 0: untouched; the shared 1e-2: trained
    assert all(torch.equal(p, q) for p, q in zip(first.parameters(), fresh.parameters(), strict=True))
    assert not torch.equal(second.model.embed_tokens.weight, fresh.model.embed_tokens.weight)


# ------------------------------------------------------------------------------------------ agent_model.shared_policy
def shared_policy_magrpo(tmp_path: Path, overrides: list[str] = ()):
    config = load_config(None, [
        f"agent_model.name={TINY_RANDOM}", "agent_model.device=cpu", "agent_model.shared_policy=true",
        "magrpo.max_new_tokens=6", "magrpo.num_generations=2", "magrpo.num_turns=1", "magrpo.learning_rate=1e-2",
        "magrpo.update_schedule=items", "magrpo.rollout_buffer_size=1", "wandb.mode=disabled",
        f"output.base_dir={tmp_path}", *overrides])
    seed_everything(config.seed)
    return build_magrpo(Run.of(config, "magrpo"), scripted_task())


def test_a_shared_policy_steps_once_on_the_sum_of_every_agents_own_loss(tmp_path):
    import copy

    from cooprl.update.policy_gradient import policy_gradient_term
    algorithm = shared_policy_magrpo(tmp_path)
    model, [optimizer] = algorithm.models[0], algorithm.optimizers
    assert len(algorithm.models) == 1 and all(a.model is model and a.optimizer is optimizer for a in algorithm.team)
    # scripted advantages: agent 0 has 3 samples of one prompt, agent 1 two of another (its own role prompt)
    pad = algorithm.team[0].tokenizer.pad_token_id
    groups = [NodeGroup(0, [TrainSample(torch.tensor([5, 6, 7]), torch.tensor([8 + i, 9]), adv)
                            for i, adv in enumerate([1.0, -0.5, -0.5])]),
              NodeGroup(0, [TrainSample(torch.tensor([11, 12]), torch.tensor([13, 14 + i, 15]), adv)
                            for i, adv in enumerate([0.7, -0.7])])]
    start = copy.deepcopy(model)
    expected, own_losses = {}, []
    for group in groups:   # the gradient of each agent's own step (its loss: the mean over its own samples)
        term = policy_gradient_term(start, group.samples, pad)
        loss = sum(term.loss(batch, len(group.samples))[0] for batch in term.batches)
        own_losses.append(loss.item())
        for (name, _), g in zip(start.named_parameters(), torch.autograd.grad(loss, list(start.parameters()),
                                                                               allow_unused=True)):
            if g is not None:
                expected[name] = expected.get(name, 0) + g
    seen = []
    step = optimizer.step
    optimizer.step = lambda *args, **kwargs: (seen.append({n: p.grad.clone() for n, p in model.named_parameters()
                                                           if p.grad is not None}), step(*args, **kwargs))[1]
    algorithm.buffer, algorithm.buffered_items = [[groups[0]], [groups[1]]], 1
    metrics = algorithm.update().reduce()
    assert len(seen) == 1   # one optimizer step for both agents' losses
    assert expected.keys() == seen[0].keys()
    for name, grad in expected.items():
        assert torch.allclose(seen[0][name], grad, atol=1e-6), name
    # every agent's metrics, as a team of separate models reports them; the one step counted once
    assert [metrics[f"agent_{a}/loss"] for a in (0, 1)] == pytest.approx(own_losses, abs=1e-6)
    assert [metrics[f"agent_{a}/trained_samples"] for a in (0, 1)] == [3, 2]
    assert metrics["agent_0/grad_norm"] == metrics["agent_1/grad_norm"] > 0
    assert metrics["agent_0/optimizer_steps"] == metrics["shared_policy/optimizer_steps"] == 1
    assert not torch.equal(model.lm_head.weight, start.lm_head.weight)


def test_a_shared_policy_resumes_as_it_ran_and_refuses_a_resume_without_the_flag(tmp_path):
    shared = ["agent_model.shared_policy=true", "magrpo.update_schedule=nodes", "magrpo.rollout_buffer_size=4"]
    straight, _ = run_magrpo(tmp_path, "straight", ["magrpo.max_steps=4", *shared])
    run_magrpo(tmp_path, "resumed", ["magrpo.max_steps=2", *shared])
    resumed, _ = run_magrpo(tmp_path, "resumed", ["magrpo.max_steps=4", "checkpoint.resume_from_checkpoint=latest",
                                                  *shared])
    a, b = train_events(tmp_path / "straight"), train_events(tmp_path / "resumed")
    updates = [e for e in a if "agent_1/loss" in e]
    assert updates and updates[-1]["step"] > 2   # an update after the resume point
    assert all(e["shared_policy/optimizer_steps"] == max(e["agent_0/optimizer_steps"], e["agent_1/optimizer_steps"])
               for e in updates)
    assert [{k: v for k, v in e.items() if not k.startswith(("time/", "wall"))} for e in a] == \
        [{k: v for k, v in e.items() if not k.startswith(("time/", "wall"))} for e in b]
    [m1], [m2] = straight.models, resumed.models
    for (n1, p1), (_, p2) in zip(m1.named_parameters(), m2.named_parameters()):
        assert torch.equal(p1, p2), n1
    assert not torch.equal(load_causal_lm(TINY_RANDOM, device="cpu").lm_head.weight, m1.lm_head.weight)
    checkpoint = list_checkpoints(tmp_path / "straight" / "checkpoints")[-1]
    assert sorted(p.name for p in checkpoint.iterdir()) == ["agent_0", "done", "shared_policy.json",
                                                             "trainer_state.pt"]
    from cooprl.checkpoint import CheckpointError
    with pytest.raises(CheckpointError, match="holds a shared policy .* --override agent_model.shared_policy=true"):
        run_magrpo(tmp_path, "separate", ["magrpo.max_steps=6", "magrpo.update_schedule=nodes",
                                          "magrpo.rollout_buffer_size=4",
                                          f"checkpoint.resume_from_checkpoint={checkpoint}"])


def test_evaluate_reads_a_shared_policy_run_as_it_evaluated_itself(tmp_path):
    import evaluate
    from cooprl.checkpoint import CheckpointError
    from envs.code_generation.task import build_code_task
    overrides = ["dataset.name=coop", "dataset.train_split=train[16:20]", "dataset.eval_split=test[:2]",
                 "magrpo.num_turns=1", "magrpo.max_steps=2", "magrpo.update_schedule=items",
                 "magrpo.rollout_buffer_size=1", "magrpo.eval_num_samples=2", "magrpo.eval_at_start=false",
                 "agent_model.shared_policy=true", "agent_model.lora={r: 4, alpha: 8, dropout: 0.0}"]
    config = load_config(None, [
        f"agent_model.name={TINY_RANDOM}", "agent_model.device=cpu", "magrpo.max_new_tokens=6",
        "magrpo.num_generations=2", "magrpo.learning_rate=1e-2", "magrpo.eval_interval=0", "wandb.mode=disabled",
        f"output.base_dir={tmp_path}", "output.run_name=shared", "agent_model.temperature=1.0",
        "agent_model.top_p=1.0", *overrides])
    seed_everything(config.seed)
    task = build_code_task(Run.of(config, "magrpo"))
    train_loop(Run.of(config, "magrpo"), task, build_magrpo(Run.of(config, "magrpo"), task), tmp_path / "shared")
    final = {k: v for line in (tmp_path / "shared" / "metrics.jsonl").read_text().splitlines()
             for k, v in json.loads(line).items() if k.startswith("eval/")}   # (the last evaluation's)
    assert "eval/turn_1/reward_mean" in final
    run = evaluate.read_evaluation_config(str(tmp_path / "shared" / "config.yaml"), None, [])
    assert evaluate.evaluate_checkpoint(run, str(tmp_path / "shared")) == pytest.approx(final)
    separate = evaluate.read_evaluation_config(str(tmp_path / "shared" / "config.yaml"), None,
                                               ["agent_model.shared_policy=false"])
    with pytest.raises(CheckpointError, match="--override agent_model.shared_policy=true"):
        evaluate.evaluate_checkpoint(separate, str(tmp_path / "shared"))
