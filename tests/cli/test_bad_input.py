"""Bad input gets one clear `error:` line and exit status 2, never a traceback; resume never runs code (issue 13).

The command line is called in-process (`envs.launch.train_main`, what every train_*.py script runs, and
`evaluate.main`), except for the YAML alias bomb, which runs in a child process with a memory limit.
"""

import evaluate  # noqa: I001 (first: evaluate.py must catch every user error whatever is imported after it)

import gzip
import hashlib
import json
import logging
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from cooprl import checkpoint as ckpt
from cooprl.config import Run, load_config
from cooprl.samples import TrainSample, NodeGroup
from cooprl.trainers.loop import seed_everything, train_loop
from cooprl.trainers.magrpo import build_magrpo
from envs.launch import train_main
from tests.scripted import scripted_task

ROOT = Path(__file__).resolve().parents[2]
BASE = """\
agent_model: {name: "offline:tiny-random", device: cpu, torch_dtype: float32}
dataset: {name: coop, type: coophumaneval, train_split: "train[16:]", eval_split: "test[:1]"}
wandb: {mode: disabled}
magrpo: {max_steps: 2, num_generations: 2, max_new_tokens: 4, num_turns: 1, eval_interval: 0, eval_num_samples: 1,
         rollout_buffer_size: 2, learning_rate: 0.01}
checkpoint: {checkpoint_interval: 1}
"""


def base_config(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "base.yaml"
    path.write_text(BASE + f"output: {{base_dir: {json.dumps(str(folder))}, run_name: run}}\n", encoding="utf-8")
    return path


def cli(capsys, config: Path | str, *overrides: str) -> tuple[int, str]:
    """Run train_magrpo.py's command line in-process; return (exit status, stderr)."""
    capsys.readouterr()
    code = train_main("magrpo", ["--config", str(config), "--override", *overrides])
    return code, capsys.readouterr().err


def evaluate_cli(capsys, config: Path, checkpoint: Path, *overrides: str) -> tuple[int, str]:
    capsys.readouterr()
    code = evaluate.main(["--config", str(config), "--checkpoint", str(checkpoint), "--trainer", "magrpo",
                          "--override", *overrides])
    return code, capsys.readouterr().err


def assert_one_error(code: int, err: str, *fragments: str) -> str:
    """Check exit status 2 and exactly one `error:` line holding every fragment, no traceback; return the line."""
    assert "Traceback" not in err, err[-3000:]
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert code == 2 and len(lines) == 1, err[-3000:]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


# ------------------------------------------------------------------------------------------------ configs
def test_binary_config_file(tmp_path, capsys):
    path = tmp_path / "binary.yaml"
    path.write_bytes(bytes(range(256)) * 8)
    assert_one_error(*cli(capsys, path), "config file", "binary.yaml", "is not UTF-8 text")


@pytest.mark.parametrize("text", ["", "\n", "# magrpo:\n#   max_steps: 2\n"], ids=["empty", "blank", "comments"])
def test_empty_config_file(tmp_path, capsys, text):
    # it trained with every default (a full epoch of the reference trainer), without a word
    path = tmp_path / "empty.yaml"
    path.write_text(text, encoding="utf-8")
    missing = "agent_model.name=/no/such/model"   # what would load after the file: the error must come first
    assert_one_error(*cli(capsys, path, missing), "empty.yaml", "is empty")
    assert evaluate.main(["--config", str(path), "--override", missing]) == 2
    assert_one_error(2, capsys.readouterr().err, "empty.yaml", "is empty")


def test_utf16_config_file(tmp_path, capsys):
    path = tmp_path / "utf16.yaml"
    path.write_text(BASE, encoding="utf-16")
    assert_one_error(*cli(capsys, path), "utf16.yaml", "is not UTF-8 text", "UTF-16")


def test_invalid_utf8_config_file(tmp_path, capsys):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("seed: 3  # café\n".encode("latin-1"))
    assert_one_error(*cli(capsys, path), "latin1.yaml", "is not UTF-8 text")


def billion_laughs() -> str:
    """Return a YAML document of ~400 bytes whose aliases expand to 9**9 (~4e8) strings."""
    lines = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi"):
        lines.append(f"{name}: &{name} [{', '.join(['*' + prev] * 9)}]")
    return "\n".join(lines) + "\n"


def run_limited(args: list[str]) -> subprocess.CompletedProcess:
    """Run the command line in a child limited to 1 GiB of address space and 60 s (the bomb used to eat all
    memory: the limit turns that into a quick failure of this test instead of a stuck machine)."""
    code = ("import sys; from envs.launch import train_main; "
            "sys.exit(train_main('magrpo', sys.argv[1:] + ['--print-config']))")

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    try:
        return subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True,
                              timeout=60, preexec_fn=limit)
    except subprocess.TimeoutExpired:
        pytest.fail("the alias bomb was expanded (still running after 60 s)")


