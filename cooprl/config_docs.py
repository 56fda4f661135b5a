"""The config reference in docs/config.md, generated from the typed sections so it never goes stale.

`python -m cooprl.config_docs envs.code_generation strategies > docs/config.md` rewrites it (the arguments: the
environment whose task sections are listed, and modules whose `CONFIG_SECTIONS` (name -> dataclass) are listed
as a command's own sections: evaluate_strategy.py's budget and strategies); a test checks the file matches this
output.
What it holds: the config file each bare `train_*.py` loads (read from the scripts), every key with its default,
its allowed values (type, choices, range: the same metadata `load_config` checks) and its meaning, and the rules
that tie keys together (each one is checked by tests/project/test_docs.py).
"""

from __future__ import annotations

import ast
import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, Union

from cooprl.config import TRAINER_SECTIONS, Config, TrainerSection, field_doc, registered_task_config


def task_config() -> type | None:
    """Return the dataclass of the task's own top-level sections (the code task's dataset and external, registered
    when `envs.code_generation` is imported; the command line imports the task modules it is given), or None."""
    return registered_task_config()


ROOT = Path(__file__).resolve().parent.parent

# Rules between keys (checked when a config is loaded, or when the trainer is built); tests/project/test_docs.py
# triggers each one, so a rule that stops being enforced fails a test.
RULES = [
    "`<trainer>.eval_pass_k`: every k is between 1 and `<trainer>.eval_num_generations` (checked at load).",
    "`<trainer>.parallel_training`: `mp` is magrpo's and grpo's, `ddp` every trainer's; `ddp` needs `update_schedule: "
    "items` (or `num_turns: 1`) for magrpo/grpo and marlhf/marlhf_iter (with `rl_algorithm` iac or maac: that "
    "section's actor-critic rule, checked when the trainer is built), `update_schedule: "
    "episodes` with `train_batch_size: null` for the actor-critics, `train_batch_size: null` and `rollout_buffer_size: "
    "null` with `log_reward_distribution: false` for madpo/madpo_iter, and one agent device (each process uses its "
    "own); a device key "
    "lists one device for all "
    "or one per model (`agent_devices`: per agent, `critic_devices`: per critic, `comparator_devices`: per role; "
    "the format checked at load, the count when the trainer is built).",
    "`<trainer>.parallel_training: fsdp` is every trainer's, with ddp's rules; the actor-critics need "
    "`use_separate_critic: true`, madpo_iter and marlhf_iter a `comparator_policy` other than current_copy and "
    "history (and `copy` needs `agent_model.lora`); it samples with the HF backend (not `generation_backend: vllm`), "
    "and a `reference_kl_coef` above 0 or madpo's `reference_model` needs `agent_model.lora` (checked at load; "
    "MARLHF's RL section when the trainer is built).",
    "`agent_model.vllm_weight_sync: lora` needs `agent_model.lora` with a rank vLLM serves (1, 8, 16, 32, 64, 128, "
    "256, 320 or 512); `agent_model.vllm_tensor_parallel_size` above 1 needs `vllm_weight_sync: lora`; "
    "`generation_backend: vllm` under `parallel_training: ddp` (one engine per rank) refuses "
    "`vllm_tensor_parallel_size` above 1, and `fsdp` refuses vLLM; it refuses agent devices other than cuda:0 with "
    "`vllm_tensor_parallel_size` above 1 (the shards run on cuda:0..T-1; one shard sits on its agent's GPU) (checked "
    "at load); `agent_model.share_base` with `generation_backend: vllm` needs `vllm_weight_sync: lora` (one engine "
    "serves the team; checked at load); `agent_model.vllm_sleep` needs one vLLM engine per "
    "process, i.e. one agent per process or a `share_base` team, and a GPU build of vLLM (checked when the engines "
    "are built).",
    "`agent_model.share_base` needs `agent_model.lora`, one agent device and no `parallel_training: fsdp` (checked at "
    "load), one base model for every agent (`agents:` naming one model) and an `init_from` of LoRA adapters, not full "
    "weights (checked when the team is built, before any model loads); under `parallel_training: mp` the agents of a "
    "shared base run one after the other.",
    "`agent_model.vllm_importance_cap` needs `agent_model.generation_backend: vllm` (checked at load) and a "
    "policy-gradient trainer: madpo/madpo_iter refuse it (checked when the trainer is built).",
    "`magrpo`/`grpo`/`marlhf*` `num_generations`: at least 2 unless `advantage_mode: raw` (a group of one has "
    "advantage 0; checked when the trainer is built).",
    "Greedy sampling (`temperature: 0`, `top_k: 1` or `top_p: 0`: an agent's own `agents[i]` value, else the "
    "trainer's, else agent_model's) trains nothing (of that agent) "
    "where samples are compared with their siblings: `magrpo`/`grpo`/`marlhf*` with `num_generations` above 1 "
    "(unless `advantage_mode: raw`), and the preference trainers unless another model writes the comparator's "
    "candidates (`comparator_policy: model` or `api`); refused when training starts, before any model loads "
    "(evaluation samples greedily as asked).",
    "`marlhf`/`marlhf_iter` with `rl_algorithm: iac` or `maac`: the `iac:`/`maac:` section gives that trainer's own "
    "keys (critic_type, ...); a key every trainer shares is MARLHF's, and one given there with another value is an "
    "error (checked at load).",
    "`parallel_training: ddp` or `fsdp` needs a launcher (torchrun, `accelerate launch --multi_gpu`): one process "
    "started without one is refused (checked when training starts).",
]


