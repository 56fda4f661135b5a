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
           max: float | None = None, aliases: tuple[str, ...] = (), null_is_default: bool = False) -> Any:
    """Return a dataclass field with a default, a one-line doc and optional allowed values or range.

    `aliases`: other names the key is read under (upstream's names, e.g. agent_learning_rate for learning_rate);
    the config keeps and prints ours. `null_is_default`: a section field where `null` means "all defaults"
    (upstream writes `critic_model: null`)."""
    meta = {"doc": doc, "choices": choices, "min": min, "max": max, "aliases": tuple(aliases),
            "null_is_default": null_is_default}
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
    vllm_weight_sync: str = option(
        "merged", "how a vLLM engine gets the trained weights: merged (after every optimizer step the weights, LoRA "
        "merged in, are pushed into the engine) or lora (the LoRA adapter is saved and sampled as a vLLM LoRA request "
        "on the untouched base weights: no push; needs agent_model.lora)", choices=("merged", "lora"))
    vllm_sleep: bool = option(False, "put each vLLM engine to sleep (level 1: weights to CPU memory, KV cache freed) "
                              "between its sampling calls, so the update has the GPU memory; one engine per process "
                              "(vLLM allows one sleeping engine), i.e. one agent per process")
    vllm_tensor_parallel_size: int = option(1, "GPUs each vLLM engine shards its model over; above 1 the engine's "
                                            "workers are separate processes, so needs vllm_weight_sync: lora", min=1)
    vllm_max_num_seqs: Optional[int] = option(
        None, "most sequences a vLLM engine schedules in one step (vLLM's max_num_seqs; null = vLLM's default); about "
        "prompts x num_generations suffices, and less makes its start-up profiling set aside less memory", min=1)
    vllm_max_num_batched_tokens: Optional[int] = option(
        None, "most tokens a vLLM engine processes in one step (vLLM's max_num_batched_tokens; null = vLLM's default; "
        "TRL uses 4096); less: less activation memory set aside, long prompts prefilled in more steps", min=1)
    vllm_importance_cap: Optional[float] = option(
        None, "off-policy correction for vLLM's sampler (TRL's vllm_importance_sampling_correction): each completion "
        "token's policy-gradient term is weighted by min(q_hf / q_vllm, cap), q the token's probability under the "
        "sampling settings (temperature, top-k, top-p) from the trained model and from vLLM; null = off, 2 = TRL's "
        "default; needs generation_backend vllm; policy-gradient trainers only (not madpo, madpo_iter)", min=1.0)
    logprob_chunk_size: Optional[int] = option(
        None, "the update's log-probs: completion positions whose [positions x vocab] logits exist at once (the LM "
        "head, log-softmax and its backward run chunk by chunk); null = the whole batch's at once", min=1)
    gradient_checkpointing: bool = option(False, "recompute each layer's activations in the backward instead of "
                                          "keeping them (transformers' gradient checkpointing, non-reentrant; LoRA too)")
    autocast: str = option("none", "bf16: the agents' forward passes (update and HF generation) run under bfloat16 "
                           "autocast, on CPU too; weights stay in torch_dtype; log-softmax in float32",
                           choices=("none", "bf16"))
    init_from: Optional[str] = option(
        None, "start every agent from a finished run's agents: a run folder (its final/ models, else its newest "
        "checkpoint) or a checkpoint folder; each agent loads its own saved weights, or its LoRA adapters, which it "
        "then trains on (the tokenizer stays agent_model.name's; with LoRA a reference KL's frozen start model is the base "
        "model, adapters off); null = the models as agent_model names them")


@dataclass
class CriticModelSection:
    name: Optional[str] = option(None, "critic backbone (null = the agent's model)")
    type: str = option("qwen", "model family (informational, like agent_model.type)")
    max_length: Optional[int] = option(None, "longest critic input in tokens, cut from the left like the actors' "
                                       "prompts (null = agent_model.max_length)", min=16)
    temperature: Optional[float] = option(None, "accepted for upstream's configs and unused: a critic scores, it does "
                                          "not sample", min=0.0)
    top_p: Optional[float] = option(None, "accepted for upstream's configs and unused: a critic does not sample",
                                    min=0.0, max=1.0)
    torch_dtype: str = option("auto", "critic weights dtype", choices=("auto", "float32", "bfloat16", "float16"))
    lora: Optional[LoraSection] = option(None, "LoRA adapters on the critic backbone; null = full fine-tuning")


@dataclass
class OutputSection:
    base_dir: str = option("runs", "parent folder of run folders")
    run_name: Optional[str] = option(None, "run folder name (null = <trainer>-<dataset>-<time>)")
    verbose: bool = option(False, "print every episode's prompts, completions and rewards")
    save_final_model: bool = option(False, "save the trained models (or adapters) at the end")
    save_path: Optional[str] = option(None, "where to save the final models (null = <run dir>/final)")


@dataclass
class RewardSection:
    executor: str = option("local", "where the reward's work runs (the code task: its programs): local (this "
                           "machine's worker pool) or ray (worker pools on a Ray cluster's CPU nodes; needs the ray "
                           "extra)", choices=("local", "ray"))
    ray_address: Optional[str] = option(None, "the Ray cluster to join (null = RAY_ADDRESS, else a local Ray)")
    ray_actors: int = option(2, "executor ray: worker pools (Ray actors) spread over the cluster's nodes", min=1)
    ray_workers_per_actor: int = option(4, "executor ray: workers (CPUs) per pool", min=1)
    require_full_isolation: bool = option(False, "refuse to train when the reward's executor cannot isolate its "
                                          "work fully (no namespaces, no separate uid: its start-up warning says "
                                          "what lacks)")
    pipeline_nodes: Optional[int] = option(
        None, "MAGRPO/GRPO rollouts: nodes of a turn sampled per generate call (null = the whole turn in one call per "
        "agent; 1 = node by node, as upstream): with reward.pipeline, each chunk's joint actions are scored "
        "while the next chunk generates. Another chunking draws other samples (same distributions)", min=1)
    pipeline: bool = option(True, "score each chunk of reward.pipeline_nodes nodes on a background thread while the "
                            "next chunk generates (the results are identical to scoring each chunk in turn)")


