"""Scaling out (issue 16): models on devices and parallel_training mp (one process), data-parallel training under
torchrun (parallel_training ddp, gloo on CPU, through the real command line)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cooprl.config import ConfigError, Run, load_config, model_devices
from cooprl.models.loading import TINY_RANDOM
from cooprl.trainers.loop import seed_everything, train_loop
from cooprl.trainers.magrpo import build_magrpo
from tests.scripted import read_metrics, scripted_task
from tests.environment import child_env

ROOT = Path(__file__).resolve().parents[3]
TORCHRUN = Path(sys.executable).with_name("torchrun")


# ---------------------------------------------------------------------------------------------- config rules
@pytest.mark.parametrize("override,message", [
    (["marlhf.parallel_training=ddp", "marlhf.num_turns=2"], "set marlhf.update_schedule=items"),   # default: nodes
    (["madpo.parallel_training=ddp", "madpo.train_batch_size=4"], "madpo.train_batch_size=null and madpo.rollout_"),
    (["madpo_iter.parallel_training=ddp", "madpo_iter.log_reward_distribution=true"],
     "madpo_iter.log_reward_distribution: not with parallel_training ddp"),
    ("madpo.parallel_training=mp", "madpo.parallel_training: mp is supported by magrpo, grpo"),
    ("magrpo.parallel_training=ddp", "set magrpo.update_schedule=items"),   # default: nodes, 2 turns
    ("magrpo.agent_devices=[cuda:0, gpu1]", "magrpo.agent_devices: 'gpu1' is not a device"),
    ("magrpo.agent_devices=[]", "magrpo.agent_devices: an empty list"),
    ("marlhf.reward_model_device=[cpu, cuda:0]", "marlhf.reward_model_device: expected str"),
])
def test_parallel_and_device_rules_are_config_errors(override, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[")):
        load_config(None, override if isinstance(override, list) else [override])


def test_ddp_refuses_several_agent_devices():
    with pytest.raises(ConfigError, match="magrpo.agent_devices: ddp places a process's models"):
        load_config(None, ["magrpo.parallel_training=ddp", "magrpo.update_schedule=items",
                           "magrpo.agent_devices=[cuda:0, cuda:1]"])


def test_model_devices_one_for_all_or_one_per_model():
    config = load_config(None, ["magrpo.agent_devices=[cuda:0, cuda:1]", "iac.critic_devices=cuda:1"])
    assert model_devices(config.magrpo.agent_devices, "agent_devices", 2, "cpu") == ["cuda:0", "cuda:1"]
    assert model_devices(config.iac.critic_devices, "critic_devices", 3, "cpu") == ["cuda:1"] * 3
    assert model_devices(config.iac.agent_devices, "agent_devices", 2, "cpu") == ["cpu", "cpu"]   # null: the fallback
    assert model_devices(load_config(None, ["iac.critic_devices=[cuda:0, cuda:0]"]).iac.critic_devices,
                         "critic_devices", 1, "cpu") == ["cuda:0"]   # upstream's list naming one device: one for all
    with pytest.raises(ConfigError, match="agent_devices: 2 devices given for 3 model"):
        model_devices(config.magrpo.agent_devices, "agent_devices", 3, "cpu")


def test_several_processes_without_ddp_are_a_config_error(monkeypatch):
    from cooprl.train import join_processes
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConfigError, match="magrpo.parallel_training: none, but 2 processes were launched"):
        join_processes(Run.of(load_config(None, []), "magrpo"))


@pytest.mark.parametrize("trainer,mode", [("magrpo", "ddp"), ("iac", "fsdp"), ("madpo", "ddp")])
def test_data_parallel_without_a_launcher_is_a_config_error(monkeypatch, trainer, mode):
    # `accelerate launch` without --multi_gpu (or plain python) started one process, which trained alone without a word
    from cooprl.train import join_processes
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    extra = {"magrpo": ["magrpo.update_schedule=items"], "madpo": [],
             "iac": ["iac.update_schedule=episodes", "iac.train_batch_size=null"]}[trainer]
    run = Run.of(load_config(None, [f"{trainer}.parallel_training={mode}", *extra]), trainer)
    with pytest.raises(ConfigError, match=f"{trainer}.parallel_training: {mode}, but no launcher started this "
                                          f"process .* python -m cooprl.parallel.torchrun --nproc_per_node=N "
                                          f"train_{trainer}.py .*{trainer}.parallel_training=none"):
        join_processes(run)
    monkeypatch.setenv("WORLD_SIZE", "1")   # torchrun --nproc_per_node=1: one process, as asked
    assert not join_processes(run).data_parallel


# ---------------------------------------------------------------------------------------------- devices and mp
def run_magrpo(tmp_path: Path, name: str, overrides: list[str]):
    config = load_config(None, [
        f"agent_model.name={TINY_RANDOM}", "agent_model.device=cpu", "magrpo.max_new_tokens=6", "magrpo.max_steps=2",
        "magrpo.num_generations=2", "magrpo.num_turns=2", "magrpo.learning_rate=1e-2", "magrpo.eval_interval=0",
        "magrpo.eval_num_samples=1", "wandb.mode=disabled", f"output.base_dir={tmp_path}", f"output.run_name={name}",
        "agent_model.temperature=1.0", "agent_model.top_p=1.0", "magrpo.rollout_buffer_size=1", *overrides])
    seed_everything(config.seed)
    task = scripted_task()
    algorithm = build_magrpo(Run.of(config, "magrpo"), task)
    train_loop(Run.of(config, "magrpo"), task, algorithm, tmp_path / name)
    return algorithm, read_metrics(tmp_path / name)


@pytest.fixture
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_agents_go_to_the_devices_named(one_thread):
    from cooprl.trainers.team import build_team
    config = load_config(None, [f"agent_model.name={TINY_RANDOM}", "agent_model.device=cuda:7",
                                "magrpo.agent_devices=[cpu, cpu]", "magrpo.parallel_training=mp"])
    team = build_team(Run.of(config, "magrpo"), 2)   # agent_model.device (cuda:7) is overridden per agent
    assert [str(agent.model.device) for agent in team] == ["cpu", "cpu"]
    assert [str(agent.model.device) for agent in build_team(Run.of(config, "magrpo"), 1)] == ["cpu"]   # [cpu, cpu]: one
    config = load_config(None, [f"agent_model.name={TINY_RANDOM}", "magrpo.agent_devices=[cpu, cuda:0]"])
    with pytest.raises(ConfigError, match="agent_devices: 2 devices given for 3 model"):
        build_team(Run.of(config, "magrpo"), 3)   # before any model is loaded


@pytest.mark.slow
@pytest.mark.parametrize("schedule", [["magrpo.update_schedule=nodes"], ["magrpo.update_schedule=items"]])
def test_mp_gives_the_numbers_of_none(tmp_path, one_thread, schedule):
    plain, plain_events = run_magrpo(tmp_path, "none", schedule)
    mp, mp_events = run_magrpo(tmp_path, "mp", ["magrpo.parallel_training=mp", "magrpo.agent_devices=[cpu, cpu]",
                                                *schedule])
    assert mp.runner.concurrent and mp.runner.concurrent_updates and not mp.runner.concurrent_sampling   # CPU: shared
    assert any("agent_1/loss" in e for e in plain_events)   # the agents were updated
    assert mp_events == plain_events
    for m1, m2 in zip(plain.models, mp.models):
        for (n1, p1), (_, p2) in zip(m1.named_parameters(), m2.named_parameters()):
            assert torch.equal(p1, p2), n1


# ---------------------------------------------------------------------------------------------- ddp end to end
# Adam's first steps move a parameter by lr x g / |g|: where a gradient is ~0, the last bits of a sum taken in another
# order (two ranks' halves vs one backward) flip that ratio, so weights agree to about lr. lr 1e-4 keeps them within
# 1e-5 while 2 steps still move every trained weight by ~1e-4. advantage_mode raw without normalization: the tiny
# random model scores 0 everywhere, and a raw advantage (the processed reward, -4) still trains.
DDP_OVERRIDES = [
    "agent_model.name=offline:tiny-random", "agent_model.device=cpu", "agent_model.torch_dtype=float32",
    "dataset.name=coop", "dataset.type=coophumaneval", "dataset.train_split=train[16:]", "dataset.eval_split=test[:1]",
    "wandb.mode=disabled", "magrpo.num_generations=2", "magrpo.max_new_tokens=8", "magrpo.eval_num_samples=1",
    "magrpo.eval_interval=0", "magrpo.eval_at_start=false", "magrpo.num_turns=1", "magrpo.parallel_training=ddp",
    "magrpo.update_schedule=items", "magrpo.learning_rate=1e-4", "magrpo.advantage_mode=raw",
    "magrpo.advantage_normalization=false"]


# IAC: one turn, update_schedule episodes with one optimizer step per model per update (what ddp needs), a separate
# critic per agent; raw advantages (target - value) so that no per-rank normalization enters
IAC_DDP_OVERRIDES = [
    *[o for o in DDP_OVERRIDES if not o.startswith("magrpo.")], "iac.num_generations=2", "iac.max_new_tokens=8",
    "iac.eval_num_samples=1", "iac.eval_interval=0", "iac.eval_at_start=false", "iac.num_turns=1",
    "iac.parallel_training=ddp", "iac.update_schedule=episodes", "iac.train_batch_size=null", "iac.learning_rate=1e-4",
    "iac.critic_learning_rate=1e-4", "iac.advantage_normalization=false", "iac.use_separate_critic=true"]


ACCELERATE = Path(sys.executable).with_name("accelerate")


def launch(tmp_path: Path, name: str, processes: int, overrides: list[str], trainer: str = "magrpo",
           base: list[str] = DDP_OVERRIDES, launcher: str = "torchrun") -> subprocess.CompletedProcess:
    env = child_env(OMP_NUM_THREADS="1", WANDB_MODE="disabled")
    command = [str(TORCHRUN), "--standalone", f"--nproc_per_node={processes}"] if processes > 1 else [sys.executable]
    env.update({} if processes > 1 else {"WORLD_SIZE": "1"})   # as torchrun starts one (plain python: refused)
    if launcher == "accelerate":   # --multi_gpu: accelerate's torch.distributed launcher (on CPU too, with gloo)
        command = [str(ACCELERATE), "launch", "--multi_gpu", f"--num_processes={processes}", "--num_machines=1",
                   "--mixed_precision=no", "--dynamo_backend=no", f"--main_process_port={29600 + len(name)}"]
    args = [f"train_{trainer}.py", "--config", f"configs/{trainer}_che_config.yaml", "--override", *base,
            f"output.base_dir={tmp_path}", f"output.run_name={name}", *overrides]
    result = subprocess.run(command + args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def agent_weights(checkpoint: Path, agent: int) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file
    return load_file(next((checkpoint / f"agent_{agent}").glob("*.safetensors")))


def update_events(run_dir: Path) -> list[dict]:
    return [e for e in read_metrics(run_dir) if "agent_0/loss" in e]


@pytest.mark.distributed
@pytest.mark.skipif(not TORCHRUN.exists(), reason="torchrun is not in the interpreter's folder")
def test_two_processes_of_one_item_equal_one_process_of_two_items(tmp_path):
    # the same global batch: 2 ranks x 1 item per optimizer step (2 steps) vs 1 process x 2 items (4 steps); the
    # evaluation before the first step rolls out 3 batches of one problem: rank 0 takes batches 0 and 2, rank 1 batch 1.
    # DDP_OVERRIDES' 8 new tokens (24 before): the tiny random model's step-0 evaluation scores the same (every metric
    # 0, 3 nodes) at 8 and at 24 tokens, and training equality needs no length
    sharded_eval = ["magrpo.eval_at_start=true", "dataset.eval_split=test[:3]", "magrpo.eval_num_samples=3",
                    "magrpo.eval_batch_size=1", "magrpo.eval_num_generations=2"]
    two = launch(tmp_path, "two", 2, ["magrpo.rollout_buffer_size=1", "magrpo.max_steps=2", *sharded_eval])
    launch(tmp_path, "one", 1, ["magrpo.rollout_buffer_size=2", "magrpo.max_steps=4", *sharded_eval])
    assert two.stdout.count("Summary of") == 1   # rank 0 alone prints the summary
    assert "evaluating at step 0 on 3 problems x 2 samples over 2 processes" in two.stderr
    first_evals = [[e for e in map(json.loads, (tmp_path / name / "metrics.jsonl").read_text().splitlines())
                    if e["step"] == 0 and "eval/turn_1/reward_mean" in e][0] for name in ("two", "one")]
    assert {k: v for k, v in first_evals[0].items() if k.startswith("eval/")} == \
        {k: v for k, v in first_evals[1].items() if k.startswith("eval/")}
    for agent in (0, 1):
        a = agent_weights(tmp_path / "two/checkpoints/checkpoint-2", agent)
        b = agent_weights(tmp_path / "one/checkpoints/checkpoint-4", agent)
        assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-5
    two_updates, one_updates = update_events(tmp_path / "two"), update_events(tmp_path / "one")
    assert [e["step"] for e in two_updates] == [1, 2] and [e["step"] for e in one_updates] == [2, 4]
    assert [e["env_step"] for e in two_updates] == [e["env_step"] for e in one_updates] == [4, 8]
    for x, y in zip(two_updates, one_updates):   # the ranks' mean loss and the averaged gradient's norm
        for key in ("agent_0/loss", "agent_1/loss", "agent_0/grad_norm", "agent_1/grad_norm",
                    "agent_0/trained_samples"):
            assert x[key] == pytest.approx(y[key], rel=1e-5), key
        assert x["agent_0/grad_norm"] > 0


def model_weights(checkpoint: Path) -> dict[str, dict[str, torch.Tensor]]:
    """Return every saved model's tensors in a checkpoint folder, by the model's folder name."""
    from safetensors.torch import load_file
    return {folder.name: {k: v for f in folder.glob("*.safetensors") for k, v in load_file(f).items()}
            for folder in sorted(checkpoint.iterdir()) if folder.is_dir() and any(folder.glob("*.safetensors"))}


def assert_same_models(a: dict[str, dict[str, torch.Tensor]], b: dict[str, dict[str, torch.Tensor]],
                       tolerance: float) -> None:
    """Assert that two checkpoints' models (`model_weights`) hold the same tensors, each within `tolerance`."""
    assert sorted(a) == sorted(b), (sorted(a), sorted(b))
    for name in a:
        assert sorted(a[name]) == sorted(b[name]), name
        assert max((a[name][k] - b[name][k]).abs().max().item() for k in a[name]) < tolerance, name


