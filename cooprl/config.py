"""Typed configuration: dataclass sections, YAML loading, `--override key.path=value`, validation.

A config file is YAML whose top-level keys are the sections below. `load_config(path, overrides)` merges
the file with the overrides (each value parsed as YAML), checks every key and value against the typed
fields, and returns a `Config`. Errors are `ConfigError`s whose message names the key, what was expected
and what was given (shortened: a value is never printed in full), with a did-you-mean suggestion for unknown keys.

Hostile input is refused with a ConfigError too: a file that is not UTF-8 text (binary, UTF-16), YAML whose
aliases expand past MAX_YAML_NODES nodes (a "billion laughs" file) or nest deeper than MAX_YAML_DEPTH, a recursive
alias, and a non-finite float (nan, inf) in any float field.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import reprlib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

import yaml

from cooprl.errors import UserError


class ConfigError(UserError, ValueError):
    """A user error in a config file or an override; the message is meant to be shown as is."""


MAX_CONFIG_BYTES = 1 << 20    # a config file is a few KB; a bigger one is not a config
MAX_YAML_NODES = 100_000      # nodes of a document with every alias expanded (the shipped configs: < 1,000)
MAX_YAML_DEPTH = 64           # nesting of a document (the shipped configs: 3)

_short = reprlib.Repr()
_short.maxstring, _short.maxother, _short.maxlong = 60, 60, 40
_short.maxlist = _short.maxtuple = _short.maxdict = _short.maxset = 4
_short.maxlevel = 2


def show(value: Any) -> str:
    """Return a short repr of `value` for an error message (long strings and big or deep containers are cut)."""
    return _short.repr(value)


def option(default: Any, doc: str, *, choices: tuple | None = None, min: float | None = None,
           max: float | None = None) -> Any:
    """Return a dataclass field with a default, a one-line doc and optional allowed values or range."""
    meta = {"doc": doc, "choices": choices, "min": min, "max": max}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    if dataclasses.is_dataclass(default):
        return field(default_factory=lambda: dataclasses.replace(default), metadata=meta)
    return field(default=default, metadata=meta)


# ----------------------------------------------------------------------------------------------- sections
@dataclass
class LoraSection:
    r: int = option(16, "LoRA rank", min=1)
    alpha: int = option(32, "LoRA scaling numerator (lora_alpha)", min=1)
    dropout: float = option(0.05, "dropout on the LoRA branch", min=0.0, max=1.0)
    target_modules: list[str] = option(["q_proj", "k_proj", "v_proj", "o_proj"], "module names that get adapters")


@dataclass
class AgentModelSection:
    name: str = option("offline:smollm2-135m-instruct",
                       "hub id, local folder, or an embedded model: offline:smollm2-135m-instruct, offline:tiny-random")
    type: str = option("qwen", "model family (informational; prompts are plain text unless chat_template is set)")
    temperature: float = option(0.6, "sampling temperature", min=0.0)
    top_p: float = option(0.6, "nucleus sampling mass", min=0.0, max=1.0)
    top_k: Optional[int] = option(None, "top-k sampling (null = off)", min=0)
    max_length: int = option(2048, "longest prompt + completion in tokens; longer prompts are cut from the left", min=16)
    torch_dtype: str = option("auto", "weights dtype (auto = bfloat16 on GPU, float32 on CPU)",
                              choices=("auto", "float32", "bfloat16", "float16"))
    device: str = option("auto", "auto (cuda when available), cpu or cuda[:N]")
    special_tokens: dict[str, str] = option({}, "tokens to set on the tokenizer, e.g. {pad_token: '<|pad|>'}")
    chat_template: bool = option(False, "wrap prompts in the tokenizer's chat template")
    lora: Optional[LoraSection] = option(None, "LoRA adapters ({r, alpha, dropout, target_modules}); null = full fine-tuning")
    generation_backend: str = option("hf", "who samples completions: hf (transformers generate) or vllm "
                                     "(CUDA GPU only; pip install -e .[vllm])", choices=("hf", "vllm"))
    vllm_gpu_memory_utilization: float = option(
        0.3, "share of the GPU's memory each agent's vLLM engine takes (weights + KV cache); training needs the rest",
        min=0.01, max=0.95)


@dataclass
class CriticModelSection:
    name: Optional[str] = option(None, "critic backbone (null = the agent's model)")
    torch_dtype: str = option("auto", "critic weights dtype", choices=("auto", "float32", "bfloat16", "float16"))
    lora: Optional[LoraSection] = option(None, "LoRA adapters on the critic backbone; null = full fine-tuning")


@dataclass
class DatasetSection:
    name: str = option("coop", "humaneval, coop (shipped cooperative set), or a hub id such as OpenMLRL/CoopHumanEval")
    type: str = option("coophumaneval", "dataset family", choices=("humaneval", "coophumaneval", "mbpp", "custom"))
    train_split: str = option("train[16:]", "training split with optional slice, e.g. test[33:163]")
    eval_split: str = option("test[:16]", "evaluation split with optional slice, e.g. test[:32]")
    path: Optional[str] = option(None, "local .json/.jsonl file of HumanEval-format records (overrides name)")


@dataclass
class OutputSection:
    base_dir: str = option("runs", "parent folder of run folders")
    run_name: Optional[str] = option(None, "run folder name (null = <trainer>-<dataset>-<time>)")
    verbose: bool = option(False, "print every episode's prompts, completions and rewards")
    save_final_model: bool = option(False, "save the trained models (or adapters) at the end")
    save_path: Optional[str] = option(None, "where to save the final models (null = <run dir>/final)")


@dataclass
class ExternalSection:
    mode: str = option("level_feedback", "how the next turn's prompt is built",
                       choices=("level_feedback", "plain", "expert_edits"))
    sandbox_slice: Union[int, str, None] = option(
        1, "asserts shown/run for feedback: n>0 first n, n<0 last |n|, 0/null/'all' every one")
    expert_model: str = option("deepseek-coder", "model of the expert_edits mode (OpenAI-compatible API)")
    external_prompt_passthrough: bool = option(False, "use the external prompt as is, without the agent's history")


@dataclass
class RewardProcessorSection:
    enabled: bool = option(True, "apply scale then shift to training rewards")
    scale_factor: float = option(1.0, "multiplies the raw reward")
    shift: Optional[float] = option(None, "added after scaling (null = -max reward: -4.0 for two agents, -2.1 for one)")


@dataclass
class CheckpointSection:
    checkpoint_dir: Optional[str] = option(None, "checkpoint folder (null = <run dir>/checkpoints)")
    checkpoint_interval: int = option(0, "save every N training steps (0 = only at the end)", min=0)
    checkpoint_total_limit: Optional[int] = option(2, "keep only the newest N checkpoints (null = all)", min=1)
    resume_from_checkpoint: Optional[str] = option(None, "checkpoint folder to resume from, or 'latest'")


@dataclass
class WandbSection:
    project: str = option("cooprl", "W&B project")
    entity: Optional[str] = option(None, "W&B entity (team or user)")
    name: Optional[str] = option(None, "W&B run name (null = the run folder name)")
    dir: Optional[str] = option(None, "W&B files folder (null = the run folder)")
    tags: list[str] = option([], "W&B tags")
    mode: str = option("offline", "online needs a key; offline writes locally; disabled logs to JSONL only",
                       choices=("online", "offline", "disabled"))
    id: Optional[str] = option(None, "W&B run id to continue (null = new run, or the checkpoint's run on resume)")
    resume: Optional[str] = option(None, "W&B resume policy", choices=(None, "allow", "must", "never", "auto"))


@dataclass
class TrainerSection:
    """Keys every trainer shares."""
    num_agents: int = option(2, "number of agents (aux + main = 2)", min=1)
    num_turns: int = option(2, "turns per episode", min=1)
    num_train_epochs: int = option(1, "passes over the training split", min=1)
    max_steps: Optional[int] = option(None, "stop after this many training steps (dataset items); null = epochs", min=1)
    learning_rate: float = option(2e-5, "actor learning rate (AdamW)", min=0.0)
    weight_decay: float = option(0.0, "AdamW weight decay", min=0.0)
    max_grad_norm: Optional[float] = option(1.0, "gradient clipping norm (null = off)", min=0.0)
    max_new_tokens: int = option(256, "tokens generated per completion (joint budget in centralized mode)", min=1)
    temperature: Optional[float] = option(None, "overrides agent_model.temperature", min=0.0)
    top_p: Optional[float] = option(None, "overrides agent_model.top_p", min=0.0, max=1.0)
    logging_steps: int = option(1, "log training metrics every N steps", min=1)
    eval_interval: int = option(16, "evaluate every N steps (0 = only at the end)", min=0)
    eval_num_samples: int = option(16, "eval problems used per evaluation", min=1)
    eval_num_generations: int = option(1, "samples per eval problem (for pass@k)", min=1)
    eval_pass_k: list[int] = option([1], "k values of pass@k reported at evaluation")
    discount: float = option(0.9, "discount of future turns' returns", min=0.0, max=1.0)
    early_termination_threshold: Optional[float] = option(
        -0.2, "do not expand a node whose mean processed reward exceeds this (null = never)")
    collaboration_mode: str = option("decentralized", "one model per agent, or one model for both roles",
                                     choices=("decentralized", "centralized"))
    centralized_prompt: str = option("concat", "centralized prompt: both agents' prompts (concat), the problem "
                                     "once (native), or the problem once with a worked example of the answer "
                                     "(example: best for small models)", choices=("concat", "native", "example"))
    centralized_answer: str = option("open", "bounded: prompt ends with <auxiliary> (example style: "
                                     "<auxiliary> def aux( ), stop at </main>", choices=("open", "bounded"))


@dataclass
class MAGRPOSection(TrainerSection):
    num_generations: int = option(4, "samples per agent per node (G)", min=1)
    joint_mode: str = option("aligned", "aligned pairs g-th samples (G joint actions); cross takes G^N",
                             choices=("aligned", "cross"))
    advantage_mode: str = option("mean", "baseline for advantages within a sibling group",
                                 choices=("mean", "raw", "max", "rloo"))
    advantage_normalization: bool = option(False, "divide advantages by the group's std")
    reference_kl_coef: float = option(0.0, "k3 KL penalty to the initial model (0 = no reference model)", min=0.0)
    rollout_buffer_size: int = option(1, "dataset items rolled out before each optimizer update", min=1)
    train_batch_size: Optional[int] = option(None, "sequences per forward in the update, a cap (null = all of an agent's samples of one item)", min=1)


@dataclass
class GRPOSection(MAGRPOSection):
    num_agents: int = option(1, "GRPO is MAGRPO with one agent", min=1, max=1)


@dataclass
class ActorCriticSection(TrainerSection):
    num_generations: int = option(1, "samples per agent per turn", min=1)
    critic_type: str = option("v", "v: value of the prompt; q: value of prompt + response", choices=("v", "q"))
    use_separate_critic: bool = option(True, "separate value model; false = value head on the actor")
    critic_learning_rate: float = option(1e-5, "critic learning rate", min=0.0)
    value_loss_coef: float = option(0.5, "weight of the critic's squared TD error", min=0.0)
    value_clip_range: Optional[float] = option(0.2, "value clipping in the shared-head mode (null = off)", min=0.0)
    advantage_normalization: bool = option(True, "normalize advantages over the buffer")
    rollout_buffer_size: int = option(4, "episodes collected before each update", min=1)


@dataclass
class ACSection(ActorCriticSection):
    num_agents: int = option(1, "AC is IAC with one agent", min=1, max=1)


@dataclass
class PreferenceFields:
    preference_num_candidates: int = option(4, "joint candidates sampled per problem", min=2)
    pair_selection: str = option("reward_gap", "how pairs are picked", choices=("reward_gap", "random", "all"))
    preference_pairs_per_sample: int = option(2, "pairs kept per problem", min=1)
    min_reward_gap: float = option(0.0, "pairs need winner reward - loser reward > this", min=0.0)


@dataclass
class MADPOSection(PreferenceFields, TrainerSection):
    num_turns: int = option(1, "preference methods are single-turn", min=1, max=1)
    dpo_beta: float = option(0.1, "DPO inverse temperature beta", min=0.0)
    reference_model: bool = option(False, "add the usual DPO reference-model terms (default: reference-free)")


@dataclass
class IterativeFields:
    num_iterations: int = option(3, "preference refresh iterations", min=1)
    comparator_policy: str = option("current", "who generates the comparison candidates",
                                    choices=("current", "copy", "model", "api"))
    comparator_model: Optional[str] = option(None, "model name for comparator_policy model/api")
    comparator_generation_mode: str = option("decentralized", "comparator writes aux and main separately or in one answer",
                                             choices=("decentralized", "centralized"))
    comparator_centralized_max_new_tokens: Optional[int] = option(
        None, "joint budget of a centralized comparator (null = max_new_tokens)", min=1)
    preference_replay_mode: str = option("current", "which earlier pairs are replayed",
                                         choices=("current", "all_history", "lambda_decay"))
    replay_lambda: float = option(0.5, "weight decay per iteration age in lambda_decay", min=0.0, max=1.0)


@dataclass
class MADPOIterSection(IterativeFields, MADPOSection):
    pass


@dataclass
class MARLHFSection(PreferenceFields, MAGRPOSection):
    num_turns: int = option(1, "turns of the online RL phase", min=1)
    rl_algorithm: str = option("magrpo", "online RL algorithm on the learned reward", choices=("magrpo", "iac", "maac"))
    reward_model_name: Optional[str] = option(None, "reward model backbone (null = agent_model.name)")
    reward_model_learning_rate: float = option(1e-5, "reward model learning rate", min=0.0)
    reward_model_epochs: int = option(1, "epochs over the preference pairs", min=1)
    reward_max_length: int = option(1024, "longest joint prompt + both outputs scored by the reward model", min=16)
    reward_eval_fraction: float = option(0.2, "held-out share of pairs for reward-model accuracy", min=0.0, max=0.9)
    normalize_reward: bool = option(True, "learned reward = (score - mean) / std of its scores on the pairs' answers")


@dataclass
class MARLHFIterSection(IterativeFields, MARLHFSection):
    pass


TRAINER_SECTIONS: dict[str, type] = {
    "magrpo": MAGRPOSection, "grpo": GRPOSection, "iac": ActorCriticSection, "maac": ActorCriticSection,
    "ac": ACSection, "madpo": MADPOSection, "madpo_iter": MADPOIterSection, "marlhf": MARLHFSection,
    "marlhf_iter": MARLHFIterSection,
}


@dataclass
class Config:
    agent_model: AgentModelSection = option(AgentModelSection(), "the agents' model (homogeneous agents)")
    agents: Optional[list[str]] = option(None, "one model name per agent (heterogeneous agents); null = agent_model.name")
    critic_model: CriticModelSection = option(CriticModelSection(), "critic backbone for actor-critic trainers")
    critics: Optional[list[str]] = option(None, "one critic model name per agent; null = critic_model.name")
    dataset: DatasetSection = option(DatasetSection(), "problems")
    seed: int = option(42, "seed of every random number generator, 0 to 2^32 - 1", min=0, max=2**32 - 1)
    output: OutputSection = option(OutputSection(), "run folder and final model")
    external: ExternalSection = option(ExternalSection(), "transitions between turns")
    reward_processor: RewardProcessorSection = option(RewardProcessorSection(), "training reward transform")
    checkpoint: CheckpointSection = option(CheckpointSection(), "checkpoints and resume")
    wandb: WandbSection = option(WandbSection(), "Weights & Biases logging")
    magrpo: MAGRPOSection = option(MAGRPOSection(), "MAGRPO trainer")
    grpo: GRPOSection = option(GRPOSection(), "GRPO baseline (one agent)")
    iac: ActorCriticSection = option(ActorCriticSection(), "independent actor-critic")
    maac: ActorCriticSection = option(ActorCriticSection(), "actor-critic with one centralized critic")
    ac: ACSection = option(ACSection(), "single-agent actor-critic baseline")
    madpo: MADPOSection = option(MADPOSection(), "multi-agent DPO")
    madpo_iter: MADPOIterSection = option(MADPOIterSection(), "iterative multi-agent DPO")
    marlhf: MARLHFSection = option(MARLHFSection(), "reward model + online RL")
    marlhf_iter: MARLHFIterSection = option(MARLHFIterSection(), "iterative MARLHF")

    def trainer(self, name: str) -> Any:
        """Return the section of trainer `name` (e.g. 'magrpo')."""
        return getattr(self, name)

    def sections_read_by(self, trainer: str) -> list[str]:
        """Return the trainer sections `trainer` reads: its own, plus its `rl_algorithm`'s (MARLHF with IAC or
        MAAC takes those trainers' own keys, such as critic_type, from their sections)."""
        rl = getattr(self.trainer(trainer), "rl_algorithm", None)
        return [trainer] + ([rl] if rl in TRAINER_SECTIONS and rl != "magrpo" else [])

    def to_dict(self, trainer: str | None = None) -> dict[str, Any]:
        """Return the config as plain data; with `trainer`, the sections of trainers it does not read are left out."""
        data = dataclasses.asdict(self)
        if trainer is not None:
            kept = self.sections_read_by(trainer)
            data = {k: v for k, v in data.items() if k not in TRAINER_SECTIONS or k in kept}
        return data

    def to_yaml(self, trainer: str | None = None) -> str:
        """Return the config as YAML text (what --print-config prints and config.yaml holds)."""
        return yaml.safe_dump(self.to_dict(trainer), sort_keys=False, default_flow_style=False)