@dataclass
class RewardProcessorSection:
    enabled: bool = option(True, "apply scale then shift to training rewards")
    scale_factor: float = option(1.0, "multiplies the raw reward")
    shift: Optional[float] = option(None, "added after scaling (null = minus the task's largest raw reward); "
                                    "also read as upstream's <trainer>.reward_shift")


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
    num_agents: int = option(2, "number of agents (the task's roles)", min=1)
    num_turns: int = option(2, "turns per episode", min=1)
    num_train_epochs: int = option(1, "passes over the training split", min=1)
    max_steps: Optional[int] = option(None, "stop after this many training steps (dataset items); null = epochs", min=1)
    learning_rate: float = option(2e-5, "actor learning rate (AdamW)", min=0.0,
                                  aliases=("agent_learning_rate", "actor_learning_rate"))
    weight_decay: float = option(0.01, "AdamW weight decay (0.01: torch's default, what upstream's AdamW gets)", min=0.0)
    max_grad_norm: Optional[float] = option(None, "gradient clipping norm (null = off, as upstream)", min=0.0)
    reference_kl_coef: float = option(0.0, "weight of a k3 KL penalty to the frozen start model (0 = off, no "
                                      "reference model kept); how it acts: reference_kl_form", min=0.0)
    reference_kl_form: str = option(
        "reward", "reward (upstream): coef x the k3 KL of each sampled completion (summed over its tokens, no gradient) "
        "is subtracted from its reward (MAGRPO: its return; IAC/MAAC: its TD target) before advantages; loss: coef x "
        "the k3 KL is added to the policy loss, with gradient", choices=("reward", "loss"))
    max_new_tokens: int = option(256, "tokens generated per completion (joint budget in centralized mode)", min=1)
    temperature: Optional[float] = option(None, "overrides agent_model.temperature", min=0.0)
    top_p: Optional[float] = option(None, "overrides agent_model.top_p", min=0.0, max=1.0)
    top_k: Optional[int] = option(None, "overrides agent_model.top_k (null = agent_model.top_k)", min=0)
    logging_steps: int = option(1, "log training metrics every N steps", min=1)
    eval_interval: int = option(16, "evaluate every N steps (0 = only at the end)", min=0)
    eval_at_start: bool = option(True, "also evaluate before the first step of a fresh run (step 0: the curves' "
                                 "starting point and the summary's before/after; a resumed run does not repeat it)")
    eval_num_samples: int = option(16, "eval problems used per evaluation", min=1)
    eval_num_generations: int = option(1, "samples per eval problem (for pass@k)", min=1)
    eval_pass_k: list[int] = option([1], "k values of pass@k reported at evaluation")
    eval_batch_size: Optional[int] = option(None, "eval problems rolled out together (one sampling batch); "
                                            "null = all of an evaluation at once", min=1)
    parallel_training: str = option(
        "none", "none (or auto): one process, the agents one after the other; mp: one process, each agent's "
        "generation and update concurrent on its own device (agent_devices; magrpo, grpo); ddp: one process per "
        "device started by torchrun or accelerate launch, a step takes one item per process, gradients averaged "
        "(every trainer: iac, maac, ac with update_schedule episodes; madpo, madpo_iter with one DPO step per "
        "training step; marlhf, marlhf_iter with a MAGRPO-family rl_algorithm; see README Scaling out); fsdp: ddp "
        "with each agent's parameters, gradients and optimizer states sharded over the processes (torch FSDP2, the "
        "ZeRO-3 layout; every trainer, the actor-critics with use_separate_critic)",
        choices=("none", "auto", "mp", "ddp", "fsdp"))
    agent_devices: Union[str, list[str], None] = option(
        None, "the agents' devices: one device (cpu, cuda, cuda:N, mps) for every agent, or a list with one device "
        "per agent (null = agent_model.device)")
    discount: float = option(0.9, "discount of future turns' returns", min=0.0, max=1.0)
    early_termination_threshold: Optional[float] = option(
        -0.2, "do not expand a node whose mean processed reward exceeds this (null = never)")
    collaboration_mode: str = option("decentralized", "one model per agent, or one model for both roles",
                                     choices=("decentralized", "centralized"))
    centralized_prompt: str = option("concat", "centralized prompt: every agent's prompt (concat), the problem "
                                     "once (native), or the problem once with a worked example of the answer "
                                     "(example: best for small models)", choices=("concat", "native", "example"))
    centralized_answer: str = option("open", "bounded: the prompt opens the first role's section of the answer and "
                                     "generation stops at the end of the last one's; open: free form",
                                     choices=("open", "bounded"))