@pytest.mark.parametrize("where", ["file", "override"])
def test_yaml_alias_bomb_is_refused_without_printing_it(tmp_path, where):
    bomb = billion_laughs()
    assert len(bomb) < 600
    if where == "file":
        path = tmp_path / "bomb.yaml"
        path.write_text(bomb + "seed: *i\nagent_model: {lora: {target_modules: *i}}\n", encoding="utf-8")
        result = run_limited(["--config", str(path)])
    else:
        flow = "[" + ", ".join(line.split(": ", 1)[1] for line in bomb.splitlines()) + "]"
        result = run_limited(["--config", str(base_config(tmp_path)), "--override", f"magrpo.eval_pass_k={flow}"])
    line = assert_one_error(result.returncode, result.stderr, "refused")
    assert "expand to more than" in line or "aliases" in line
    assert result.stderr.count("lol") <= 9 and len(result.stderr) < 2000  # never an expanded value


# every command line reads its config once, through the hardened reader (issue 27 section 4: the environment
# sniffing of the train_*.py scripts read it with plain yaml first, so a binary or UTF-16 file was a traceback)
ENTRY_SCRIPTS = sorted(p.name for p in ROOT.glob("train_*.py")) + ["evaluate.py", "evaluate_strategy.py"]
SCRIPT_ARGS = {"evaluate_strategy.py": ["--strategy", "direct"]}


def run_script(name: str, argv: list[str], monkeypatch, capsys) -> tuple[int, str]:
    """Run the script `name` as `python name argv` does, in-process; return (exit status, stderr)."""
    import runpy
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "argv", [name, *SCRIPT_ARGS.get(name, []), *argv])
    capsys.readouterr()
    try:
        runpy.run_path(str(ROOT / name), run_name="__main__")
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
    return code, capsys.readouterr().err


def bad_config(kind: str, folder: Path) -> tuple[Path, tuple[str, ...]]:
    """Return (a config file of `kind`, the fragments its error line names)."""
    path = folder / f"{kind}.yaml"
    if kind == "binary":
        path.write_bytes(bytes(range(256)) * 8)
        return path, ("binary.yaml", "is not UTF-8 text", "binary data")
    if kind == "utf16":
        path.write_text(BASE, encoding="utf-16")
        return path, ("utf16.yaml", "is not UTF-8 text", "UTF-16")
    if kind == "huge":
        path.write_text("seed: 1\n" + "# padding\n" * 150_000, encoding="utf-8")
        return path, ("huge.yaml", "larger than 1 MiB")
    if kind == "bomb":
        path.write_text(billion_laughs() + "seed: *i\n", encoding="utf-8")
        return path, ("bomb.yaml", "refused", "expand to more than")
    return path, ("missing.yaml", "not found")   # kind == "missing": never written


@pytest.mark.parametrize("kind", ["binary", "utf16", "huge", "bomb", "missing"])
@pytest.mark.parametrize("script", ENTRY_SCRIPTS)
def test_every_command_line_reads_its_config_through_the_hardened_reader(script, kind, tmp_path, monkeypatch,
                                                                         capsys):
    path, fragments = bad_config(kind, tmp_path)
    assert_one_error(*run_script(script, ["--config", str(path)], monkeypatch, capsys), *fragments)


