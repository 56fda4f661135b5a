"""The docs say what the code and the configs do: docs/config.md is generated from the typed config, and every
fact the README and docs/ state about a named config, a command or a measurement is checked here."""

from __future__ import annotations

import dataclasses
import re
import shlex
import typing
from pathlib import Path

import pytest

from cooprl.cli import parse_args
from cooprl.config import TRAINER_SECTIONS, Config, ConfigError, Run, load_config, read_yaml
from cooprl.config_docs import config_reference, default_configs, task_config

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
BENCH = (ROOT / "bench" / "README.md").read_text(encoding="utf-8")
RESULTS = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")   # every measurement the README used to hold
SCALING = (ROOT / "docs" / "scaling.md").read_text(encoding="utf-8")   # reference configs, memory, parallel rules
TEAMS = (ROOT / "docs" / "teams.md").read_text(encoding="utf-8")
ALGORITHMS = (ROOT / "docs" / "algorithms.md").read_text(encoding="utf-8")
UPSTREAM = (ROOT / "docs" / "upstream.md").read_text(encoding="utf-8")
CPU_CONFIG = ROOT / "configs" / "magrpo_che_cpu.yaml"


def load(name: str, overrides: list[str] | None = None) -> Config:
    return load_config(ROOT / "configs" / f"{name}.yaml", overrides or [])


def code_task_configs(pattern: str) -> list[Path]:
    """Return the config files matching `pattern` that run the code task (not another environment's)."""
    from envs import DEFAULT_ENVIRONMENT, environment_of
    return sorted(p for p in (ROOT / "configs").glob(pattern) if environment_of(read_yaml(p)) is DEFAULT_ENVIRONMENT)


def dataset_of(config: Config):
    """Return the config's dataset section: under `config.task` where the task's sections live there."""
    task = getattr(config, "task", None)
    return (task if task is not None else config).dataset


def trainer_of(config_name: str) -> str:
    return re.sub(r"_(che|he)_(config|cpu)$", "", config_name)