@dataclass
class MAGRPOSection(TrainerSection):
    num_generations: int = option(4, "samples per agent per node (G)", min=1)
    joint_mode: str = option("aligned", "aligned pairs g-th samples (G joint actions); cross takes G^N",
                             choices=("aligned", "cross"))
    advantage_mode: str = option("mean", "baseline for advantages within a sibling group",
                                 choices=("mean", "raw", "max", "rloo"))
    advantage_normalization: bool = option(True, "standardize each sibling group's advantages (center, divide by std)")
    cross_return: str = option("sum", "cross mode: a sample's return is the sum (upstream) or the mean of the returns "
                               "of the joint actions it is in", choices=("sum", "mean"))
    update_schedule: str = option(
        "nodes", "nodes (upstream): rollout_buffer_size counts tree nodes per agent; a full buffer is trained turn by "
        "turn, shuffled, one optimizer step per train_batch_size nodes. items: rollout_buffer_size counts dataset "
        "items; one optimizer step per agent on all their samples (train_batch_size = sequences per forward)",
        choices=("nodes", "items"))
    rollout_buffer_size: int = option(2, "nodes (update_schedule nodes) or dataset items (items) collected before "
                                      "an update", min=1)
    train_batch_size: Optional[int] = option(
        None, "nodes: nodes per optimizer step (null = rollout_buffer_size); items: sequences per forward, a cap "
        "(null = all of an agent's samples of one item)", min=1)


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
    advantage_normalization: bool = option(True, "normalize advantages (within each turn's group with "
                                           "update_schedule turns, over the whole buffer with episodes)")
    update_schedule: str = option(
        "turns", "turns (upstream): rollout_buffer_size counts one agent's turn samples (one per turn of each "
        "episode); a full buffer is trained turn by turn (turn 1 first), advantages normalized within the turn, its "
        "samples shuffled, one optimizer step per train_batch_size samples. episodes: rollout_buffer_size counts "
        "episodes; advantages normalized over the whole buffer; steps over it in buffer order",
        choices=("turns", "episodes"))
    rollout_buffer_size: int = option(4, "turn samples per agent (update_schedule turns) or episodes (episodes) "
                                      "collected before each update", min=1)
    train_batch_size: Optional[int] = option(None, "turn samples per optimizer step within an update (null: "
                                             "rollout_buffer_size with update_schedule turns, as upstream; the whole "
                                             "buffer in one step with episodes)", min=1)
    critic_devices: Union[str, list[str], None] = option(
        None, "the separate critics' devices: one device for every critic, or a list with one per critic (IAC: one "
        "per agent; MAAC: one) (null = agent_model.device)")


@dataclass
class ACSection(ActorCriticSection):
    num_agents: int = option(1, "AC is IAC with one agent", min=1, max=1)


@dataclass
class PreferenceFields:
    preference_num_candidates: int = option(20, "joint candidates sampled per problem", min=2)
    pair_selection: str = option("reward_gap", "how pairs are picked: reward_gap, random, all (among all candidates); "
                                 "comparator_reward: the policy's candidate i against the comparator's candidate i (without a "
                                 "comparator the policy writes both sets), best comparator reward first",
                                 choices=("reward_gap", "random", "all", "comparator_reward"))
    preference_pairs_per_sample: Optional[int] = option(4, "pairs kept per problem (null = every qualifying pair)", min=1,
                                                        aliases=("preference_pairs_per_item",))
    min_reward_gap: float = option(0.0, "pairs need winner reward - loser reward > this", min=0.0)
    use_environment_step: bool = option(True, "upstream's env_step (W&B's x axis, default as upstream): "
                                        "environment_steps_per_pair per trained pair (MADPO); false = the joint "
                                        "answers sampled")
    environment_steps_per_pair: int = option(2, "environment steps one trained pair counts for (a pair = 2 joint "
                                             "answers)", min=1)


@dataclass
class MADPOSection(PreferenceFields, TrainerSection):
    num_turns: int = option(1, "preference methods are single-turn", min=1, max=1)
    # upstream's older MADPO schema (commit 88b74938) named three of these keys otherwise: read as aliases
    num_train_epochs: int = option(1, "passes over the training split (offline pairs: each problem's pairs are "
                                   "trained on once per pass)", min=1, aliases=("dpo_epochs_per_iteration",))
    num_iterations: int = option(1, "plain MADPO is one iteration (upstream's older MADPO schema has the key; "
                                 "madpo_iter iterates)", min=1, max=1)
    dpo_beta: float = option(0.1, "DPO inverse temperature beta", min=0.0, aliases=("beta",))
    joint_mode: str = option("aligned", "candidates are aligned joint answers (the g-th sample of each agent); "
                             "the only mode preference pairs support", choices=("aligned",))
    rollout_buffer_size: Optional[int] = option(None, "upstream's fallback for train_batch_size: pairs per DPO "
                                                "optimizer step when train_batch_size is null", min=1)
    train_batch_size: Optional[int] = option(None, "pairs per DPO optimizer step: a step's pairs (new and replayed) "
                                             "are trained in chunks of this many, one optimizer step each "
                                             "(null = rollout_buffer_size; both null = all in one step)", min=1)
    advantage_normalization: bool = option(True, "accepted for upstream's configs; DPO has no advantages (no effect, "
                                           "as upstream)")
    num_generations: int = option(1, "accepted for upstream's configs; candidates per problem are "
                                  "preference_num_candidates (no effect)", min=1)
    reference_model: bool = option(False, "add the usual DPO reference-model terms (default: reference-free)",
                                   aliases=("use_reference_model",))
    reference_kl_form: str = option("loss", "MADPO: reference_kl_coef x the k3 KL is a term of the DPO loss (a DPO "
                                    "step has no reward to penalize)", choices=("loss",))
    pair_collection: str = option(
        "offline", "offline (upstream): each iteration's pairs are collected once, at its first step, from the policy "
        "as it is then (MADPO: the start policy) on every problem of the step plan, then trained on; online: every "
        "step samples new pairs for its problem from the current policy", choices=("offline", "online"))