def default_configs() -> list[tuple[str, str, str]]:
    """Return (script, trainer, config file) for every train_*.py: the file `--config` defaults to, read from the
    script's `train_main("<trainer>", default="<config>")` call."""
    rows = []
    for script in sorted(ROOT.glob("train_*.py")):
        for node in ast.walk(ast.parse(script.read_text(encoding="utf-8"))):
            default = [k.value for k in getattr(node, "keywords", ()) if k.arg == "default"]
            if (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "train_main" and len(node.args) == 1
                    and isinstance(node.args[0], ast.Constant) and default and isinstance(default[0], ast.Constant)):
                rows.append((script.name, node.args[0].value, default[0].value))
    return rows


_PLURAL = {str: "strings", int: "ints", float: "floats"}


def _num(x: float) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


def _type_text(tp: Any) -> str:
    """Return the YAML-side name of annotation `tp`: int, float, true/false, a string, null, a list of ..."""
    if tp is type(None):
        return "null"
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        parts = [_type_text(a) for a in args if a is not type(None)] + (["null"] if type(None) in args else [])
        return " or ".join(parts)
    if origin is list and args and typing.get_origin(args[0]) in (Union, types.UnionType):   # strings or mappings
        return "a list of " + " or ".join(_PLURAL.get(a, "mappings" if dataclasses.is_dataclass(a) else _type_text(a))
                                          for a in typing.get_args(args[0]))
    if origin is list:
        return f"a list of {_PLURAL.get(args[0], _type_text(args[0]))}" if args else "a list"
    if origin is dict or dataclasses.is_dataclass(tp):
        return "a mapping"
    return {bool: "true/false", int: "int", float: "float", str: "a string", Any: "any"}.get(tp, getattr(tp, "__name__",
                                                                                                         str(tp)))


def _allowed(tp: Any, meta: Any) -> str:
    """Return what a key accepts: its choices, else its type with its range."""
    choices = meta.get("choices")
    if choices is not None:
        return "one of " + ", ".join("`null`" if c is None else f"`{c}`" for c in choices)
    text = _type_text(tp)
    lo, hi = meta.get("min"), meta.get("max")
    if lo is not None and hi is not None:
        text += f", {_num(lo)} to {_num(hi)}" if lo != hi else f", only {_num(lo)}"
    elif lo is not None:
        text += f", >= {_num(lo)}"
    elif hi is not None:
        text += f", <= {_num(hi)}"
    return text