@pytest.mark.distributed
@pytest.mark.skipif(not TORCHRUN.exists(), reason="torchrun is not in the interpreter's folder")
@pytest.mark.parametrize("mode", ["fsdp"])   # sharded actors, replicated critics: both syncs of the engine
def test_iac_two_processes_of_one_item_equal_one_process_of_two_items(tmp_path, mode):
    # one update per 2 items either way: 2 ranks x 2 episodes (2 steps) vs 1 process x 4 episodes (4 steps); the actors
    # and the separate critics take the ranks' sample-weighted mean gradient (fsdp: sharded actors, replicated critics)
    launch(tmp_path, "two", 2, ["iac.rollout_buffer_size=2", "iac.max_steps=2", f"iac.parallel_training={mode}"], "iac",
           IAC_DDP_OVERRIDES)
    launch(tmp_path, "one", 1, ["iac.rollout_buffer_size=4", "iac.max_steps=4"], "iac", IAC_DDP_OVERRIDES)
    two = model_weights(tmp_path / "two/checkpoints/checkpoint-2")
    one = model_weights(tmp_path / "one/checkpoints/checkpoint-4")
    assert len(two) == 4, sorted(two)   # two actors, two critics
    # The equality is on the gradients: every model's averaged gradient (its norm) and loss at every update. The
    # weights cannot carry it: Adam's sign-like first steps (see above), on advantages that pass through the critic's
    # values computed in batches of 2 rows on each rank and of 4 in one process, turn last-bit differences of a ~0
    # gradient into up to 2 lr per step (measured 5.8e-5 on a fresh machine), so they are held to that bound only.
    assert_same_models(two, one, 2 * 2 * 1e-4)
    two_updates, one_updates = update_events(tmp_path / "two"), update_events(tmp_path / "one")
    assert [e["step"] for e in two_updates] == [1, 2] and [e["step"] for e in one_updates] == [2, 4]
    for x, y in zip(two_updates, one_updates):
        for key in ("agent_0/grad_norm", "agent_1/grad_norm", "critic_0/grad_norm", "critic_1/grad_norm",
                    "agent_0/loss", "agent_1/loss", "critic_0/value_loss", "critic_1/value_loss"):
            assert x[key] == pytest.approx(y[key], rel=1e-4), key
            assert x[key] != 0, key