@dataclass
class IterativeFields:
    num_iterations: int = option(4, "preference refresh iterations", min=1)
    pair_selection: str = option("comparator_reward", "how pairs are picked (as in madpo; the iterative default is "
                                 "upstream's comparator_reward)",
                                 choices=("reward_gap", "random", "all", "comparator_reward"))
    comparator_policy: str = option("current", "who generates the comparison candidates: current (the live "
                                    "policies), current_copy (a frozen copy of the policies, refreshed at the start of "
                                    "every iteration), copy (frozen start policies), history (the policies "
                                    "comparator_history_k iterations ago), model, api",
                                    choices=("current", "current_copy", "copy", "history", "model", "api"))
    comparator_model: Optional[str] = option(None, "model name for comparator_policy model/api",
                                             aliases=("comparator_model_name",))
    comparator_agents: Optional[list[str]] = option(None, "comparator_policy model: one model name per role "
                                                    "(instead of comparator_model for every role)")
    comparator_devices: Union[str, list[str], None] = option(
        None, "the comparator models' devices: one device, or a list with one per comparator role (a model two roles "
        "share goes to its first role's) (null = the first agent's device)")
    comparator_num_candidates: Optional[int] = option(
        None, "comparator candidates per problem (null: preference_num_candidates with comparator_candidate_budget "
        "separate; up to half of preference_num_candidates with shared)", min=1)
    comparator_candidate_budget: str = option(
        "separate", "separate (upstream): the policies write preference_num_candidates and the comparator "
        "comparator_num_candidates of its own (comparator_policy current: the live policies write that second set); "
        "shared: without comparator_num_candidates the comparator's candidates come out of preference_num_candidates "
        "(up to half; current: the policies' first half plays the comparator)", choices=("separate", "shared"))
    comparator_history_k: Optional[int] = option(None, "comparator_policy history: at iteration i, the policies as "
                                                 "upstream's checkpoint of iteration i - k held them (the start of "
                                                 "iteration i - k + 1; the start policies before that; null = 1)",
                                                 min=1)
    comparator_generation_mode: str = option("decentralized", "comparator writes each role's answer "
                                             "separately or all in one answer",
                                             choices=("decentralized", "centralized"))
    comparator_centralized_agent_index: int = option(
        0, "centralized comparator of comparator_policy current/copy/history: which agent's model writes the joint "
        "answer", min=0)
    comparator_centralized_max_new_tokens: Optional[int] = option(
        None, "joint budget of a centralized comparator (null = max_new_tokens)", min=1)
    comparator_api_url: Optional[str] = option(None, "comparator_policy api: the endpoint (null = "
                                               "COOPRL_EXPERT_BASE_URL / OPENAI_BASE_URL)")
    comparator_api_format: str = option("generic", "comparator_policy api: generic = POST {prompt, n, max_tokens, "
                                        "model} to comparator_api_url, answer {completions: [...]}; openai = chat "
                                        "completions under comparator_api_url", choices=("generic", "openai"))
    comparator_api_model: Optional[str] = option(None, "comparator_policy api: the model name sent to the API "
                                                 "(null = comparator_model)")
    comparator_api_max_n_per_request: Optional[int] = option(
        None, "comparator_policy api: at most this many completions per request (null = all of a problem's in one)",
        min=1)
    comparator_api_key_env: Optional[str] = option(None, "comparator_policy api: environment variable holding the key "
                                                   "(null = COOPRL_EXPERT_API_KEY / OPENAI_API_KEY)")
    preference_replay_mode: str = option("current", "which earlier pairs are replayed: current (none), nearest_k "
                                         "(the preference_replay_k newest iterations), all_history, lambda_decay",
                                         choices=("current", "nearest_k", "all_history", "lambda_decay"))
    preference_replay_k: Optional[int] = option(None, "nearest_k: replay the pairs of this many newest iterations, "
                                                "the current one included (null = 1)", min=1)
    preference_replay_sample_size: Optional[int] = option(
        None, "replayed earlier pairs per iteration, drawn by their replay weights and spread evenly over the "
        "iteration's steps (null = every earlier pair of the step's problem)", min=1)
    log_reward_distribution: bool = option(False, "log each iteration's reward distribution of the policies' and the "
                                           "comparator's candidates (RUN_DIR/reward_distributions/iteration_<k>.json, "
                                           "and reward_dist/* metrics)")
    policy_checkpoint_dir: Optional[str] = option(None, "save the policies' weights at the start (initial/) and after "
                                                  "each iteration (iteration_<k>/) in this folder (null = do not)")
    replay_lambda: float = option(0.8, "lambda_decay: iteration k's pairs share (1 - lambda) * lambda^age of the "
                                  "replayed weight, normalized over the iterations present", min=0.0, max=1.0,
                                  aliases=("preference_replay_lambda",))


@dataclass
class MADPOIterSection(IterativeFields, MADPOSection):
    pass


@dataclass
class MARLHFSection(PreferenceFields, MAGRPOSection):
    num_turns: int = option(1, "turns of the online RL phase", min=1)
    rl_algorithm: str = option("magrpo", "online RL algorithm on the learned reward: magrpo; mareinforce, maremax, "
                               "marloo (MAGRPO with advantage_mode raw, max, rloo, as upstream); iac; maac",
                               choices=("magrpo", "mareinforce", "maremax", "marloo", "iac", "maac"))
    reward_model_name: Optional[str] = option(None, "reward model backbone (null = agent_model.name)")
    reward_model_device: Optional[str] = option(None, "the reward model's device (null = agent_model.device); "
                                                "one device")
    reward_model_learning_rate: float = option(1e-5, "reward model learning rate", min=0.0,
                                               aliases=("reward_learning_rate",))
    reward_model_epochs: int = option(1, "epochs over the preference pairs", min=1, aliases=("reward_num_train_epochs",))
    reward_train_batch_size: Optional[int] = option(None, "pairs per reward-model optimizer step (null = "
                                                    "cooprl.reward_model's default batch)", min=1)
    reward_freeze_backbone: bool = option(False, "train only the reward model's linear head, the backbone frozen")
    dpo_beta: float = option(0.1, "accepted for upstream's configs (its MARLHF config inherits MADPO's); MARLHF "
                             "trains no DPO loss (no effect, as upstream)", min=0.0)
    reward_max_length: int = option(2048, "longest joint prompt + both outputs scored by the reward model", min=16)
    reward_eval_fraction: float = option(0.2, "held-out share of pairs for reward-model accuracy", min=0.0, max=0.9)
    normalize_reward: bool = option(True, "learned reward = (score - mean) / std of its scores on the pairs' answers")