def _optional_dataclass(tp: Any) -> Any:
    """Return the dataclass X of an Optional[X] annotation, else None."""
    if typing.get_origin(tp) in (Union, types.UnionType):
        classes = [a for a in typing.get_args(tp) if dataclasses.is_dataclass(a)]
        return classes[0] if len(classes) == 1 else None
    return None


def _entry_dataclass(tp: Any) -> Any:
    """Return the dataclass X of an Optional[list[str or X]] annotation (`agents:`), else None."""
    lists = [a for a in typing.get_args(tp) if typing.get_origin(a) is list] if _optional_dataclass(tp) is None else []
    return _optional_dataclass(typing.get_args(lists[0])[0]) if lists else None


def _rows(cls: type, prefix: str = "", names: set[str] | None = None) -> list[tuple[str, Any, str, str]]:
    """Return (key, default, allowed, doc) for the leaf keys of dataclass `cls` (only `names`, when given); a
    section that may be null (agent_model.lora) gets its own row and then rows for the keys it takes when set."""
    rows = []
    instance, hints = cls(), typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if (names is not None and f.name not in names) or f.metadata.get("task"):
            continue   # a task field holds the task's sections, listed from task_config()
        key, tp = (f"{prefix}.{f.name}" if prefix else f.name), hints[f.name]
        if dataclasses.is_dataclass(tp):
            rows += _rows(tp, key)
            continue
        rows.append((key, getattr(instance, f.name), _allowed(tp, f.metadata), field_doc(f)))
        inner = _optional_dataclass(tp)
        if inner is not None:
            rows += [(k, d, a, f"when `{key}` is set: {doc}") for k, d, a, doc in _rows(inner, key)]
        entry = _entry_dataclass(tp)
        if entry is not None:   # `agents[i].temperature`: the keys of an entry given as a mapping
            rows += [(k, d, a, f"an entry of `{key}` given as a mapping: {doc}") for k, d, a, doc in
                     _rows(entry, f"{key}[i]")]
    return rows


def _value(value: Any) -> str:
    return "`null`" if value is None else f"`{value!r}`"


def _cell(text: str) -> str:
    return text.replace("|", "&#124;")


def _table(rows: list[tuple[str, Any, str, str]]) -> list[str]:
    lines = ["| key | default | allowed | meaning |", "|---|---|---|---|"]
    lines += [f"| `{key}` | {_cell(_value(default))} | {_cell(allowed)} | {_cell(doc)} |"
              for key, default, allowed, doc in rows]
    return lines


def _trainer_rows(name: str, cls: type) -> list[tuple[str, Any, str, str]]:
    """Return the keys of trainer section `name` that differ from the shared TrainerSection (new or other default)."""
    shared = {f.name: f for f in dataclasses.fields(TrainerSection)}
    base, instance = TrainerSection(), cls()
    own = {f.name for f in dataclasses.fields(cls)
           if not (f.name in shared and getattr(instance, f.name) == getattr(base, f.name)
                   and f.metadata == shared[f.name].metadata)}
    return _rows(cls, name, own)


