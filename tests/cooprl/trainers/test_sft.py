"""Supervised fine-tuning (train_sft.py) and `agent_model.init_from`, with the tiny random model on the coop set:
the NLL loss, resume, demonstrations (reference ones of the three team shapes, JSONL ones), and RL trainers that
start from an SFT run's agents."""

import json
from pathlib import Path

import pytest
import torch

from cooprl.config import Run, load_config
from cooprl.errors import UserError
from cooprl.models.loading import TINY_RANDOM, ModelError, load_causal_lm
from cooprl.trainers.loop import evaluation_seed, seed_everything, train_loop
from cooprl.trainers.sft import DemonstrationError, build_sft, read_demonstrations, reference_demonstrations
from envs.code_generation.task import build_code_task

pytestmark = pytest.mark.slow   # trainers end to end

LORA = ["agent_model.lora.r=4", "agent_model.lora.alpha=8", "agent_model.lora.dropout=0.0"]


def sft_config(tmp_path: Path, name: str, overrides: list[str] = ()):
    return load_config(None, [
        f"agent_model.name={TINY_RANDOM}", "agent_model.device=cpu", "dataset.name=coop",
        "dataset.train_split=train[16:28]", "dataset.eval_split=test[:16]", "sft.num_agents=2",
        "sft.max_new_tokens=6", "sft.learning_rate=1e-2", "sft.batch_size=3", "sft.eval_interval=0",
        "sft.eval_num_samples=2", "sft.eval_num_generations=2", "wandb.mode=disabled", f"output.base_dir={tmp_path}",
        f"output.run_name={name}", "agent_model.temperature=1.0", "agent_model.top_p=1.0", *overrides])


def run(config, trainer: str, name: str, tmp_path: Path):
    """Build `trainer`'s algorithm on the code task and run the shared loop; return (algorithm, summary)."""
    from cooprl.trainers import build_algorithm
    seed_everything(config.seed)
    task = build_code_task(Run.of(config, trainer))
    algorithm = build_algorithm(Run.of(config, trainer), task)
    return algorithm, train_loop(Run.of(config, trainer), task, algorithm, tmp_path / name)