def test_resume_reads_the_run_config_through_the_hardened_reader(tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(BASE, encoding="utf-16")
    assert_one_error(*run_script("train_magrpo.py", ["--resume", str(run)], monkeypatch, capsys),
                     "config.yaml", "is not UTF-8 text", "UTF-16")


def test_the_default_configs_exist(monkeypatch):
    # evaluate.py and evaluate_strategy.py have a default config, as every train_*.py has
    import evaluate_strategy
    from envs.launch import default_config
    for name in ENTRY_SCRIPTS[:-2]:
        assert (ROOT / default_config(name.removeprefix("train_").removesuffix(".py"))).is_file(), name
    assert (ROOT / evaluate_strategy.DEFAULT_CONFIG).is_file()


@pytest.mark.slow
def test_deeply_nested_yaml(tmp_path, capsys):
    path = tmp_path / "deep.yaml"
    path.write_text("seed: " + "[" * 100_000 + "]" * 100_000 + "\n", encoding="utf-8")
    assert_one_error(*cli(capsys, path), "deep.yaml", "nested more than")


def test_recursive_alias(tmp_path, capsys):
    path = tmp_path / "loop.yaml"
    path.write_text("magrpo: {eval_pass_k: &x [1, *x]}\n", encoding="utf-8")
    assert_one_error(*cli(capsys, path), "loop.yaml", "recursive alias")


@pytest.mark.parametrize("seed", ["-1", str(2**32), str(2**80)])
def test_seed_out_of_range(tmp_path, capsys, seed):
    assert_one_error(*cli(capsys, base_config(tmp_path), f"seed={seed}"), "seed:", "out of range")


@pytest.mark.parametrize("override", [
    "magrpo.learning_rate=.nan", "magrpo.discount=.nan", "agent_model.temperature=.inf", "magrpo.temperature=inf",
    "reward_processor.shift=-.inf", "magrpo.early_termination_threshold=nan", "iac.value_clip_range=.nan",
    "agent_model.lora={dropout: .nan}",
])
def test_non_finite_float_override(tmp_path, capsys, override):
    key = override.split("=")[0] if "lora" not in override else "agent_model.lora.dropout"
    assert_one_error(*cli(capsys, base_config(tmp_path), override), f"{key}: expected a finite number")


def test_non_finite_float_in_file(tmp_path, capsys):
    path = tmp_path / "nan.yaml"
    path.write_text(BASE + "reward_processor: {scale_factor: .NaN}\n", encoding="utf-8")
    assert_one_error(*cli(capsys, path), "reward_processor.scale_factor: expected a finite number")


def test_huge_value_in_error_is_shortened(tmp_path, capsys):
    path = tmp_path / "long.yaml"
    path.write_text(BASE + "seed: " + json.dumps("x" * 100_000) + "\n", encoding="utf-8")
    line = assert_one_error(*cli(capsys, path), "seed: expected int")
    assert len(line) < 300


# ------------------------------------------------------------------------------------------------ datasets
def _binary(folder):
    path = folder / "binary.jsonl"
    path.write_bytes(b"\xff\xfe\x00\x81" * 64 + bytes(range(256)))
    return path, ("binary.jsonl", "not UTF-8 text")


def _fake_gz(folder):
    path = folder / "fake.jsonl.gz"
    path.write_text('{"task_id": "T/0"}\n', encoding="utf-8")
    return path, ("fake.jsonl.gz", "not a readable gzip file")


def _truncated_gz(folder):
    path = folder / "cut.jsonl.gz"
    data = gzip.compress(("".join(json.dumps({"task_id": f"T/{i}", "pad": "x" * 50}) + "\n" for i in range(200)))
                         .encode())
    path.write_bytes(data[:len(data) // 2])
    return path, ("cut.jsonl.gz", "not a readable gzip file")


def _directory(folder):
    path = folder / "problems.jsonl"
    path.mkdir()
    return path, ("problems.jsonl", "is a directory")


def _deep_json(folder):
    path = folder / "deep.json"
    path.write_text("[" * 200_000 + "]" * 200_000, encoding="utf-8")
    return path, ("deep.json", "nested too deeply")


def _deep_jsonl(folder):
    path = folder / "deep.jsonl"
    path.write_text('{"task_id": "T/0"}\n' + '{"a": ' * 200_000 + "1" + "}" * 200_000 + "\n", encoding="utf-8")
    return path, ("deep.jsonl:2", "nested too deeply")


def _lone_surrogate(folder):
    path = folder / "surrogate.jsonl"
    record = {"task_id": "T/0", "prompt": "def f(x):\n    '\ud800'\n", "entry_point": "f",
              "test": "def check(candidate):\n    assert candidate(1) == 1\n"}
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")  # json.dumps writes the "\ud800" escape
    return path, ("surrogate.jsonl[0]", "'prompt' holds a lone surrogate")


@pytest.mark.parametrize("make", [_binary, _fake_gz, _truncated_gz, _directory, _deep_json, _deep_jsonl,
                                  _lone_surrogate])
def test_bad_dataset_file(tmp_path, capsys, make):
    path, fragments = make(tmp_path)
    assert_one_error(*cli(capsys, base_config(tmp_path), f"dataset.path={path}"), *fragments)


# ------------------------------------------------------------------------------------------------ models
def test_model_path_that_does_not_exist(tmp_path, capsys):
    assert_one_error(*cli(capsys, base_config(tmp_path), f"agent_model.name={tmp_path / 'no-model'}"),
                     "no-model", "no such folder")


def test_model_folder_without_a_model(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert_one_error(*cli(capsys, base_config(tmp_path), f"agent_model.name={tmp_path / 'empty'}"),
                     "empty", "could not be loaded")


@pytest.mark.parametrize("overrides,fragments", [
    (["agent_model.share_base=true"], ["agent_model.share_base needs agent_model.lora"]),
    (["agent_model.share_base=true", "agent_model.lora={r: 4}", "agents=[offline:tiny-random, "
      "offline:smollm2-135m-instruct]"], ["agent_model.share_base", "different base models"]),
])
def test_agents_that_cannot_share_one_base(tmp_path, capsys, overrides, fragments):
    assert_one_error(*cli(capsys, base_config(tmp_path), *overrides), *fragments)


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_a_cuda_device_on_a_machine_without_one(tmp_path, capsys):
    # upstream's GPU configs name cuda:0: on a CPU machine that is one clear line, not torch's AssertionError
    assert_one_error(*cli(capsys, base_config(tmp_path), "agent_model.device=cuda:0"), "cuda:0", "CUDA device")


# ------------------------------------------------------------------------------------------------ checkpoints
@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """A 3-step MAGRPO run of the tiny model on the scripted task, with checkpoint-2 and checkpoint-3."""
    folder = tmp_path_factory.mktemp("trained")
    config = load_config(base_config(folder), ["magrpo.max_steps=3", "magrpo.rollout_buffer_size=2"])
    seed_everything(config.seed)
    task = scripted_task(items=3)
    algorithm = build_magrpo(Run.of(config, "magrpo"), task)
    train_loop(Run.of(config, "magrpo"), task, algorithm, folder / "run")
    names = [p.name for p in ckpt.list_checkpoints(folder / "run" / "checkpoints")]
    assert names == ["checkpoint-2", "checkpoint-3"]
    return folder


@pytest.fixture
def run_copy(trained_run, tmp_path):
    """A fresh copy of the trained run's folder; returns (base config pointing at it, its checkpoints folder)."""
    shutil.copytree(trained_run / "run", tmp_path / "run")
    return base_config(tmp_path), tmp_path / "run" / "checkpoints"


def snapshot(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


class RunsACommand:
    """Pickles to a call of os.system: what a crafted trainer_state.pt would hold."""

    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        return os.system, (self.command,)


def _evil(path: Path, marker: Path) -> None:
    torch.save({"step": 3, "env_step": 3, "rng": {}, "algorithm": RunsACommand(f"touch {marker}")},
               path / "trainer_state.pt")


def _garbage_state(path: Path, marker: Path) -> None:
    (path / "trainer_state.pt").write_bytes(os.urandom(4096))


def _truncated_state(path: Path, marker: Path) -> None:
    data = (path / "trainer_state.pt").read_bytes()
    (path / "trainer_state.pt").write_bytes(data[:len(data) // 2])


def _missing_state(path: Path, marker: Path) -> None:
    (path / "trainer_state.pt").unlink()


def _truncated_weights(path: Path, marker: Path) -> None:
    weights = path / "agent_1" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1000])


def _garbage_weights(path: Path, marker: Path) -> None:
    (path / "agent_0" / "model.safetensors").write_bytes(os.urandom(2048))


def _missing_weights(path: Path, marker: Path) -> None:
    (path / "agent_1" / "model.safetensors").unlink()


DAMAGES = [(_evil, "more than plain data"), (_garbage_state, "trainer_state.pt"),
           (_truncated_state, "trainer_state.pt"), (_missing_state, "trainer_state.pt is missing"),
           (_truncated_weights, "agent_1/model.safetensors is truncated"),
           (_garbage_weights, "agent_0/model.safetensors"), (_missing_weights, "agent_1/ holds no .safetensors")]


@pytest.mark.slow
@pytest.mark.parametrize("damage,message", DAMAGES, ids=[d.__name__.strip("_") for d, _ in DAMAGES])
def test_damaged_checkpoint_named_exactly(run_copy, tmp_path, capsys, damage, message):
    config, checkpoints = run_copy
    marker = tmp_path / "pwned"
    newest = checkpoints / "checkpoint-3"
    damage(newest, marker)
    before = snapshot(tmp_path / "run")
    code, err = cli(capsys, config, f"checkpoint.resume_from_checkpoint={newest}", "magrpo.max_steps=4")
    assert_one_error(code, err, f"checkpoint {newest} is damaged", message)
    assert not marker.exists()  # the pickled command never ran
    assert snapshot(tmp_path / "run") == before  # nothing saved was touched


@pytest.mark.slow
def test_latest_falls_back_to_the_newest_undamaged_checkpoint(run_copy, tmp_path, caplog):
    config_path, checkpoints = run_copy
    marker = tmp_path / "pwned"
    _evil(checkpoints / "checkpoint-3", marker)
    config = load_config(config_path, ["magrpo.max_steps=3", "checkpoint.resume_from_checkpoint=latest"])
    seed_everything(config.seed)
    task = scripted_task(items=3)
    algorithm = build_magrpo(Run.of(config, "magrpo"), task)
    with caplog.at_level(logging.WARNING):
        summary = train_loop(Run.of(config, "magrpo"), task, algorithm, tmp_path / "run")
    assert not marker.exists()
    assert "checkpoint-3 is damaged" in caplog.text and "falling back" in caplog.text
    assert "resuming from" in caplog.text and "checkpoint-2" in caplog.text
    assert summary["steps"] == 3
    steps = [json.loads(line)["step"] for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert steps.count(3) >= 1 and steps == sorted(steps)  # step 3 redone once, after steps 1-2
    # the redone checkpoint-3 replaced the damaged one and loads
    ckpt.check_checkpoint(checkpoints / "checkpoint-3")


@pytest.mark.slow
def test_latest_with_every_checkpoint_damaged(run_copy, tmp_path, capsys):
    config, checkpoints = run_copy
    for path in ckpt.list_checkpoints(checkpoints):
        _garbage_state(path, tmp_path / "unused")
    code, err = cli(capsys, config, "checkpoint.resume_from_checkpoint=latest")
    assert_one_error(code, err, "every checkpoint under", "is damaged")


@pytest.mark.slow
def test_trainer_state_is_plain_data_and_restores_exactly(tmp_path):
    # checkpoint-1 of a 2-step run with 3-node buffers: one sibling group buffered (the run's end trains the rest)
    config = load_config(base_config(tmp_path), ["magrpo.max_steps=2", "magrpo.rollout_buffer_size=3"])
    seed_everything(config.seed)
    task = scripted_task(items=2)
    train_loop(Run.of(config, "magrpo"), task, build_magrpo(Run.of(config, "magrpo"), task), tmp_path / "run")
    path = tmp_path / "run" / "checkpoints" / "checkpoint-1"
    raw = torch.load(path / "trainer_state.pt", weights_only=True)  # no globals beyond torch's own
    state = ckpt.load_trainer_state(path)
    assert isinstance(raw["rng"]["numpy"][1], dict)  # numpy's key array is tagged bytes on disk
    name, keys, pos, has_gauss, cached = state["rng"]["numpy"]
    assert name == "MT19937" and keys.dtype == np.uint32 and keys.shape == (624,)
    buffered = state["algorithm"]["buffer"]
    # rebuilt dataclasses: the buffered sibling groups and their samples
    assert buffered[0] and all(isinstance(g, NodeGroup) and g.samples and
                               all(isinstance(s, TrainSample) for s in g.samples) for g in buffered[0])
    # a round trip of every kind of value a state holds
    random_state = __import__("random").getstate()
    value = {"np": np.random.get_state(), "py": random_state, "f32": np.float32(0.1), "i64": np.int64(-3),
             "arr": np.arange(6, dtype=np.float64).reshape(2, 3), "t": torch.arange(3), "set": {1, 2},
             "sample": TrainSample(torch.tensor([1, 2]), torch.tensor([3]), 0.5), ckpt._TAG: "a user key"}
    back = ckpt.from_plain(ckpt.to_plain(value))
    assert back["py"] == random_state and back["f32"] == np.float32(0.1) and type(back["f32"]) is np.float32
    assert back["np"][0] == "MT19937" and (back["np"][1] == value["np"][1]).all() and back["np"][2:] == value["np"][2:]
    assert (back["arr"] == value["arr"]).all() and back["set"] == {1, 2} and back[ckpt._TAG] == "a user key"
    assert torch.equal(back["sample"].prompt_ids, torch.tensor([1, 2])) and back["sample"].advantage == 0.5


def test_unlisted_classes_are_refused_on_save_and_on_load(tmp_path):
    from dataclasses import dataclass

    @dataclass
    class Unlisted:
        x: int

    with pytest.raises(TypeError, match=r"state_dataclasses\(\)"):
        ckpt.to_plain({"a": [Unlisted(1)]})
    # a class of the same name as a listed one is not the listed one
    Unlisted.__module__, Unlisted.__qualname__ = "cooprl.samples", "NodeGroup"
    with pytest.raises(TypeError, match=r"state_dataclasses\(\)"):
        ckpt.to_plain(Unlisted(1))
    assert set(ckpt.state_dataclasses()) == {"cooprl.samples:TrainSample", "cooprl.samples:NodeGroup",
                                             "cooprl.samples:Step", "cooprl.samples:CriticSample"}
    with pytest.raises(ValueError, match="unknown class"):
        ckpt.from_plain({ckpt._TAG: "dataclass", "class": "os:system", "fields": {}})


# ------------------------------------------------------------------------------------------------ evaluate.py
@pytest.mark.slow
def test_evaluate_dataset_error(run_copy, tmp_path, capsys):
    config, checkpoints = run_copy
    path, fragments = _directory(tmp_path)
    assert_one_error(*evaluate_cli(capsys, config, checkpoints, f"dataset.path={path}"), *fragments)


def test_evaluate_model_error(run_copy, tmp_path, capsys):
    config, checkpoints = run_copy
    (tmp_path / "empty").mkdir()
    assert_one_error(*evaluate_cli(capsys, config, checkpoints, f"agent_model.name={tmp_path / 'empty'}"),
                     "could not be loaded")


@pytest.mark.slow
def test_evaluate_damaged_checkpoint(run_copy, tmp_path, capsys):
    config, checkpoints = run_copy
    _truncated_weights(checkpoints / "checkpoint-3", tmp_path)
    assert_one_error(*evaluate_cli(capsys, config, checkpoints / "checkpoint-3"),
                     "checkpoint-3 is damaged", "truncated")


@pytest.mark.slow
def test_evaluate_a_checkpoint_of_another_number_of_agents(run_copy, tmp_path, capsys):
    # a team's checkpoint evaluated as a single agent loaded its first agent without a word; a single agent's
    # checkpoint in a team was called damaged
    config, checkpoints = run_copy
    single = tmp_path / "grpo.yaml"
    single.write_text(config.read_text().replace("magrpo:", "grpo:"), encoding="utf-8")
    assert evaluate.main(["--config", str(single), "--checkpoint", str(checkpoints)]) == 2
    assert_one_error(2, capsys.readouterr().err, "checkpoint-3 holds 2 model(s)", "this run has 1")
    # a run folder as --checkpoint: its newest complete checkpoint, as evaluate_strategy.py takes it
    assert evaluate_cli(capsys, config, checkpoints.parent, "magrpo.eval_num_samples=1")[0] == 0
    shutil.rmtree(checkpoints / "checkpoint-3" / "agent_1")
    line = assert_one_error(*evaluate_cli(capsys, config, checkpoints / "checkpoint-3"), "holds 1 model(s)",
                            "this run has 2")
    assert "damaged" not in line


def test_evaluate_config_error(tmp_path, capsys):
    path = tmp_path / "utf16.yaml"
    path.write_text(BASE, encoding="utf-16")
    assert_one_error(*evaluate_cli(capsys, path, tmp_path), "is not UTF-8 text")