# what the command lines do with sections and run folders (cooprl.cli, cooprl.run_folders)
RUNS_TEXT = [
    "## Which sections a script reads, and where a run writes", "",
    "- A script reads its own trainer section (MARLHF also its `rl_algorithm`'s, `iac:` or `maac:`). A config file "
    "with other trainers' sections and none of its own, or an `--override` of a section the script does not read, is "
    "an error that names the script reading it (a file shared by several scripts, with each one's section, loads in "
    "each). An `iac:` or `maac:` section beside a `marlhf:` one that reads it as its `rl_algorithm` (or that sets none "
    "of the keys every trainer has) is MARLHF's: `train_iac.py`/`train_maac.py` refuse the file. "
    "`evaluate.py --trainer X` checks the same; `evaluate_strategy.py` reads no trainer section.",
    "- A new run never writes into a folder that holds anything: when `<output.base_dir>/<output.run_name>` is taken "
    "(the CPU configs fix run_name: `make demo` run twice), the run writes `<run_name>-2` (`-3`, ...) and says so "
    "in its log; two commands started at once with one run_name get two folders (a new run claims its folder "
    "with a `.claimed` file), and a run that stops before writing anything (a model that would not load) leaves "
    "no folder behind. `--resume RUN_DIR` continues in the run's own folder, from its newest complete checkpoint, with "
    "its own config.yaml and the settings it was trained with: `--override` may change how far it trains "
    "(`max_steps`, `num_train_epochs`, `num_iterations`), its evaluation interval, logging, saving, W&B, the "
    "reward's executor and the devices (`cooprl.run_folders.RESUMABLE_KEYS`); another key is an error naming the "
    "change and how to start a new run from its models (`agent_model.init_from`). A `--config` beside it is an "
    "error too. A new "
    "run whose `checkpoint.checkpoint_dir` holds checkpoints, whose `output.save_path` holds final models, or whose "
    "folders are files or read-only, stops with "
    "one `error:` line before any model loads.",
    "- `--resume latest`: the newest run (its config.yaml written last: started or resumed last) of the script's "
    "trainer on the config's dataset, among `<run_name>` and `<run_name>-<n>` (without a run_name: "
    "`<trainer>-<dataset>-<time>`) under output.base_dir; an error when that run has no complete checkpoint. "
    "Resuming a finished run says so and exits 0, naming the override that trains it further (a larger "
    "`<trainer>.max_steps` below the epochs' steps, else `num_train_epochs`; the _iter trainers' `num_iterations`); "
    "a `max_steps` beyond `num_train_epochs`' steps trains those steps, with a warning that says so.",
    "- A run is one run. A run folder has one writer: a run holds a lock on its `.lock` file while it trains (the "
    "kernel frees it when the process dies, kill -9 included), and a second `--resume` of a running run is one "
    "`error:` line naming the process. `checkpoint.resume_from_checkpoint` naming another run's checkpoint (a "
    "checkpoint-N, a checkpoints folder or a run folder) starts a new run from it: held to that run's settings as "
    "`--resume` is (another G, learning rate or dataset is refused), in a folder and a W&B run of its own. A key "
    "that a run's config.yaml lacks (written by an older version) was trained at its default: a resume may not "
    "change it either. `latest` on a run without a checkpoint is an error that leaves no folder. A new run refuses "
    "a `policy_checkpoint_dir` holding an earlier run's snapshots (`initial/`, `iteration_<k>/`). Every start and "
    "resume appends the cooprl version, the git commit (null outside a checkout) and whether it had uncommitted "
    "changes to the run's `versions.jsonl`.",
    "- Every way a run ends leaves it resumable. Ctrl-C and SIGTERM (`timeout`, SLURM, `kill`) save a checkpoint "
    "after the step in progress and say how to continue (a second one stops at once). A save that cannot complete "
    "(a full disk, checked against the newest checkpoint's size before writing; a read-only folder) keeps the "
    "newest complete checkpoint and is one `error:` line saying how much space it needed and found; at the final "
    "models, the final checkpoint holds them. A save cut off by kill -9 leaves a `.checkpoint-<step>-*` folder, "
    "removed when the run starts or resumes; the resumed W&B run is sent the events of metrics.jsonl that the killed "
    "process had not written to it. A run started with `agent_model.init_from` is evaluated and resumed after its "
    "source is deleted when its checkpoint holds every weight (no LoRA, no reference KL; otherwise an error naming "
    "the folder to restore).",
    "- Exit status: 0 done (a finished run resumed too, and a run whose Ctrl-C or SIGTERM came during its final "
    "save: it waits for the save and ends finished); 2 after one `error:` line (bad input, a save that could not "
    "complete, a full disk); 130 after Ctrl-C and 143 after SIGTERM, in one line: in a step, the run saves a "
    "checkpoint after it; in the final evaluation, it saves its models first; in the evaluation before training or "
    "while models load, nothing was trained and nothing is saved; a second signal stops in the step, keeping the "
    "newest checkpoint (its log names it and the command that goes on). `evaluate.py` and `evaluate_strategy.py` "
    "end alike (130, 143, one line; 2 after an `error:` line). Several processes: `python -m "
    "cooprl.parallel.torchrun` ends in one line with 130 or 143 (plain torchrun prints its own `SignalException` "
    "traceback and exits 1: docs/scaling.md says why).",
]