def events(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def eval_at(run_dir: Path, step: int) -> dict:
    return {k: v for e in events(run_dir) if e["step"] == step for k, v in e.items() if k.startswith("eval/")}


# ------------------------------------------------------------------------------------------ the loss
def test_sft_lowers_the_nll_of_its_demonstrations(tmp_path):
    algorithm, _ = run(sft_config(tmp_path, "learn", ["sft.num_train_epochs=3", "sft.eval_num_samples=1"]), "sft",
                       "learn", tmp_path)
    train = [e for e in events(tmp_path / "learn") if "nll_mean" in e]
    assert len(train) == 12   # 3 epochs of 4 batches of 3 of the 12 training problems
    assert train[-1]["nll_mean"] < train[0]["nll_mean"] - 1.0
    assert all(e["demonstrations"] == 3.0 for e in train)


# ------------------------------------------------------------------------------------------ resume
@pytest.mark.parametrize("lora", [[], LORA], ids=["full", "lora"])
def test_resumed_sft_run_equals_an_uninterrupted_one(tmp_path, lora):
    straight, _ = run(sft_config(tmp_path, "straight", ["sft.max_steps=4", *lora]), "sft", "straight", tmp_path)
    run(sft_config(tmp_path, "resumed", ["sft.max_steps=2", *lora]), "sft", "resumed", tmp_path)
    resumed, _ = run(sft_config(tmp_path, "resumed", ["sft.max_steps=4", "checkpoint.resume_from_checkpoint=latest",
                                                      *lora]), "sft", "resumed", tmp_path)
    a = [e for e in events(tmp_path / "straight") if "nll_mean" in e]
    b = [e for e in events(tmp_path / "resumed") if "nll_mean" in e]
    assert [e["step"] for e in b] == [1, 2, 3, 4]
    for key in ("agent_0/nll", "agent_1/nll", "agent_0/grad_norm", "env_step"):
        assert [e[key] for e in a] == [e[key] for e in b], key
    assert eval_at(tmp_path / "straight", 4) == eval_at(tmp_path / "resumed", 4)
    for m1, m2 in zip(straight.models, resumed.models):
        for (n1, p1), (_, p2) in zip(m1.named_parameters(), m2.named_parameters()):
            assert torch.equal(p1, p2), n1
    fresh = run_fresh_weights()
    changed = [n for n, p in straight.models[1].named_parameters() if p.requires_grad]
    assert changed and not torch.equal(dict(straight.models[1].named_parameters())[changed[0]],
                                       fresh.get(changed[0].replace("base_model.model.", ""), torch.zeros(0)))


def run_fresh_weights() -> dict:
    return dict(load_causal_lm(TINY_RANDOM, device="cpu").named_parameters())


# ------------------------------------------------------------------------------------------ init_from
@pytest.fixture(scope="module")
def sft_run(tmp_path_factory):
    """A finished SFT run (LoRA) of the aux+main team: its folder and its algorithm."""
    tmp = tmp_path_factory.mktemp("sft")
    algorithm, _ = run(sft_config(tmp, "sft", ["sft.max_steps=4", *LORA]), "sft", "sft", tmp)
    return tmp / "sft", algorithm


def magrpo_config(tmp_path: Path, name: str, overrides: list[str]):
    # the same evaluation settings as the SFT run's, so its first evaluation is comparable with SFT's last
    return load_config(None, [
        f"agent_model.name={TINY_RANDOM}", "agent_model.device=cpu", "dataset.name=coop",
        "dataset.train_split=train[16:28]", "dataset.eval_split=test[:16]", "magrpo.num_turns=1",
        "magrpo.num_generations=2", "magrpo.max_new_tokens=6", "magrpo.learning_rate=1e-2", "magrpo.eval_interval=0",
        "magrpo.eval_num_samples=2", "magrpo.eval_num_generations=2", "magrpo.update_schedule=items",
        "magrpo.rollout_buffer_size=1", "wandb.mode=disabled", f"output.base_dir={tmp_path}",
        f"output.run_name={name}", "agent_model.temperature=1.0", "agent_model.top_p=1.0", *overrides])


def test_magrpo_from_an_sft_run_starts_from_its_weights_and_first_evaluation(sft_run, tmp_path):
    sft_dir, sft = sft_run
    config = magrpo_config(tmp_path, "rl", ["magrpo.max_steps=1", f"agent_model.init_from={sft_dir}", *LORA])
    from cooprl.trainers import build_algorithm
    seed_everything(config.seed)
    task = build_code_task(Run.of(config, "magrpo"))
    rl = build_algorithm(Run.of(config, "magrpo"), task)
    for m_sft, m_rl in zip(sft.models, rl.models):   # the adapters continue: the same trainable tensors
        sft_params = {n: p for n, p in m_sft.named_parameters() if p.requires_grad}
        rl_params = {n: p for n, p in m_rl.named_parameters() if p.requires_grad}
        assert sft_params.keys() == rl_params.keys() and sft_params
        assert all(torch.equal(sft_params[n], rl_params[n]) for n in sft_params)
        assert any(torch.count_nonzero(p) for n, p in rl_params.items() if "lora_B" in n)   # trained, not fresh
    train_loop(Run.of(config, "magrpo"), task, rl, tmp_path / "rl")
    sft_final = eval_at(sft_dir, 4)
    assert sft_final and eval_at(tmp_path / "rl", 0) == sft_final
    # the samples themselves: the RL run's start policy writes what the SFT run's final policy writes
    rl_start = build_algorithm(Run.of(config, "magrpo"), build_code_task(Run.of(config, "magrpo")))
    assert greedy_texts(rl_start) == greedy_texts(sft)
    fresh = build_algorithm(Run.of(magrpo_config(tmp_path, "fresh", ["magrpo.max_steps=1", *LORA]), "magrpo"),
                            build_code_task(Run.of(config, "magrpo")))
    assert greedy_texts(fresh) != greedy_texts(sft)


def greedy_texts(algorithm) -> list[str]:
    prompts = ["def aux(x):\n", "Implement the function below.\ndef f(a, b):\n"]
    texts = []
    for agent in algorithm.team:
        torch.manual_seed(evaluation_seed(0))
        from cooprl.rollout.generation import SamplingParams
        out = agent.generator.sample(prompts, 1, SamplingParams(max_new_tokens=8, temperature=0.0))
        texts += [group[0].text for group in out]
    return texts


def test_init_from_lora_adapters_into_a_full_model_merges_them(sft_run, tmp_path):
    sft_dir, sft = sft_run
    config = magrpo_config(tmp_path, "full", ["magrpo.max_steps=1", f"agent_model.init_from={sft_dir}"])
    from cooprl.trainers import build_algorithm
    full = build_algorithm(Run.of(config, "magrpo"), build_code_task(Run.of(config, "magrpo")))
    assert not hasattr(full.models[0], "peft_config")   # a full fine-tuning run: the adapters merged in
    assert greedy_texts(full) == greedy_texts(sft)


@pytest.mark.parametrize("trainer", ["iac", "madpo"])
def test_other_trainers_start_from_the_run_too(sft_run, tmp_path, trainer):
    sft_dir, sft = sft_run
    extra = {"iac": ["iac.num_turns=1", "iac.num_generations=2"], "madpo": ["madpo.num_turns=1"]}[trainer]
    config = load_config(None, [f"agent_model.name={TINY_RANDOM}", "agent_model.device=cpu", "dataset.name=coop",
                                f"{trainer}.max_new_tokens=6", f"agent_model.init_from={sft_dir}", *LORA, *extra])
    from cooprl.trainers import build_algorithm
    algorithm = build_algorithm(Run.of(config, trainer), build_code_task(Run.of(config, trainer)))
    assert greedy_texts(algorithm) == greedy_texts(sft)


def test_evaluate_and_strategy_start_from_the_run(sft_run, tmp_path):
    sft_dir, sft = sft_run
    import evaluate
    from strategies.llm import build_llm
    config = magrpo_config(tmp_path, "ev", [f"agent_model.init_from={sft_dir}", *LORA])
    llm = build_llm(config, None, [], max_new_tokens=8)
    assert [type(x).__name__ for x in (llm,)] == ["TeamLLM"]   # the run's two agents
    metrics = evaluate.evaluate_checkpoint(Run.of(config, "magrpo"), None)
    assert metrics == eval_at(sft_dir, 4)   # the SFT run's last evaluation, same settings and seed


@pytest.mark.parametrize("damage, message", [
    ("missing", "is not a folder"),
    ("one_agent", "holds 1 agent(s), this run has 2"),
    ("truncated", "truncated"),
    ("empty", "no final/ models and no usable checkpoint"),
])
def test_a_bad_init_from_is_a_clear_error(sft_run, tmp_path, damage, message):
    import shutil
    sft_dir, _ = sft_run
    target = tmp_path / "run"
    if damage != "missing":
        shutil.copytree(sft_dir, target)
        checkpoint = sorted((target / "checkpoints").glob("checkpoint-*"))[-1]
        if damage == "one_agent":
            shutil.rmtree(checkpoint / "agent_1")
        elif damage == "truncated":
            weights = checkpoint / "agent_1" / "adapter_model.safetensors"
            weights.write_bytes(weights.read_bytes()[:100])
            target = checkpoint   # named exactly (a run folder's newest undamaged one would be taken instead)
        else:
            shutil.rmtree(target / "checkpoints")
    config = magrpo_config(tmp_path, "bad", [f"agent_model.init_from={target}", *LORA])
    from cooprl.trainers import build_algorithm
    with pytest.raises(ModelError, match="agent_model.init_from") as err:
        build_algorithm(Run.of(config, "magrpo"), build_code_task(Run.of(config, "magrpo")))
    assert message in str(err.value)
    assert isinstance(err.value, UserError)


def test_init_from_and_strategies_take_an_actor_critic_run_s_agents_not_its_critics(sft_run, tmp_path):
    # an IAC run saves agent_0, agent_1 and then its critics agent_2, agent_3 (value models): init_from such a run
    # failed with "holds 4 agent(s), this run has 2", though any trainer starts from a run's agents; an AC run's
    # actor and critic were taken by evaluate_strategy.py --checkpoint as a team of two (the critic as main)
    import shutil
    from cooprl.checkpoint import init_folders
    from cooprl.models.value_model import HEAD_FILE
    from strategies.llm import TeamLLM, build_llm
    sft_dir, _ = sft_run
    checkpoint = sorted((sft_dir / "checkpoints").glob("checkpoint-*"))[-1]
    iac = tmp_path / "iac"
    shutil.copytree(checkpoint, iac)
    for critic in (2, 3):
        shutil.copytree(iac / "agent_0", iac / f"agent_{critic}")
        (iac / f"agent_{critic}" / HEAD_FILE).write_bytes(b"")
    assert init_folders(str(iac), 2) == [iac / "agent_0", iac / "agent_1"]
    with pytest.raises(ModelError, match="holds 2 agent.s. and 2 value model.s. .critics., this run has 1"):
        init_folders(str(iac), 1)
    ac = tmp_path / "ac"
    shutil.copytree(checkpoint, ac)
    (ac / "agent_1" / HEAD_FILE).write_bytes(b"")
    assert init_folders(str(ac), 1) == [ac / "agent_0"]
    config = magrpo_config(tmp_path, "llm", [*LORA])
    assert not isinstance(build_llm(config, str(ac), [], max_new_tokens=4), TeamLLM)
    assert isinstance(build_llm(config, str(iac), [], max_new_tokens=4), TeamLLM)


def test_init_from_adapters_of_other_lora_settings_is_a_clear_error(sft_run, tmp_path):
    # a LoRA run continues with the saved adapters: with agent_model.lora.r=8 it trained the saved r=4 adapters
    # while its config.yaml and its start summary said r=8
    sft_dir, _ = sft_run
    config = magrpo_config(tmp_path, "other_r", [f"agent_model.init_from={sft_dir}", *LORA, "agent_model.lora.r=8",
                                                 "agent_model.lora.alpha=4"])
    from cooprl.trainers import build_algorithm
    with pytest.raises(ModelError, match="agent_model.init_from") as err:
        build_algorithm(Run.of(config, "magrpo"), build_code_task(Run.of(config, "magrpo")))
    assert "r 4 (this run: 8)" in str(err.value) and "alpha 8 (this run: 4)" in str(err.value)
    assert "agent_model.lora.r=4 agent_model.lora.alpha=8" in str(err.value)


def test_init_from_on_the_command_line_is_one_error_line(tmp_path):
    import subprocess
    import sys
    root = Path(__file__).resolve().parents[3]
    out = subprocess.run([sys.executable, "train_magrpo.py", "--config", "configs/magrpo_che_cpu.yaml", "--override",
                          f"agent_model.name={TINY_RANDOM}", f"agent_model.init_from={tmp_path / 'nope'}",
                          f"output.base_dir={tmp_path}"], cwd=root, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1].startswith("error: agent_model.init_from:")


# ------------------------------------------------------------------------------------------ demonstrations
def test_jsonl_demonstrations_are_trained_on(tmp_path):
    path = tmp_path / "demos.jsonl"
    records = [{"prompts": ["write aux for A\ndef aux(", "write main for A\n"], "completions": ["x):\n    return x\n",
                                                                                          "    return aux(1)\n"]},
               {"prompts": ["write aux for B\ndef aux(", "write main for B\n"], "completions": ["y):\n    return 2\n",
                                                                                          "    return aux(2)\n"]}]
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n\n")
    config = sft_config(tmp_path, "jsonl", [f"sft.demonstrations={path}", "sft.batch_size=1", "sft.max_steps=2"])
    task = build_code_task(Run.of(config, "sft"))
    algorithm = build_sft(Run.of(config, "sft"), task)
    assert sorted(batch[0].source for batch in task.train_items) == [f"{path}:1", f"{path}:2"]
    assert [len(batch) for batch in task.train_items] == [1, 1]
    tokenizer = algorithm.team[1].tokenizer
    demo = next(b[0] for b in task.train_items if b[0].source.endswith(":1"))
    assert tokenizer.decode(demo.completion_ids[1][:-1]) == "    return aux(1)\n"
    assert demo.completion_ids[1][-1].item() == tokenizer.eos_token_id   # the model learns to stop
    train_loop(Run.of(config, "sft"), task, algorithm, tmp_path / "jsonl")
    assert [e["step"] for e in events(tmp_path / "jsonl") if "nll_mean" in e] == [1, 2]


@pytest.mark.parametrize("line, fault", [
    ('{"prompts": ["a", "b"], "completions": ["c", "d"]', "not valid JSON"),
    ('["a", "b"]', "not a list"),
    ('{"prompts": ["a"], "completions": ["c", "d"]}', "'prompts' must be a list of 2 strings"),
    ('{"prompts": ["a", "b"], "completions": ["c", ""]}', "completions[1] must be a non-empty string"),
    ('{"prompts": ["a", 3], "completions": ["c", "d"]}', "prompts[1] must be a non-empty string, got a int"),
    ('{"prompts": ["a", "b"]}', "'completions' must be a list of 2 strings (one per agent), got nothing"),
    ('{"prompts": ["a", "b"], "completions": ["c", "d"], "answer": 1}', "unknown field(s) ['answer']"),
])
def test_a_malformed_demonstration_is_an_error_naming_file_and_line(tmp_path, line, fault):
    path = tmp_path / "bad.jsonl"
    good = json.dumps({"prompts": ["a", "b"], "completions": ["c", "d"]})
    path.write_text(f"{good}\n\n{line}\n{good}\n")
    with pytest.raises(DemonstrationError) as err:
        read_demonstrations(path, 2)
    assert str(err.value).startswith(f"{path}:3: ")
    assert fault.replace("a int", "an int") in str(err.value) or fault in str(err.value)


def test_a_demonstration_of_an_eval_problem_is_refused(tmp_path):
    config = sft_config(tmp_path, "leak", [])
    task = build_code_task(Run.of(config, "sft"))
    path = tmp_path / "leak.jsonl"
    eval_prompts = task.first_prompts(task.eval_items[3])
    path.write_text(json.dumps({"prompts": eval_prompts, "completions": ["x):\n", "    pass\n"]}) + "\n")
    config = sft_config(tmp_path, "leak", [f"sft.demonstrations={path}"])
    with pytest.raises(DemonstrationError, match=rf"{path}:1: prompts\[0\] is the prompt of eval problem Coop/3"):
        build_sft(Run.of(config, "sft"), build_code_task(Run.of(config, "sft")))


@pytest.mark.parametrize("env", ["code", "planner_coder", "coder_tester"])
def test_reference_demonstrations_never_hold_an_eval_problem_and_earn_the_reward(tmp_path, env):
    # overlapping splits on purpose: train[:24] holds the 16 eval problems test[:16]
    splits = ["dataset.train_split=train[:24]", "dataset.eval_split=test[:16]", "sft.num_agents=2"]
    task = build_env_task(env, splits)
    demonstrations = reference_demonstrations(task)
    eval_ids = {p.task_id for p in task.eval_items}
    assert [d.source for d in demonstrations] == [f"Coop/{i}" for i in range(16, 24)]
    assert not eval_ids & {d.source for d in demonstrations}
    items = [next(p for p in task.train_items if p.task_id == d.source) for d in demonstrations]
    for item, d in zip(items, demonstrations):
        assert d.prompts[0] == task.first_prompts(item)[0]
    scores = task.score(items, [d.completions for d in demonstrations])
    # the demonstrations solve their problems; the tester's asserts all hold on every correct code (a rejected one
    # would cost -1) and are paid for the reference's wrong mutants they reject (rewards/mutants.py; issue 34)
    full = {"code": 4.0, "planner_coder": 2.1, "coder_tester": 2.1}[env]
    if env == "coder_tester":
        assert [s.metrics["coder_reward"] for s in scores] == [full] * len(items)
        assert all(s.metrics["tests_valid"] == 1.0 and s.metrics["tests_written"] >= 3 for s in scores)
        # since issue 42 asserts that only call the prompt's own examples earn nothing (the typed junk answers them):
        # the references of Coop/18 and Coop/20 kill no mutant beyond those (0.067 and 0.1 before) and earn 0
        rewards = [round(s.metrics["tester_reward"], 6) for s in scores]
        assert rewards == [0.12, 0.25, 0.0, 0.6, 0.0, 0.1, 0.25, 0.3]
        assert [s.total for s in scores] == [round(full + s.metrics["tester_reward"], 6) for s in scores]
    else:
        assert [s.total for s in scores] == [full] * len(items)
    if env == "planner_coder":   # the coder's prompt holds the demonstrated plan, as in a rollout
        assert all("    # Plan:\n    # 1. " in d.prompts[1] for d in demonstrations)


def build_env_task(env: str, overrides: list[str]):
    if env == "code":
        return build_code_task(Run.of(load_config(None, overrides), "sft"))
    if env == "planner_coder":
        from envs.planner_coder.config import PlannerCoderConfig
        from envs.planner_coder.task import build_planner_coder_task
        return build_planner_coder_task(Run.of(load_config(None, overrides, task_config=PlannerCoderConfig), "sft"))
    from envs.coder_tester.config import CoderTesterConfig
    from envs.coder_tester.task import build_coder_tester_task
    return build_coder_tester_task(Run.of(load_config(None, overrides, task_config=CoderTesterConfig), "sft"))


def test_humaneval_planner_demonstrations_come_from_the_canonical_solution():
    from envs.code_generation.data import load_problems
    from envs.planner_coder.demonstrations import planner_coder_demonstrations
    problem = load_problems({"name": "humaneval"}, "test[2:3]")[0]   # truncate_number: return number % 1.0
    plan, code = planner_coder_demonstrations(problem)
    assert plan == " Return `number % 1.0`.\n"
    assert code == "    return number % 1.0\n"


# ------------------------------------------------------------------------------------------ the bench and the demo
def write_run(folder: Path, lines: list[dict]) -> None:
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))