# ----------------------------------------------------------------------------------------------- building
_NONE = type(None)


def _describe(tp: Any) -> str:
    if tp is _NONE:
        return "null"
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(a) for a in args)
    if origin is list:
        return f"a list of {_describe(args[0])}"
    if origin is dict:
        return "a mapping"
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Return `value` converted to type `tp`, or raise ConfigError naming `key`."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        if value is None and _NONE in args:
            return None
        candidates = [a for a in args if a is not _NONE]
        if len(candidates) == 1:  # Optional[X]: let X's own, more precise error through
            return _coerce(value, candidates[0], key)
        for arg in candidates:
            try:
                return _coerce(value, arg, key)
            except ConfigError:
                continue
        raise ConfigError(f"{key}: expected {_describe(tp)}, got {show(value)}")
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping of {tp.__name__} keys, got {show(value)}")
        return build_section(tp, value, key)
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected {_describe(tp)}, got {show(value)}")
        return [_coerce(v, args[0], f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {show(value)}")
        if len(args) != 2:
            return dict(value)
        return {_coerce(k, args[0], f"{key} key"): _coerce(v, args[1], f"{key}.{k}") for k, v in value.items()}
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        number = None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = value
        elif isinstance(value, str):  # PyYAML reads 1e-5 (no dot) as a string
            try:
                number = float(value)
            except ValueError:
                pass
        if number is not None:
            try:
                number = float(number)
            except OverflowError:  # an int too large for a float
                number = math.inf
            if not math.isfinite(number):  # .nan, .inf, 'nan', 1e999: every float field needs a real number
                raise ConfigError(f"{key}: expected a finite number, got {show(value)}")
            return number
    elif tp is str:
        if isinstance(value, str):
            return value
    raise ConfigError(f"{key}: expected {_describe(tp)}, got {show(value)}")


def _check_bounds(value: Any, meta: Any, key: str) -> None:
    choices = meta.get("choices")
    if choices is not None and value not in choices:
        allowed = ", ".join("null" if c is None else str(c) for c in choices)
        raise ConfigError(f"{key}: {show(value)} is not allowed; choose one of: {allowed}")
    lo, hi = meta.get("min"), meta.get("max")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            bounds = f"[{'-inf' if lo is None else lo}, {'inf' if hi is None else hi}]"
            raise ConfigError(f"{key}: {show(value)} is out of range; expected a value in {bounds}")


def unknown_key_error(key: str, known: list[str], prefix: str) -> ConfigError:
    """Return a ConfigError for an unknown key with the nearest valid keys as suggestions."""
    full = f"{prefix}.{key}" if prefix else key
    if len(full) > 100:
        full = show(full)
    near = difflib.get_close_matches(key, known, n=2, cutoff=0.75)
    hint = " or ".join(f"{prefix + '.' if prefix else ''}{n}" for n in near)
    if hint:
        return ConfigError(f"{full}: unknown key; did you mean {hint}?")
    # a key of another trainer (e.g. madpo.comparator_policy, which only the iterative trainers have)
    owners = [name for name, cls in TRAINER_SECTIONS.items()
              if prefix in TRAINER_SECTIONS and key in {f.name for f in dataclasses.fields(cls)}]
    if owners:
        return ConfigError(f"{full}: unknown key; {prefix} has no {key}, these trainers do: {', '.join(owners)}")
    return ConfigError(f"{full}: unknown key; valid keys here: {', '.join(known)}")


def build_section(cls: type, data: dict[str, Any], prefix: str = "") -> Any:
    """Return an instance of dataclass `cls` built from `data`, every key and value checked."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        full = f"{prefix}.{key}" if prefix else str(key)
        if key not in fields:
            raise unknown_key_error(str(key), list(fields), prefix)
        converted = _coerce(value, hints[key], full)
        _check_bounds(converted, fields[key].metadata, full)
        kwargs[key] = converted
    return cls(**kwargs)


def parse_override(text: str) -> tuple[list[str], Any]:
    """Return (key path, value) of `a.b.c=value`, the value parsed as YAML (`null`, `[1, 2]`, `3e-5`...)."""
    if "=" not in text:
        raise ConfigError(f"--override {text!r}: expected KEY.PATH=VALUE")
    key, raw = text.split("=", 1)
    path = [p for p in key.strip().split(".")]
    if not all(path):
        raise ConfigError(f"--override {text!r}: empty part in key {key!r}")
    try:
        value = load_yaml_text(raw) if raw.strip() else ""
    except yaml.YAMLError as err:
        raise ConfigError(f"--override {text!r}: value is not valid YAML ({_yaml_problem(err)})") from None
    except ConfigError as err:
        raise ConfigError(f"--override {text!r}: {err}") from None
    return path, value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Return a copy of `data` with each `a.b=v` override set (intermediate mappings created as needed)."""
    merged = yaml.safe_load(yaml.safe_dump(data)) or {}
    for text in overrides:
        path, value = parse_override(text)
        node = merged
        for i, part in enumerate(path[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise ConfigError(f"--override {text!r}: {'.'.join(path[:i + 1])} is a value, not a section")
            node = child
        node[path[-1]] = value
    return merged


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that checks each composed document before building it: at most MAX_YAML_NODES nodes with every
    alias expanded, at most MAX_YAML_DEPTH levels, no recursive alias. (PyYAML itself shares aliased nodes, but
    everything after it, validation included, walks the expanded tree: a 500-byte file of nested aliases is
    10^9 elements.)"""

    def compose_document(self) -> Any:
        node = super().compose_document()
        _check_node_graph(node)
        return node


def _children(node: Any) -> list[Any]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _check_node_graph(root: Any) -> None:
    """Raise ConfigError when the node graph under `root`, aliases expanded, is too big, too deep or cyclic."""
    sizes: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded node count, depth)
    open_nodes: set[int] = set()            # the nodes being walked: the current node's ancestors
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if finished:
            open_nodes.discard(key)
            children = [sizes[id(child)] for child in _children(node)]
            size = 1 + sum(c[0] for c in children)
            depth = 1 + max((c[1] for c in children), default=0)
            if size > MAX_YAML_NODES:
                raise ConfigError(f"its aliases expand to more than {MAX_YAML_NODES:,} values (line {node.start_mark.line + 1}): "
                                  "refused (a config needs a few hundred)")
            if depth > MAX_YAML_DEPTH:
                raise ConfigError(f"nested more than {MAX_YAML_DEPTH} levels deep: refused")
            sizes[key] = (size, depth)
            continue
        if key in sizes:
            continue
        if key in open_nodes:
            raise ConfigError(f"recursive alias (line {node.start_mark.line + 1}): refused")
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in sizes)


def load_yaml_text(text: str) -> Any:
    """Return the data of one YAML document, refusing documents that expand too big or nest too deep
    (ConfigError without the file name) and python-specific tags (yaml.YAMLError)."""
    try:
        return yaml.load(text, Loader=_BoundedLoader)
    except RecursionError:  # PyYAML composes nested collections recursively
        raise ConfigError(f"nested more than {MAX_YAML_DEPTH} levels deep: refused") from None


def _yaml_problem(err: yaml.YAMLError) -> str:
    """Return a one-line description of a YAML error, without the snippet of the file PyYAML appends."""
    problem = getattr(err, "problem", None)
    mark = getattr(err, "problem_mark", None)
    if problem is None:
        return " ".join(str(err).split())[:200]
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    context = getattr(err, "context", None)
    return f"{context + ': ' if context else ''}{problem}{where}"


def read_yaml(path: str | Path) -> dict[str, Any]:
    """Return the mapping in a YAML file; ConfigError when it is missing, not UTF-8 YAML, or not a mapping."""
    path = Path(path)
    name = repr(str(path))
    if path.is_dir():
        raise ConfigError(f"config file {name} is a directory, not a YAML file")
    if not path.is_file():
        raise ConfigError(f"config file {name} not found")
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as err:
        raise ConfigError(f"config file {name} cannot be read: {err.strerror or err}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"config file {name} is larger than {MAX_CONFIG_BYTES >> 20} MiB: not a config file")
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")) or b"\x00" in raw:
        kind = "UTF-16 or UTF-32 text" if raw.startswith((b"\xff\xfe", b"\xfe\xff")) else "binary data (NUL bytes)"
        raise ConfigError(f"config file {name} is not UTF-8 text (it holds {kind}); save it as UTF-8 YAML")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise ConfigError(f"config file {name} is not UTF-8 text (byte 0x{raw[err.start]:02x} at offset {err.start}): "
                          "not a YAML config") from None
    try:
        data = load_yaml_text(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"config file {name} is not valid YAML: {_yaml_problem(err)}") from None
    except ConfigError as err:
        raise ConfigError(f"config file {name}: {err}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {name}: expected a mapping of sections at the top level")
    return data


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """Return the validated Config from a YAML file (optional) plus `--override` strings."""
    data = read_yaml(path) if path is not None else {}
    data = apply_overrides(data, overrides or [])
    config = build_section(Config, data)
    check_consistency(config)
    return config


def trainer_of_file(path: str | Path) -> str | None:
    """Return the trainer a config file is for, when its trainer sections say it; else None.

    A run folder's config.yaml holds only the sections its trainer reads: one section, or a MARLHF section plus
    the section of its `rl_algorithm`. ConfigError when the file holds several unrelated trainer sections.
    """
    data = read_yaml(path)
    present = [name for name in TRAINER_SECTIONS if name in data]
    # sections read as another's rl_algorithm (MAGRPO under MARLHF reads the MARLHF section, not its own)
    helpers = {data[name].get("rl_algorithm") for name in present if isinstance(data[name], dict)} - {"magrpo"}
    candidates = [name for name in present if name not in helpers]
    if len(candidates) > 1:
        raise ConfigError(f"config file {str(path)!r} has the sections of several trainers ({', '.join(candidates)}): "
                          "name the one to use with --trainer")
    return candidates[0] if candidates else None


def check_consistency(config: Config) -> None:
    """Raise ConfigError for values that are fine alone but not together."""
    slice_ = config.external.sandbox_slice
    if isinstance(slice_, str) and slice_.lower() != "all":
        raise ConfigError(f"external.sandbox_slice: expected an int, null or 'all', got {slice_!r}")
    for name in TRAINER_SECTIONS:
        section = config.trainer(name)
        if any(k < 1 or k > section.eval_num_generations for k in section.eval_pass_k):
            raise ConfigError(f"{name}.eval_pass_k: every k must be in [1, {name}.eval_num_generations="
                              f"{section.eval_num_generations}], got {section.eval_pass_k}")


def describe_fields(cls: type = Config, prefix: str = "") -> list[tuple[str, Any, str]]:
    """Return (key, default, doc) for every leaf key, recursively; used for the README's config reference."""
    rows = []
    instance = cls()
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        key = f"{prefix}.{f.name}" if prefix else f.name
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            rows.extend(describe_fields(tp, key))
        else:
            rows.append((key, getattr(instance, f.name), f.metadata.get("doc", "")))
    return rows