def test_ddp_actor_critic_needs_one_step_per_update():
    for bad in (["iac.update_schedule=turns"], ["iac.update_schedule=episodes", "iac.train_batch_size=2"]):
        with pytest.raises(ConfigError, match="update_schedule=episodes and iac.train_batch_size=null"):
            load_config(None, ["iac.parallel_training=ddp", *bad])
    load_config(None, ["iac.parallel_training=ddp", "iac.update_schedule=episodes", "iac.train_batch_size=null"])


# MADPO under ddp, on the learnable lowercase task (every candidate's reward differs, so every item has pairs) with
# the character-level model, full fine-tuning: a step's pairs are its items' pairs whichever process sampled them, and
# its DPO step is one step on all of them
def learnable_launch(tmp_path: Path, trainer: str, name: str, processes: int, *overrides: str) -> Path:
    from tests.learnable import build_char_model
    model = tmp_path / "char"
    if not model.is_dir():
        build_char_model(model)
    config = tmp_path / "base.yaml"
    config.write_text("wandb: {mode: disabled}\n")
    env = child_env(OMP_NUM_THREADS="1")
    command = [str(TORCHRUN), "--standalone", f"--nproc_per_node={processes}"] if processes > 1 else [sys.executable]
    env.update({} if processes > 1 else {"WORLD_SIZE": "1"})   # as torchrun starts one (plain python: refused)
    t = trainer
    args = ["tests/cooprl/parallel/ddp_learnable_main.py", t, "--config", str(config), "--override",
            f"agent_model.name={model}", "agent_model.device=cpu", "agent_model.torch_dtype=float32",
            "agent_model.temperature=1.0", "agent_model.top_p=1.0", f"{t}.num_agents=2", f"{t}.num_turns=1",
            f"{t}.max_new_tokens=6", f"{t}.preference_num_candidates=4", f"{t}.preference_pairs_per_sample=2",
            f"{t}.pair_selection=reward_gap", f"{t}.parallel_training=ddp", f"{t}.eval_interval=0",
            f"{t}.eval_at_start=false", f"{t}.eval_num_samples=1", f"{t}.max_grad_norm=null",
            f"output.base_dir={tmp_path}", f"output.run_name={name}", *overrides]
    result = subprocess.run(command + args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return tmp_path / name


@pytest.mark.distributed
@pytest.mark.skipif(not TORCHRUN.exists(), reason="torchrun is not in the interpreter's folder")
# the two collections are two code paths (online: each process pairs its own item and every process gathers them;
# offline: the collection's chunks run seeded over the processes); the ddp and fsdp DPO steps are one engine step,
# proved against one process in tests/cooprl/update/test_engine_distributed.py, so each collection runs under one of
# them
@pytest.mark.parametrize("collection,mode", [("online", "ddp"), ("offline", "fsdp")])
def test_madpo_two_processes_train_one_step_on_both_items_pairs(tmp_path, collection, mode):
    from cooprl.config import load_config
    from cooprl.preferences.pairs import read_pairs
    from cooprl.trainers.loop import seed_everything
    from cooprl.trainers.madpo import build_madpo
    from tests.learnable import lowercase_task

    common = [f"madpo.pair_collection={collection}", "madpo.train_batch_size=null", "madpo.rollout_buffer_size=null"]
    two = learnable_launch(tmp_path, "madpo", "two", 2, *common, "madpo.max_steps=1", "madpo.learning_rate=1e-4",
                           f"madpo.parallel_training={mode}")
    # one process, learning rate 0: its 2 steps sample the same 2 items with the start weights, as the 2 ranks did
    one = learnable_launch(tmp_path, "madpo", "one", 1, *common, "madpo.max_steps=2", "madpo.learning_rate=0.0")
    pairs = read_pairs(two / "preferences" / "iteration_0.jsonl")
    reference = read_pairs(one / "preferences" / "iteration_0.jsonl")

    def key(p):
        return p.item_id, p.chosen, p.rejected, p.chosen_reward, p.rejected_reward
    assert len(pairs) == 4 and len({p.item_id for p in pairs}) == 2   # 2 pairs of each rank's item
    assert [key(p) for p in pairs] == [key(p) for p in reference]

    # rank 0 saved the step's weights: one DPO step of one process on all 4 pairs, from the same start
    config = load_config(None, [f"agent_model.name={tmp_path / 'char'}", "agent_model.device=cpu",
                                "agent_model.torch_dtype=float32", "madpo.num_agents=2", "madpo.num_turns=1",
                                "madpo.max_new_tokens=6", "madpo.learning_rate=1e-4", "madpo.max_grad_norm=null",
                                "wandb.mode=disabled"])
    seed_everything(config.seed)
    algorithm = build_madpo(Run.of(config, "madpo"), lowercase_task(2, items=4))
    algorithm.update(pairs, [1.0] * len(pairs))
    saved = model_weights(two / "checkpoints" / "checkpoint-1")
    assert sorted(saved) == ["agent_0", "agent_1"]
    for i, agent in enumerate(algorithm.team):
        ours = agent.model.state_dict()
        moved = max(
            (saved[f"agent_{i}"][k] - agent.model.state_dict()[k]).abs().max().item() for k in saved[f"agent_{i}"]
        )
        # Adam's first step is lr x g / |g|: where a gradient is ~0, the sharded reduction's other summation order
        # moves a weight by a fraction of lr (fsdp, a fresh install on 2026-12-06: 4.1e-6 of lr 1e-4; 1e-6 before)
        assert moved < 1e-5, (i, moved)
        assert any(not torch.equal(ours[k], v) for k, v in model_weights(one / "checkpoints" / "checkpoint-2")[
            f"agent_{i}"].items())   # the step did move the weights (lr 0 left the reference's at the start)


@pytest.mark.distributed
@pytest.mark.skipif(not TORCHRUN.exists(), reason="torchrun is not in the interpreter's folder")
@pytest.mark.parametrize("mode", ["fsdp"])   # sharded policies gathered for the collection, a replicated reward model
def test_marlhf_two_processes_of_one_item_equal_one_process_of_two_items(tmp_path, mode):
    # the pairs (collected before the first step, split over the processes), the reward model trained on them, and the
    # RL step (MAGRPO on the learned reward: 2 ranks x 1 item vs 1 process x 2 items; raw advantages, no per-rank
    # normalization) all come out as in one process; under fsdp the policies are sharded (gathered for the collection,
    # where the processes sample different numbers of chunks) and the reward model is replicated
    from cooprl.preferences.pairs import read_pairs
    common = ["marlhf.num_generations=2", "marlhf.update_schedule=items", "marlhf.learning_rate=1e-4",
              "marlhf.advantage_mode=raw", "marlhf.advantage_normalization=false", "marlhf.reward_model_epochs=2",
              "marlhf.reward_model_learning_rate=1e-3"]
    two = learnable_launch(tmp_path, "marlhf", "two", 2, *common, "marlhf.max_steps=1", "marlhf.rollout_buffer_size=1",
                           f"marlhf.parallel_training={mode}")
    one = learnable_launch(tmp_path, "marlhf", "one", 1, *common, "marlhf.max_steps=2", "marlhf.rollout_buffer_size=2")
    pairs = read_pairs(two / "preferences" / "iteration_0.jsonl")
    assert len(pairs) == 4 and pairs == read_pairs(one / "preferences" / "iteration_0.jsonl")
    a, b = model_weights(two / "checkpoints" / "checkpoint-1"), model_weights(one / "checkpoints" / "checkpoint-2")
    assert sorted(a) == ["agent_0", "agent_1", "agent_2"]   # the two policies, the reward model
    assert_same_models(a, b, 1e-5)


def test_marlhf_checks_its_rl_algorithms_ddp_rules():
    from cooprl.trainers.marlhf import build_marlhf
    from tests.learnable import lowercase_task
    config = load_config(None, ["marlhf.parallel_training=ddp", "marlhf.rl_algorithm=iac"])   # iac: turns schedule
    with pytest.raises(ConfigError, match="set iac.update_schedule=episodes"):
        build_marlhf(Run.of(config, "marlhf"), lowercase_task(2))   # before any model is loaded