def table_rows(text: str, marker: str) -> list[list[str]]:
    """Return the cells of the Markdown table that follows the HTML comment `<!-- marker ... -->`."""
    start = text.index(f"<!-- {marker}")
    rows = []
    for line in text[start:].splitlines()[1:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        if not set(cells[0]) <= set("-") and cells[0] != "config":
            rows.append(cells)
    return rows


def number(cell: str) -> float:
    return float(cell.rstrip("s").strip())


# ------------------------------------------------------------------------------------------ docs/config.md
def test_config_reference_is_up_to_date():
    written = (ROOT / "docs" / "config.md").read_text(encoding="utf-8")
    from strategies import CONFIG_SECTIONS
    assert written == config_reference(CONFIG_SECTIONS), \
        "docs/config.md is stale: run python -m cooprl.config_docs envs.code_generation strategies > docs/config.md"


def test_config_reference_lists_every_trainer_and_its_own_keys():
    text = config_reference()
    for key in ("magrpo.num_generations", "iac.critic_type", "madpo.dpo_beta", "madpo_iter.comparator_policy",
                "marlhf.rl_algorithm", "marlhf_iter.preference_replay_mode", "<trainer>.max_steps",
                "agent_model.lora.r"):
        assert f"`{key}`" in text
    assert "| `magrpo.joint_mode` | `'aligned'` | one of `aligned`, `cross` |" in text
    assert "| `seed` | `42` | int, 0 to 4294967295 |" in text


def test_every_script_has_a_documented_default_config_that_is_a_3b_gpu_config():
    rows = default_configs()
    assert {trainer for _, trainer, _ in rows} == set(TRAINER_SECTIONS)
    assert {script for script, _, _ in rows} == {p.name for p in ROOT.glob("train_*.py")}
    for script, trainer, path in rows:
        args = parse_args(trainer, path, [])   # what `python <script>` with no --config reads
        config = load_config(ROOT / args.config, [])
        assert config.agent_model.name == "Qwen/Qwen2.5-Coder-3B", script
        assert config.agent_model.torch_dtype == "bfloat16", script


def _fields(cls: type, prefix: str = ""):
    """Yield (key, type, metadata) for every leaf key of dataclass `cls`, entering Optional sections too."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.metadata.get("task"):
            continue   # the task's sections: walked from task_config()
        key, tp = (f"{prefix}.{f.name}" if prefix else f.name), hints[f.name]
        inner = [a for a in typing.get_args(tp) if dataclasses.is_dataclass(a)]
        if dataclasses.is_dataclass(tp) or len(inner) == 1:
            yield from _fields(tp if dataclasses.is_dataclass(tp) else inner[0], key)
        else:
            yield key, tp, f.metadata


def _outside(tp, meta):
    """Return YAML values just outside what a key allows (its choices or range)."""
    choices, lo, hi = meta.get("choices"), meta.get("min"), meta.get("max")
    if choices is not None:
        return ["not-a-choice"]
    is_int = int in (typing.get_args(tp) or (tp,))
    values = []
    if lo is not None:
        values.append(str(lo - 1 if is_int else lo - 0.5))
    if hi is not None:
        values.append(str(hi + 1 if is_int else hi + 0.5))
    return values


@pytest.mark.slow
def test_the_allowed_values_in_docs_config_md_are_enforced():
    """Every choice list and range that docs/config.md shows is refused outside it, with the key named."""
    checked = 0
    task = task_config()
    for key, tp, meta in [*_fields(Config), *(_fields(task) if task is not None else [])]:
        for value in _outside(tp, meta):
            with pytest.raises(ConfigError, match=re.escape(key.split(".")[-1])):
                load_config(CPU_CONFIG, [f"{key}={value}"])
            checked += 1
    assert checked > 50


@pytest.mark.parametrize("override, key", [
    ("magrpo.eval_pass_k=[1, 2]", "magrpo.eval_pass_k"),
    ("external.sandbox_slice=some", "external.sandbox_slice"),
    ("iac.parallel_training=ddp", "iac.parallel_training"),
    ("madpo.parallel_training=mp", "madpo.parallel_training"),
    (["magrpo.parallel_training=ddp", "magrpo.agent_devices=[cuda:0, cuda:1]"], "magrpo.agent_devices"),
    (["magrpo.parallel_training=ddp", "magrpo.update_schedule=nodes", "magrpo.num_turns=2"],
     "magrpo.parallel_training"),
    (["agent_model.vllm_weight_sync=lora", "agent_model.lora=null"], "agent_model.lora"),
    (["madpo.parallel_training=fsdp", "madpo.train_batch_size=null", "madpo.rollout_buffer_size=null",
      "madpo.reference_model=true", "agent_model.lora=null"], "madpo.reference_model"),
    (["iac.parallel_training=fsdp", "iac.update_schedule=episodes", "iac.train_batch_size=null",
      "iac.use_separate_critic=false"], "iac.use_separate_critic"),
    (["marlhf_iter.parallel_training=fsdp", "marlhf_iter.update_schedule=items",
      "marlhf_iter.comparator_policy=history"], "marlhf_iter.comparator_policy"),
    (["marlhf_iter.parallel_training=fsdp", "marlhf_iter.update_schedule=items", "marlhf_iter.comparator_policy=copy",
      "agent_model.lora=null"], "marlhf_iter.comparator_policy: copy"),
    (["grpo.parallel_training=fsdp", "grpo.update_schedule=items", "agent_model.generation_backend=vllm"],
     "grpo.parallel_training"),
    (["grpo.parallel_training=fsdp", "grpo.update_schedule=items", "grpo.reference_kl_coef=0.1",
      "agent_model.lora=null"], "agent_model.lora"),
    ("agent_model.vllm_tensor_parallel_size=2", "agent_model.vllm_weight_sync=lora"),
    ("agent_model.vllm_importance_cap=2.0", "agent_model.vllm_importance_cap"),
])
def test_rules_between_keys_are_enforced_at_load(override, key):
    with pytest.raises(ConfigError, match=re.escape(key)):
        load_config(CPU_CONFIG, override if isinstance(override, list) else [override])


def test_magrpo_needs_two_generations_unless_raw():
    from cooprl.trainers.magrpo import build_magrpo
    with pytest.raises(ConfigError, match="magrpo.num_generations"):
        build_magrpo(Run.of(load_config(CPU_CONFIG, ["magrpo.num_generations=1"]), "magrpo"), None)


# ------------------------------------------------------------------------------------ the README and its docs
def section_of(text: str, heading: str) -> str:
    """Return the Markdown section under `heading` (a whole heading line), up to the next heading of its level."""
    level = heading.split(" ")[0]
    start = text.index(heading + "\n") + len(heading)
    ends = [m.start() for m in re.finditer(rf"^{level} ", text[start:], flags=re.M)]
    return text[start:start + ends[0]] if ends else text[start:]


def test_readme_is_for_users_and_its_docs_map_names_every_doc():
    assert len(README.splitlines()) <= 300, "the README is for users: measurements go to docs/results.md"
    docs_map = section_of(README, "## Docs map")
    for path in [*sorted((ROOT / "docs").glob("*.md")), ROOT / "bench" / "README.md"]:
        name = str(path.relative_to(ROOT))
        assert f"`{name}`" in docs_map, f"the README's docs map does not name {name}"
    for link in re.findall(r"\]\(((?:docs|bench)/[^)#]+)", README):   # every link of the README leads to a file
        assert (ROOT / link).exists(), link
    for text, base in ((RESULTS, ROOT / "docs"), (SCALING, ROOT / "docs"), (TEAMS, ROOT / "docs")):
        for link in re.findall(r"\]\(([^)#:]+)", text):
            assert (base / link).exists(), link


def test_readme_quickstart_says_what_each_command_gives():
    quickstart = section_of(README, "## Quickstart (CPU, offline)")
    makefile = (ROOT / "Makefile").read_text()
    for target in ("demo", "test", "test-fast"):
        assert re.search(rf"^make {target} +# .+", quickstart, flags=re.M), target   # one line of expected outcome
        assert re.search(rf"^{target}:", makefile, flags=re.M), target


def test_reference_config_table_matches_every_reference_config():
    rows = table_rows(SCALING, "reference-configs")
    names = {p.stem for p in code_task_configs("*_config.yaml")}   # the teams' GPU configs: the README's Teams section
    assert {r[0].strip("`") for r in rows} == names, "docs/scaling.md's table lists every reference config"
    assert "docs/scaling.md#the-reference-configs" in README
    for name, script, dataset, turns, g, candidates, lr, epochs, shift, early in rows:
        name = name.strip("`")
        trainer = trainer_of(name)
        config = load(name)
        section = config.trainer(trainer)
        assert script == f"`train_{trainer}.py`", name
        assert dataset == {"OpenMLRL/CoopHumanEval": "CoopHumanEval", "openai/openai_humaneval": "HumanEval",
                           "coop": "coop"}[dataset_of(config).name], name   # (SFT needs the shipped set's references)
        assert section.num_turns == int(turns), name
        if trainer.startswith(("madpo", "sft")):
            assert g == "–", name
        else:
            assert section.num_generations == int(g), name
        if candidates == "–":
            assert not hasattr(section, "preference_num_candidates"), name
        else:
            assert section.preference_num_candidates == int(candidates), name
        assert section.learning_rate == float(lr), name
        assert section.num_train_epochs == int(epochs), name
        assert config.reward_processor.shift == float(shift), name
        assert section.early_termination_threshold == float(early), name


def test_what_every_reference_config_shares():
    """docs/scaling.md: Qwen/Qwen2.5-Coder-3B in bfloat16, temperature 0.6, top_p 0.6 and 256 new tokens."""
    for path in code_task_configs("*_config.yaml"):
        config = load(path.stem)
        section = config.trainer(trainer_of(path.stem))
        assert config.agent_model.name == "Qwen/Qwen2.5-Coder-3B", path.name
        assert config.agent_model.torch_dtype == "bfloat16", path.name
        assert (config.agent_model.temperature, config.agent_model.top_p) == (0.6, 0.6), path.name
        assert section.max_new_tokens == 256, path.name
    assert "Qwen/Qwen2.5-Coder-3B in bfloat16,\ntemperature 0.6, top_p 0.6 and 256 new tokens" in SCALING


def test_cpu_config_table_matches_every_cpu_config():
    rows = table_rows(README, "cpu-configs")
    # the code task's configs; the other environments' (arithmetic, planner_coder, coder_tester) have their own docs
    names = {p.stem for p in code_task_configs("*_cpu.yaml")}
    assert {r[0].strip("`") for r in rows} == names
    for name, scripts, turns, g, candidates, lr, steps, lora_r in rows:
        name = name.strip("`")
        trainer = trainer_of(name)
        config = load(name)
        section = config.trainer(trainer)
        assert scripts.startswith(f"`train_{trainer}.py`"), name
        for script in re.findall(r"train_(\w+)\.py", scripts):
            config.trainer(script)   # the file holds a section for every script named
            assert f"train_{script}.py --config configs/{name}.yaml" in (ROOT / "configs" / f"{name}.yaml").read_text()
        assert section.num_turns == int(turns), name
        if g == "–":
            assert trainer.startswith(("madpo", "sft")), name
        else:
            assert section.num_generations == int(g), name
        if candidates != "–":
            assert section.preference_num_candidates == int(candidates), name
        assert section.learning_rate == float(lr), name
        assert section.max_steps == int(steps), name
        assert config.agent_model.lora.r == int(lora_r), name
        assert config.agent_model.name == "offline:smollm2-135m-instruct", name


def test_the_demo_is_what_the_readme_says():
    assert "make demo" in README and "$(PY) train_magrpo.py --config configs/magrpo_che_cpu.yaml" in (
        ROOT / "Makefile").read_text()
    config = load("magrpo_che_cpu")
    section = config.magrpo
    # "two agents, one turn, G = 4 samples per agent, LoRA r = 16, 32 steps", "on 4 eval problems"
    assert (section.num_agents, section.num_turns, section.num_generations) == (2, 1, 4)
    assert (config.agent_model.lora.r, section.max_steps, section.eval_num_samples) == (16, 32, 4)
    assert config.output.run_name == "demo-magrpo-coop-cpu" and dataset_of(config).name == "coop"
    for claim in ("two agents, one turn, G = 4 samples per agent, LoRA r = 16, 32 steps",
                  "`runs/demo-magrpo-coop-cpu/`"):
        assert claim in README.replace("\n", " "), claim
        assert claim in RESULTS.replace("\n", " "), claim
    demo = section_of(RESULTS, "## The demo (`make demo`)").replace("\n", " ")
    for claim in ("the evaluation on 4 held-out problems", "](demo_rewards.png)"):
        assert claim in demo, claim
    assert "docs/results.md#the-demo-make-demo" in README
    assert (ROOT / "docs" / "demo_rewards.png").stat().st_size > 10_000   # the curve docs/results.md shows


def test_trainer_table_names_every_script_and_the_madpo_candidates():
    section = section_of(README, "## Choosing a trainer")
    for script in ROOT.glob("train_*.py"):
        assert f"| `{script.name}` |" in section, script.name
    assert "80 candidates per problem in `madpo_che_config`" in section
    assert load("madpo_che_config").madpo.preference_num_candidates == 80
    assert load("madpo_che_config").madpo.pair_collection == "offline"
    assert load("iac_che_config").iac.use_separate_critic is True   # "(the reference configs)"
    assert TRAINER_SECTIONS["madpo"]().num_turns == 1                # "single-turn only"


def test_lora_override_and_its_defaults():
    """docs/scaling.md: `agent_model.lora.r=16` alone switches LoRA on with alpha 32, dropout 0.05, q/k/v/o."""
    lora = load("magrpo_he_config", ["agent_model.lora.r=16"]).agent_model.lora
    assert (lora.r, lora.alpha, lora.dropout, lora.target_modules) == (16, 32, 0.05, ["q_proj", "k_proj", "v_proj",
                                                                                      "o_proj"])
    assert (
        "`agent_model.lora.r=16` alone switches LoRA on with the section's defaults (alpha 32, dropout 0.05, q/k/v/o)"
        in SCALING
    )


def _readme_train_commands() -> list[list[str]]:
    """Return the argv of every `train_*.py` command in the README's and docs' shell blocks (continuations joined)."""
    commands = []
    for text in (README, ALGORITHMS, SCALING, RESULTS, TEAMS):
        for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
            for line in block.replace("\\\n", " ").splitlines():
                if "train_" not in line or " ... " in line:
                    continue
                argv = shlex.split(line, comments=True)
                start = next(i for i, a in enumerate(argv) if re.fullmatch(r"train_\w+\.py", a))
                commands.append(argv[start:])
    return commands


def test_every_train_command_in_the_docs_loads_its_config():
    commands = _readme_train_commands()
    assert len(commands) >= 18   # README 11 (train 4, resume 2, scaling 5), docs/scaling.md 7
    for argv in commands:
        trainer = argv[0][len("train_"):-len(".py")]
        args = parse_args(trainer, f"configs/{trainer}_che_config.yaml", argv[1:])
        if args.resume:
            continue
        load_config(ROOT / args.config, args.override)   # a ConfigError here is a broken command in the docs


def test_docs_claims_about_update_schedules_and_upstream_settings():
    # docs/algorithms.md: IAC/MAAC default to turns, the CPU configs use episodes
    assert TRAINER_SECTIONS["iac"]().update_schedule == "turns"
    assert load("iac_che_cpu").iac.update_schedule == "episodes"
    assert load("maac_che_cpu").maac.update_schedule == "episodes"
    assert "`episodes` (ours; the CPU configs use it)" in ALGORITHMS
    # docs/upstream.md: the demo keeps items; the MAGRPO and actor-critic reference settings
    assert load("magrpo_che_cpu").magrpo.update_schedule == "items"
    assert "MAGRPO che: 8 epochs, discount 1.0, buffer 4 nodes, 4 per step; he: 6, 1.0, 2, 2" in UPSTREAM
    for name, epochs, buffer in (("magrpo_che_config", 8, 4), ("magrpo_he_config", 6, 2)):
        s = load(name).magrpo
        assert (s.num_train_epochs, s.discount, s.rollout_buffer_size, s.train_batch_size) == (epochs, 1.0, buffer,
                                                                                               buffer)
    assert "IAC/MAAC/AC: 80 epochs, actor and critic lr 5e-6, value coefficient 0.6, buffer 4, 4 per step" in UPSTREAM
    for path in (ROOT / "configs").glob("*ac_*_config.yaml"):     # iac, maac, ac
        s = load(path.stem).trainer(trainer_of(path.stem))
        assert (s.num_train_epochs, s.learning_rate, s.critic_learning_rate, s.value_loss_coef,
                s.rollout_buffer_size, s.train_batch_size) == (80, 5e-6, 5e-6, 0.6, 4, 4), path.name


# ------------------------------------------------------------------------------------------- measurements
def test_learning_table_in_the_results_has_a_row_per_trainer():
    rows = table_rows(RESULTS, "learning-table")
    assert {script.stem[len("train_"):] for script in ROOT.glob("train_*.py")} <= {r[0] for r in rows}
    assert "<!-- /learning-table -->" in RESULTS
    assert "docs/results.md#what-each-trainer-learns-on-the-embedded-model" in README


def test_speed_figures_in_the_results_are_those_of_bench_readme():
    rows = table_rows(RESULTS, "speed-table")
    figures = [cell for row in rows for cell in row[1:] if re.fullmatch(r"[\d.]+ s", cell)]
    assert len(figures) == 4
    section = section_of(RESULTS, "## Speed")
    figures += re.findall(r"\b\d+\.\d+(?= s\b)", section) + re.findall(r"\d+(?:\.\d+)?-\d+(?:\.\d+)?x?", section)
    figures.append("1.55x")
    for figure in figures:
        assert figure.rstrip(" s") in BENCH, f"docs/results.md's {figure} is not in bench/README.md"


@pytest.mark.slow
def test_memory_estimate_counts():
    """docs/scaling.md's memory table: Qwen2.5-Coder-3B's parameter count from its architecture, the LoRA counts, bf16
    AdamW states for bf16 weights (8 or 12 bytes per parameter in all), float32 LoRA adapters."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, Qwen2Config
    arch = Qwen2Config(vocab_size=151936, hidden_size=2048, intermediate_size=11008, num_hidden_layers=36,
                       num_attention_heads=16, num_key_value_heads=2, tie_word_embeddings=True)

    def model():
        with torch.device("meta"):
            return AutoModelForCausalLM.from_config(arch, dtype=torch.bfloat16)

    total = sum(p.numel() for p in model().parameters())
    assert round(total / 1e9, 3) == 3.086 and "3.086 billion parameters" in SCALING
    assert f"{2 * total * 8 / 1e9:.1f} GB" == "49.4 GB" and "49.4 GB (46.0 GiB)" in SCALING   # bf16_optimizer: pure
    assert f"{2 * total * 12 / 1e9:.1f} GB" == "74.1 GB" and "74.1 GB (69.0 GiB)" in SCALING   # kahan: + 4 bytes
    for modules, millions in ((["q_proj", "k_proj", "v_proj", "o_proj"], "7.4M"),
                              (["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"], "29.9M")):
        peft_model = get_peft_model(model(), LoraConfig(r=16, lora_alpha=32, target_modules=modules,
                                                        task_type="CAUSAL_LM"))
        trained = [p for p in peft_model.parameters() if p.requires_grad]
        assert f"{sum(p.numel() for p in trained) / 1e6:.1f}M" == millions and f"2 x {millions}" in SCALING
        assert {p.dtype for p in trained} == {torch.float32}
    from cooprl.rollout.vllm_memory import KAHAN_BUFFER_FLOAT32_1D, optimizer_state_bytes
    from cooprl.update.optim import build_adamw
    # the bytes per parameter the table counts: 2 (weight) + 2 (gradient) + the optimizer's states of a matrix (the
    # bulk of the weights); a 1-D parameter's Kahan buffer may be float32 (KAHAN_BUFFER_FLOAT32_1D), which the plan
    # counts, so the plan holds at least what build_adamw keeps whichever dtype the optimizer gives that buffer
    for shape in ((2, 3), (6,)):
        weight = torch.nn.Parameter(torch.zeros(shape, dtype=torch.bfloat16))
        weight.grad = torch.ones(shape, dtype=torch.bfloat16)
        vector = len(shape) == 1
        for mode, slots, per_parameter in (("pure", ("exp_avg", "exp_avg_sq"), 8),
                                           ("kahan", ("exp_avg", "exp_avg_sq", "kahan_comp"), 12)):
            optimizer = build_adamw([weight], lr=1e-3, bf16_optimizer=mode)
            optimizer.step()
            state = {k: v for k, v in optimizer.state[weight].items() if isinstance(v, torch.Tensor) and v.numel() == 6}
            assert sorted(state) == sorted(slots)
            kept = sum(v.element_size() for v in state.values())
            planned = optimizer_state_bytes(torch.bfloat16, mode, vector)
            if not vector:
                assert 2 + 2 + kept == per_parameter and planned == kept
            else:
                assert planned == per_parameter - 4 + 2 * (mode == "kahan" and KAHAN_BUFFER_FLOAT32_1D)
                assert planned >= kept and state.get("kahan_comp", state["exp_avg"]).dtype in (torch.bfloat16,
                                                                                               torch.float32)


# ------------------------------------------------------------------------------------ the memory plan
def _plan(config: str, overrides: list[str], gib: float, processes: int) -> tuple[float, str]:
    """Return (GiB, verdict) of the fullest GPU in `--memory-plan gib`'s plan of train_magrpo.py's command."""
    import contextlib
    import io

    from cooprl.rollout.memory_plan import print_memory_plan
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        try:
            print_memory_plan(Run.of(load_config(ROOT / config, overrides), "magrpo"), gib, processes)
        except ConfigError:
            pass
    gpus = re.findall(r"cuda:\d+: ([\d.]+) GiB, (fits|tight|may not fit|too big)", printed.getvalue())
    size, verdict = max(gpus, key=lambda gpu: float(gpu[0]))
    return float(size), verdict


def test_the_memory_plan_table_is_what_memory_plan_prints():
    rows = [r for r in table_rows(SCALING, "memory-plan") if r[0] != "overrides"]
    assert len(rows) >= 12
    marks = {"fits": "✓", "tight": "~", "may not fit": "?", "too big": "✗"}
    for label, gpus, *cells in rows:
        overrides = label.strip("`").split() if label.startswith("`") else []
        processes = int(gpus) if any("ddp" in o or "fsdp" in o for o in overrides) else 1
        for gib, cell in zip((24, 48, 80, 141), cells, strict=True):
            size, verdict = _plan("configs/magrpo_he_config.yaml", overrides, gib, processes)
            assert cell == f"{size:.1f} {marks[verdict]}", (label, gib)


def test_the_gpu_commands_of_the_scaling_docs_fit_an_80_gb_gpu_by_the_plan():
    commands = []
    for text in (SCALING, section_of(README, "## Scaling out")):
        for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
            commands += [shlex.split(line, comments=True) for line in block.replace("\\\n", " ").splitlines()
                         if "train_magrpo.py" in line]
    assert len(commands) >= 12
    for argv in commands:
        start = next(i for i, a in enumerate(argv) if a == "train_magrpo.py")
        launcher = dict(zip(argv[:start], argv[1:start + 1], strict=True))
        processes = int(launcher.get("--nproc_per_node", "1"))
        args = parse_args("magrpo", "configs/magrpo_che_config.yaml", argv[start + 1:])
        if args.memory_plan is not None:   # a question, not a run (the first refuses: the table says why)
            continue
        size, verdict = _plan(args.config, args.override, 79.6, processes)   # an H100 80 GB as torch reports it
        assert verdict == "fits", (argv, size)