@dataclass
class MARLHFIterSection(IterativeFields, MARLHFSection):
    preference_scoring_reward: str = option("task", "what scores the candidates of a refresh: the task reward, or "
                                            "the learned reward model (from the second iteration on)",
                                            choices=("task", "reward_model"))


@dataclass
class SFTSection(TrainerSection):
    """Supervised fine-tuning of every agent on demonstrations (train_sft.py)."""
    num_turns: int = option(1, "turns of the evaluation rollouts (the demonstrations are first-turn answers)", min=1)
    learning_rate: float = option(1e-4, "AdamW learning rate", min=0.0)
    demonstrations: str = option(
        "reference", "what each agent imitates: reference (the task's own demonstrations, built from the reference "
        "solutions of its training split only; each environment's demonstrations.py) or a .jsonl file of "
        "{\"prompts\": [one per agent], \"completions\": [one per agent]} records (none may be an eval problem's)")
    batch_size: int = option(4, "demonstrations per training step (each agent takes one optimizer step on its own "
                             "completions of them)", min=1)


TRAINER_SECTIONS: dict[str, type] = {
    "magrpo": MAGRPOSection, "grpo": GRPOSection, "iac": ActorCriticSection, "maac": ActorCriticSection,
    "ac": ACSection, "madpo": MADPOSection, "madpo_iter": MADPOIterSection, "marlhf": MARLHFSection,
    "marlhf_iter": MARLHFIterSection, "sft": SFTSection,
}


@dataclass
class Config:
    agent_model: AgentModelSection = option(AgentModelSection(), "the agents' model (homogeneous agents)")
    agents: Optional[list[str]] = option(None, "one model name per agent (heterogeneous agents); null = agent_model.name")
    critic_model: CriticModelSection = option(CriticModelSection(), "critic backbone for actor-critic trainers "
                                              "(null = the defaults)", null_is_default=True)
    critics: Optional[list[str]] = option(None, "one critic model name per agent; null = critic_model.name")
    seed: int = option(42, "seed of every random number generator, 0 to 2^32 - 1", min=0, max=2**32 - 1)
    output: OutputSection = option(OutputSection(), "run folder and final model")
    reward: RewardSection = option(RewardSection(), "where the reward's programs run")
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
    sft: SFTSection = option(SFTSection(), "supervised fine-tuning on demonstrations")
    # The task's own sections (e.g. the code task's `dataset` and `external`), read from the top level of the file
    # into one dataclass that the environment registers (`register_task_config`); None when no task is registered.
    task: Any = field(default=None, metadata={"task": True})

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
        task = data.pop("task") or {}
        data = {**{k: v for k, v in data.items() if k not in TRAINER_SECTIONS}, **task,
                **{k: v for k, v in data.items() if k in TRAINER_SECTIONS}}
        if trainer is not None:
            kept = self.sections_read_by(trainer)
            data = {k: v for k, v in data.items() if k not in TRAINER_SECTIONS or k in kept}
        return data

    def to_yaml(self, trainer: str | None = None) -> str:
        """Return the config as YAML text (what --print-config prints and config.yaml holds)."""
        return yaml.safe_dump(self.to_dict(trainer), sort_keys=False, default_flow_style=False)


# ----------------------------------------------------------------------------------------------- the task's sections
# The library's config knows no task. An environment registers the dataclass of its own top-level sections; its
# fields are section names (read from the top level of a file, like the library's), and it may define
# `validate()` (raise ConfigError for values the task refuses together) and `run_label()` (a short name for run
# folders, e.g. the dataset's).
_TASK_CONFIG: type | None = None


def register_task_config(cls: type) -> type:
    """Make dataclass `cls` the task sections that `load_config` reads by default; return `cls`."""
    global _TASK_CONFIG
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"a task config is a dataclass of sections, not {cls!r}")
    _TASK_CONFIG = cls
    return cls


def registered_task_config() -> type | None:
    """Return the task config dataclass registered by the environment (None when none is)."""
    return _TASK_CONFIG


def _library_fields() -> dict[str, Any]:
    return {f.name: f for f in dataclasses.fields(Config) if not f.metadata.get("task")}


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
    fields = {f.name: f for f in dataclasses.fields(cls) if not f.metadata.get("task")}
    data = resolve_aliases(cls, data, prefix)
    kwargs = {}
    for key, value in data.items():
        full = f"{prefix}.{key}" if prefix else str(key)
        if key not in fields:
            raise unknown_key_error(str(key), list(fields), prefix)
        if value is None and fields[key].metadata.get("null_is_default"):
            continue  # `critic_model: null`: the section with its defaults
        converted = _coerce(value, hints[key], full)
        _check_bounds(converted, fields[key].metadata, full)
        kwargs[key] = converted
    return cls(**kwargs)


def field_aliases(cls: type) -> dict[str, str]:
    """Return {alias: field name} of dataclass `cls` (the upstream names its fields are also read under)."""
    return {alias: f.name for f in dataclasses.fields(cls) for alias in f.metadata.get("aliases", ())}