def config_reference(strategy_sections: dict[str, type] | None = None) -> str:
    """Return the Markdown text of docs/config.md: the scripts' default configs, common sections, shared trainer
    keys, each trainer's own keys, the rules between keys, and `strategy_sections` (evaluate_strategy.py's
    `budget` and each strategy's section, set with --override like every key)."""
    task = task_config()
    common = [row for row in _rows(Config) if row[0].split(".")[0] not in TRAINER_SECTIONS]
    common += _rows(task) if task is not None else []
    scripts = ["| command | trainer section | config it loads |", "|---|---|---|"]
    scripts += [f"| `python {script}` | `{trainer}` | `{config}` |" for script, trainer, config in default_configs()]
    lines = ["# Config reference", "",
             "Generated by `python -m cooprl.config_docs envs.code_generation strategies > docs/config.md` from",
             "`cooprl/config/`, the code task's `envs/code_generation/config.py` and the `train_*.py` scripts. Every "
             "key has a default; `python train_X.py --print-config` prints a merged",
             "config with its values. A value outside \"allowed\" is an error that names the key.", "",
             "## What a bare script loads", "",
             "Without `--config`, each script loads its reference config (a GPU config: Qwen2.5-Coder-3B, bf16).",
             "The path is relative to the current directory, so run the scripts from the repository root. On a",
             "CPU, pass one of the `configs/*_cpu.yaml` files instead.", "",
             *scripts, "", *RUNS_TEXT, "",
             "## Common sections", "", *_table(common), "",
             "## Keys every trainer section has", "",
             "Written here as `<trainer>.key`: `magrpo.max_steps`, `iac.max_steps`, ... with the same meaning "
             "everywhere.", "",
             *_table([(f"<trainer>.{key[len('x.'):]}", d, a, doc) for key, d, a, doc in _rows(TrainerSection,
                                                                                              "x")]), ""]
    for name, cls in TRAINER_SECTIONS.items():
        lines += [f"## `{name}`: its own keys and other defaults", "", *_table(_trainer_rows(name, cls)), ""]
    lines += ["## Rules between keys", "", *[f"- {rule}" for rule in RULES + list(getattr(task, "RULES", ()))], ""]
    if strategy_sections:
        lines += ["## evaluate_strategy.py: the budget and each strategy's section", "",
                  "Set with `--override budget.KEY=VALUE` and `--override <strategy>.KEY=VALUE` (only the chosen "
                  "strategy's section), checked like every key above. Results go to "
                  "`<output.base_dir>/strategy-<strategy>-<dataset>/` (or `--override output.run_name=NAME`; a "
                  "config file's run_name names its training run and is not used; a training run's folder only "
                  "with `--checkpoint` from it) and are resumed only under the settings that made them "
                  "(`strategy_config_<strategy>.json`: the strategy, budget, model, prompting, the weights loaded, "
                  "resolved (a run's newer checkpoint is another setting), data (a `dataset.path` file by its "
                  "SHA-256) and seed): other settings are an error naming the keys that differ. A trained checkpoint "
                  "is prompted as its run trained it (`code_prompt.open_body`, `aux_main.main_sees_aux` of its "
                  "config.yaml, said on stderr; an `--override` of them wins).", ""]
        for name, cls in strategy_sections.items():
            lines += [f"### `{name}`", "", *_table(_rows(cls, name)), ""]
    return "\n".join(lines)


if __name__ == "__main__":
    import importlib
    import sys
    sections: dict[str, type] = {}
    for module in sys.argv[1:]:   # the environments whose task sections to list (they register on import)
        sections.update(getattr(importlib.import_module(module), "CONFIG_SECTIONS", {}))
    print(config_reference(sections), end="")