def test_learning_table_rows_for_sft_and_its_rl_run_keep_the_earlier_rows(tmp_path, monkeypatch):
    import bench.learning as learning
    monkeypatch.setattr(learning, "OUT", tmp_path)
    (tmp_path / "results.md").write_text(learning.table([]) + "| magrpo | 16 | 0.4 → 1.0 | 0.4 → 1.5 | 0.09 | 0.000 | "
                                         "0.000 | 11.5 | 2766 |\n")
    write_run(tmp_path / "sft", [{"step": 1, "nll_mean": 2.0}, {"step": 2, "nll_mean": 1.0},
                                 {"step": 2, "eval/turn_1/reward_mean": 2.5, "eval/turn_1/pass_rate": 0.2,
                                  "eval/turn_1/calls_aux": 0.75, "eval/turn_1/uses_aux": 0.5}])
    train = [{"step": s, "turn_1/reward_mean": float(s), "turn_1/calls_aux": s / 4, "turn_1/uses_aux": 0.25,
              "agent_0/grad_norm": float(s > 1), "agent_1/grad_norm": float(s > 2)} for s in range(1, 5)]
    # (no evaluation at step 0: its start policy is the SFT run's last, evaluated there)
    write_run(tmp_path / "sft+magrpo", [*train,
                                        {"step": 4, "eval/turn_1/reward_mean": 3.0, "eval/turn_1/pass_rate": 0.3}])
    text = learning.report(["sft", "sft+magrpo"])
    rows = text.splitlines()[2:]
    assert [r.split("|")[1].strip() for r in rows] == ["magrpo", "sft", "sft+magrpo"]   # ROWS order, magrpo kept
    assert rows[0].startswith("| magrpo | 16 | – | 0.4 → 1.0")   # a row without the nonzero-updates column: – there
    # SFT: its steps, no training reward, its last evaluation's aux figures
    assert rows[1] == "| sft | 2 | – | – → – | – → 2.500 | 0.200 | 0.750 | 0.500 | – | – |"
    # RL from SFT: the last quarter (one step of four) of training
    # (5 of its 8 agent updates had a gradient)
    assert rows[2] == "| sft+magrpo | 4 | 0.62 | 1.000 → 4.000 | 2.500 → 3.000 | 0.300 | 1.000 | 0.250 | – | – |"