def resolve_aliases(cls: type, data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Return `data` with every alias key renamed to its field; ConfigError when an alias and the field (or two
    aliases of one field) are both given with different values."""
    aliases = field_aliases(cls)
    if not aliases or not any(key in aliases for key in data):
        return data
    hints = typing.get_type_hints(cls)

    def same(a: Any, b: Any, name: str) -> bool:
        try:  # compare the values as the field reads them (2e-5 and 2.0e-05 are one learning rate)
            return _coerce(a, hints[name], name) == _coerce(b, hints[name], name)
        except ConfigError:
            return a == b

    resolved: dict[str, Any] = {}
    given_as: dict[str, str] = {}
    for key, value in data.items():
        name = aliases.get(key, key)
        if name in resolved and not same(resolved[name], value, name):
            first, second = (f"{prefix}.{k}" if prefix else k for k in (given_as[name], key))
            raise ConfigError(f"{second}: same key as {first} (upstream's name for {name}), given with another value "
                              f"({show(value)} vs {show(resolved[name])}); give one of them")
        resolved.setdefault(name, value)
        given_as.setdefault(name, key)
    return resolved


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


def apply_overrides(data: dict[str, Any], overrides: list[str], task_config: type | None = None) -> dict[str, Any]:
    """Return a copy of `data` with each `a.b=v` override set (intermediate mappings created as needed);
    `task_config`: the task's sections (see `register_task_config`)."""
    merged = yaml.safe_load(yaml.safe_dump(data)) or {}
    overridden: set[tuple[str, ...]] = set()
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
        section = _section_at(path[:-1], task_config)
        if section is not None:  # an override wins over the file's value under the other name (alias or ours)
            names = {path[-1]} | {a for a, n in field_aliases(section).items() if n == path[-1]}
            target = field_aliases(section).get(path[-1], path[-1])
            names |= {target} | {a for a, n in field_aliases(section).items() if n == target}
            for other in names - {path[-1]}:
                if (*path[:-1], other) not in overridden:   # two overrides of one key under two names: an error
                    node.pop(other, None)
        if len(path) == 2 and path[0] in TRAINER_SECTIONS and path[1] == "reward_shift":
            if isinstance(merged.get("reward_processor"), dict) and ("reward_processor", "shift") not in overridden:
                merged["reward_processor"].pop("shift", None)   # the override wins over the file's shift
        if path == ["reward_processor", "shift"]:
            for name in TRAINER_SECTIONS:
                if isinstance(merged.get(name), dict) and (name, "reward_shift") not in overridden:
                    merged[name].pop("reward_shift", None)
        node[path[-1]] = value
        overridden.add(tuple(path))
    return merged


def _section_at(path: list[str], task_config: type | None = None) -> type | None:
    """Return the dataclass of the config section at key `path` ([] = Config), or None when there is none."""
    cls: Any = Config
    if path and task_config is not None and path[0] in {f.name for f in dataclasses.fields(task_config)}:
        cls = task_config
    for part in path:
        fields = {f.name: f for f in dataclasses.fields(cls) if not f.metadata.get("task")}
        if part not in fields:
            return None
        tp = typing.get_type_hints(cls)[part]
        args = [a for a in typing.get_args(tp) if a is not _NONE] or [tp]
        cls = next((a for a in args if dataclasses.is_dataclass(a)), None)
        if cls is None:
            return None
    return cls


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


def load_config(path: str | Path | None = None, overrides: list[str] | None = None,
                task_config: type | None = None) -> Config:
    """Return the validated Config from a YAML file (optional) plus `--override` strings.

    The top-level sections of `task_config` (default: the one the environment registered) go to `config.task`."""
    task_config = task_config or _TASK_CONFIG
    data = read_yaml(path) if path is not None else {}
    data = apply_overrides(data, overrides or [], task_config)
    data = read_old_madpo_preference(lift_reward_shift(data))
    task_names = {f.name for f in dataclasses.fields(task_config)} if task_config is not None else set()
    library_names = set(_library_fields())
    if task_names & library_names:
        raise TypeError(f"task config {task_config.__name__} reuses library sections: {sorted(task_names & library_names)}")
    task_data = {key: data[key] for key in data if key in task_names}
    data = {key: value for key, value in data.items() if key not in task_names}
    if task_config is not None:
        known = sorted(library_names | task_names)
        unknown = [key for key in data if key not in library_names]
        if unknown:
            raise unknown_key_error(str(unknown[0]), known, "")
    config = build_section(Config, data)
    if task_config is not None:
        config.task = build_section(task_config, task_data)
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


def lift_reward_shift(data: dict[str, Any]) -> dict[str, Any]:
    """Return `data` with upstream's `<trainer>.reward_shift` moved to our `reward_processor.shift` (the same
    number: added to every training reward); ConfigError when the two, or two trainer sections, disagree."""
    found = [(name, data[name]["reward_shift"]) for name in TRAINER_SECTIONS
             if isinstance(data.get(name), dict) and "reward_shift" in data[name]]
    if not found:
        return data
    data = {k: (dict(v) if k in TRAINER_SECTIONS and isinstance(v, dict) else v) for k, v in data.items()}
    processor = data.get("reward_processor")
    if processor is not None and not isinstance(processor, dict):
        return data  # build_section reports the malformed section
    processor = dict(processor or {})
    given = [("reward_processor.shift", processor["shift"])] if "shift" in processor else []
    for name, value in found:
        data[name].pop("reward_shift")
        given.append((f"{name}.reward_shift", value))
    first_key, first = given[0]
    for key, value in given[1:]:
        if value != first:
            raise ConfigError(f"{key}: upstream's name for reward_processor.shift, given as {show(value)} while "
                              f"{first_key} is {show(first)}; give one of them")
    processor["shift"] = first
    data["reward_processor"] = processor
    return data


# upstream's older MADPO schema (configs/madpo_*_config.yaml of commit 88b74938): a top-level `preference:` section
# whose `comparator:` block says who plain MADPO compares against; `self` (the policies' own samples) is ours
OLD_MADPO_COMPARATOR_NULLS = ("agents", "provider", "model", "api_key_env", "base_url")


def read_old_madpo_preference(data: dict[str, Any]) -> dict[str, Any]:
    """Return `data` without upstream's older MADPO `preference:` section when it asks for what plain MADPO does
    (`comparator.type: self`, the other comparator keys null); ConfigError naming every key of it that asks for
    more (an API or model comparator is madpo_iter's: comparator_policy, comparator_model, comparator_api_*).
    Files without a `madpo:` section are left alone (`preference` is then an unknown key)."""
    if "preference" not in data or not isinstance(data.get("madpo"), dict):
        return data
    section = data["preference"] if data["preference"] is not None else {}
    if not isinstance(section, dict):
        raise ConfigError(f"preference: expected a mapping (upstream's older MADPO schema), got {show(section)}")
    problems = [f"preference.{key}={show(value)}" for key, value in section.items() if key != "comparator"]
    comparator = section.get("comparator") if section.get("comparator") is not None else {}
    if not isinstance(comparator, dict):
        raise ConfigError(f"preference.comparator: expected a mapping, got {show(comparator)}")
    for key, value in comparator.items():
        wanted = (None, "self", "current") if key == "type" else (None,) if key in OLD_MADPO_COMPARATOR_NULLS else ()
        if value not in wanted:
            problems.append(f"preference.comparator.{key}={show(value)}")
    if problems:
        raise ConfigError(f"{', '.join(problems)}: upstream's older MADPO schema; plain madpo compares the policies' "
                          "own samples (preference.comparator.type: self, the other keys null). A comparator model or "
                          "API is madpo_iter's (comparator_policy, comparator_model, comparator_api_url, ...)")
    return {key: value for key, value in data.items() if key != "preference"}


_DEVICE_NAMES = ("cpu", "cuda", "mps", "auto")
DEVICE_KEYS = ("agent_devices", "critic_devices", "comparator_devices", "reward_model_device")
MP_TRAINERS = ("magrpo", "grpo")    # parallel_training mp: the agents' generations and updates run concurrently
# parallel_training fsdp: sharded agents (cooprl.fsdp), whose updates run as many passes on every process
FSDP_TRAINERS = ("magrpo", "grpo", "iac", "maac", "ac", "madpo", "madpo_iter", "marlhf", "marlhf_iter")
DATA_PARALLEL_MODES = ("ddp", "fsdp")   # one process per device, items sharded over them (cooprl.distributed)


def is_data_parallel(section: Any) -> bool:
    """Return whether `section` trains data-parallel: one process per device (`parallel_training` ddp or fsdp)."""
    return getattr(section, "parallel_training", "none") in DATA_PARALLEL_MODES


def device_list(value: Any, key: str) -> list[str]:
    """Return the devices `value` names (a device or a list of them, in order; [] for null); ConfigError for a
    malformed device or an empty list."""
    if value is None:
        return []
    devices = [value] if isinstance(value, str) else list(value)
    if not devices:
        raise ConfigError(f"{key}: an empty list names no device; give a device, a list of devices, or null")
    for device in devices:
        kind, _, index = str(device).partition(":")
        if kind not in _DEVICE_NAMES or (index and not index.isdigit()) or (index and kind not in ("cuda", "mps")):
            raise ConfigError(f"{key}: {show(device)} is not a device; expected cpu, cuda, cuda:N or mps")
    return devices


def model_devices(section: Any, key: str, count: int, fallback: str) -> list[str]:
    """Return the device of each of `count` models from `section`'s `key` (e.g. agent_devices): one device for all (a
    device, or a list naming one device, repeated or not: upstream writes [cuda:0]), or one per model; `fallback`
    (e.g. agent_model.device) when the key is null. ConfigError for a list of several devices of another length,
    naming the key."""
    devices = device_list(getattr(section, key, None), key)
    if not devices:
        return [fallback] * count
    if len(set(devices)) == 1:
        return devices[:1] * count
    if len(devices) != count:
        raise ConfigError(f"{key}: {len(devices)} devices given for {count} model(s); give one device for all, or "
                          f"one per model")
    return devices


def trainer_device(section: Any, key: str, fallback: str) -> str:
    """Return the first device `section`'s `key` (e.g. agent_devices) names, else `fallback` (e.g.
    agent_model.device)."""
    devices = device_list(getattr(section, key, None), key)
    return devices[0] if devices else fallback


def check_parallel_training(name: str, section: Any) -> None:
    """ConfigError when `section`'s parallel_training does not fit the trainer or its other keys."""
    mode = section.parallel_training
    if mode == "fsdp" and name not in FSDP_TRAINERS:
        raise ConfigError(f"{name}.parallel_training: fsdp is supported by {', '.join(FSDP_TRAINERS)}; {name} trains "
                          "data-parallel with ddp (a full copy of each model per process)")
    if mode == "fsdp" and isinstance(section, ActorCriticSection) and not section.use_separate_critic:
        raise ConfigError(f"{name}.use_separate_critic=false with parallel_training fsdp: a value head on the sharded "
                          "actor would run its own forward/backward passes on it; set it true (critics are not "
                          "sharded)")
    if mode == "fsdp" and getattr(section, "comparator_policy", None) in ("current_copy", "history"):
        raise ConfigError(f"{name}.comparator_policy: {section.comparator_policy} keeps frozen copies of the policies, "
                          "which are not sharded; with parallel_training fsdp use current, copy, model or api")
    if mode == "mp" and name not in MP_TRAINERS:
        raise ConfigError(f"{name}.parallel_training: mp is supported by {', '.join(MP_TRAINERS)}; {name} runs its "
                          "agents one after the other (none), its models placed with the *_devices keys")
    if mode in DATA_PARALLEL_MODES and isinstance(section, MADPOSection) and (
            section.train_batch_size is not None or section.rollout_buffer_size is not None):
        raise ConfigError(f"{name}.parallel_training: {mode} needs the same number of optimizer steps on every process: "
                          f"set {name}.train_batch_size=null and {name}.rollout_buffer_size=null (one DPO step per "
                          "training step on the step's pairs of every process); a step's pair count differs between "
                          "processes")
    if mode in DATA_PARALLEL_MODES and getattr(section, "log_reward_distribution", False):
        raise ConfigError(f"{name}.log_reward_distribution: not with parallel_training {mode} (each process sees only "
                          "its own problems' candidates); set it to false")
    if mode in DATA_PARALLEL_MODES and getattr(section, "update_schedule", None) == "nodes" and section.num_turns > 1:
        raise ConfigError(f"{name}.parallel_training: {mode} needs the same number of optimizer steps on every process: "
                          f"set {name}.update_schedule=items (or num_turns 1): with nodes, a multi-turn tree's node "
                          "count depends on early termination, so ranks would update at different steps")
    if mode in DATA_PARALLEL_MODES and isinstance(section, ActorCriticSection) and (
            section.update_schedule != "episodes" or section.train_batch_size is not None):
        raise ConfigError(f"{name}.parallel_training: {mode} needs the same number of optimizer steps on every process: "
                          f"set {name}.update_schedule=episodes and {name}.train_batch_size=null (one step per model "
                          "per update); a turns buffer, or batches of turns, count turn samples, which early "
                          "termination makes differ between processes")
    if mode in DATA_PARALLEL_MODES and len(set(device_list(section.agent_devices, f"{name}.agent_devices"))) > 1:
        raise ConfigError(f"{name}.agent_devices: {mode} places a process's models on its own device (cuda:LOCAL_RANK); "
                          "several agent devices are parallel_training mp's")


def _check_fsdp(config: Config, name: str, section: Any) -> None:
    """ConfigError when the agent_model does not fit `name`'s sharded training (parallel_training fsdp)."""
    if config.agent_model.generation_backend == "vllm":
        raise ConfigError(f"{name}.parallel_training: fsdp samples with the gathered HF model; vLLM's engine would "
                          "need every shard pushed to it: set agent_model.generation_backend=hf or use ddp")
    if getattr(section, "comparator_policy", None) == "copy" and config.agent_model.lora is None:
        raise ConfigError(f"{name}.comparator_policy: copy with parallel_training fsdp needs agent_model.lora (the "
                          "start policies are then the policies with their adapters off; a full copy cannot be "
                          "sharded alongside)")
    if getattr(section, "reference_model", False) and config.agent_model.lora is None:
        raise ConfigError(f"{name}.reference_model with parallel_training fsdp needs agent_model.lora: the reference "
                          "is then the model with its adapters off (a full copy cannot be sharded alongside)")
    if getattr(section, "reference_kl_coef", 0.0) > 0 and config.agent_model.lora is None:
        raise ConfigError(f"{name}.reference_kl_coef > 0 with parallel_training fsdp needs agent_model.lora: the "
                          "frozen start model is then the model with its adapters off (a full copy cannot be sharded "
                          "alongside)")


def _check_vllm(model_cfg: AgentModelSection) -> None:
    """ConfigError when the agent_model's vLLM options do not fit each other (the backend itself is checked when the
    engines are built)."""
    if model_cfg.vllm_weight_sync == "lora" and model_cfg.lora is None:
        raise ConfigError("agent_model.vllm_weight_sync: lora samples the trained LoRA adapter as a vLLM LoRA request; "
                          "set agent_model.lora (r, alpha, ...) or use vllm_weight_sync: merged")
    if model_cfg.vllm_tensor_parallel_size > 1 and model_cfg.vllm_weight_sync != "lora":
        raise ConfigError("agent_model.vllm_tensor_parallel_size > 1 runs the engine's shards in worker processes, "
                          "where merged weights cannot be pushed from here; set agent_model.vllm_weight_sync=lora")
    if model_cfg.vllm_importance_cap is not None and model_cfg.generation_backend != "vllm":
        raise ConfigError("agent_model.vllm_importance_cap corrects for vLLM's sampler: it needs "
                          "agent_model.generation_backend=vllm (the hf backend samples from the trained model itself); "
                          "set it to null")


def check_consistency(config: Config) -> None:
    """Raise ConfigError for values that are fine alone but not together."""
    if hasattr(config.task, "validate"):
        config.task.validate()
    _check_vllm(config.agent_model)
    for name in TRAINER_SECTIONS:
        section = config.trainer(name)
        check_parallel_training(name, section)
        if section.parallel_training == "fsdp":
            _check_fsdp(config, name, section)
        for key in DEVICE_KEYS:
            device_list(getattr(section, key, None), f"{name}.{key}")
        if any(k < 1 or k > section.eval_num_generations for k in section.eval_pass_k):
            raise ConfigError(f"{name}.eval_pass_k: every k must be in [1, {name}.eval_num_generations="
                              f"{section.eval_num_generations}], got {section.eval_pass_k}")


def field_doc(f: Any) -> str:
    """Return the doc of dataclass field `f`, with the upstream names it is also read under."""
    doc = f.metadata.get("doc", "")
    aliases = f.metadata.get("aliases", ())
    return doc + (f" (also read as upstream's {', '.join(aliases)})" if aliases else "")


def describe_fields(cls: type = Config, prefix: str = "") -> list[tuple[str, Any, str]]:
    """Return (key, default, doc) for every leaf key, recursively; used for the README's config reference."""
    rows = []
    instance = cls()
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.metadata.get("task"):   # the registered task's sections, described as the top-level sections they are
            rows.extend(describe_fields(_TASK_CONFIG) if _TASK_CONFIG is not None else [])
            continue
        key = f"{prefix}.{f.name}" if prefix else f.name
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            rows.extend(describe_fields(tp, key))
        else:
            rows.append((key, getattr(instance, f.name), field_doc(f)))
    return rows