def test_the_demo_verdict_holds_only_when_every_claim_does(tmp_path):
    from bench.demo_coop import verdict
    def evaluation(step, reward, calls, uses, bonus):
        return {"step": step, "eval/turn_1/reward_mean": reward, "eval/turn_1/calls_aux": calls,
                "eval/turn_1/uses_aux": uses, "eval/turn_1/cooperation_bonus": bonus, "eval/turn_1/pass_rate": 0.1}
    write_run(tmp_path / "good", [evaluation(0, 2.0, 0.8, 0.3, 0.4), evaluation(16, 2.4, 0.9, 0.5, 0.6)])
    # an RL run started from an SFT run (the verdict compares the two; a run without init_from is refused)
    started = f"agent_model:\n  init_from: {tmp_path / 'sft'}\n"
    (tmp_path / "good" / "config.yaml").write_text(started)
    text, held = verdict(tmp_path / "good")
    assert held and "calls_aux          0.800 -> 0.900" in text
    write_run(tmp_path / "worse", [evaluation(0, 2.0, 0.8, 0.3, 0.4), evaluation(16, 1.9, 0.9, 0.5, 0.6)])
    (tmp_path / "worse" / "config.yaml").write_text(started)
    text, held = verdict(tmp_path / "worse")
    assert not held and "NO   eval reward after RL above after SFT" in text


def test_the_demo_verdict_takes_the_sft_runs_last_evaluation_when_rl_skipped_its_own(tmp_path):
    from bench.demo_coop import verdict
    write_run(tmp_path / "sft", [{"step": 18, "eval/turn_1/reward_mean": 2.0, "eval/turn_1/calls_aux": 0.8,
                                  "eval/turn_1/uses_aux": 0.3, "eval/turn_1/cooperation_bonus": 0.4,
                                  "eval/turn_1/pass_rate": 0.1}])
    write_run(tmp_path / "rl", [{"step": 16, "eval/turn_1/reward_mean": 1.5, "eval/turn_1/calls_aux": 0.9,
                                 "eval/turn_1/uses_aux": 0.5, "eval/turn_1/cooperation_bonus": 0.6,
                                 "eval/turn_1/pass_rate": 0.1}])
    (tmp_path / "rl" / "config.yaml").write_text(f"agent_model:\n  init_from: {tmp_path / 'sft'}\n")
    text, held = verdict(tmp_path / "rl")
    assert "reward_mean        2.000 -> 1.500" in text and not held
