"""The library's config sections (models, output, reward, checkpoints, W&B) and `Config`, which holds them with
every trainer's section (cooprl/config/trainer_sections.py) and the task's sections (`config.task`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional, Union

import yaml

from cooprl.config.fields import option
from cooprl.config.trainer_sections import (TRAINER_SECTIONS, ACSection, ActorCriticSection, GRPOSection,
                                            MADPOIterSection, MADPOSection, MAGRPOSection, MARLHFIterSection,
                                            MARLHFSection, SFTSection, TrainerSection)


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
    max_length: int = option(2048, "longest prompt + completion in tokens; longer prompts are cut from the left",
                             min=16)
    torch_dtype: str = option("auto", "weights dtype (auto = bfloat16 on GPU, float32 on CPU)",
                              choices=("auto", "float32", "bfloat16", "float16"))
    device: str = option("auto", "auto (cuda when available), cpu or cuda[:N]")
    special_tokens: dict[str, str] = option({}, "tokens to set on the tokenizer, e.g. {pad_token: '<|pad|>'}")
    chat_template: bool = option(False, "wrap prompts in the tokenizer's chat template")
    lora: Optional[LoraSection] = option(None, "LoRA adapters ({r, alpha, dropout, target_modules}); null = full "
                                               "fine-tuning")
    generation_backend: str = option("hf", "who samples completions: hf (transformers generate) or vllm "
                                     "(a CUDA GPU, or the CPU with vLLM's CPU build, docs/vllm.md)",
                                     choices=("hf", "vllm"))
    vllm_gpu_memory_utilization: float = option(
        0.3, "share of the GPU's memory each agent's vLLM engine takes (weights + KV cache) with vllm_kv_cache_bytes: "
        "0 (training needs the rest); otherwise unused on a GPU: each engine is given its weights + KV cache + 1 GiB "
        "as a share of the GPU, the free memory vLLM requires at its start",
        min=0.01, max=0.95)
    vllm_kv_cache_bytes: Optional[int] = option(
        None, "KV cache of each agent's vLLM engine in bytes (vLLM's kv_cache_memory_bytes): the engine then reserves "
        "its weights, its activation peak and this cache, whatever the GPU's size; null = sized from the run (its "
        "largest sampling call: a later turn's num_generations squared, or an evaluation batch (eval_batch_size, "
        "null: eval_num_samples) x eval_num_generations, sequences of max_length tokens); 0 = vLLM sizes it from "
        "vllm_gpu_memory_utilization", min=0)
    vllm_weight_sync: str = option(
        "merged", "how a vLLM engine gets the trained weights: merged (after every optimizer step the weights, LoRA "
        "merged in, are pushed into the engine) or lora (the LoRA adapter is saved and sampled as a vLLM LoRA request "
        "on the untouched base weights: no push; needs agent_model.lora)", choices=("merged", "lora"))
    vllm_sleep: bool = option(False, "put each vLLM engine to sleep (level 1: weights to CPU memory, KV cache freed) "
                              "between its sampling calls, so the update has the GPU memory; one engine per process "
                              "(vLLM allows one sleeping engine), i.e. one agent per process, or a share_base team")
    vllm_tensor_parallel_size: int = option(1, "GPUs each vLLM engine shards its model over; above 1 the engine's "
                                            "workers are separate processes, so needs vllm_weight_sync: lora", min=1)
    vllm_max_num_seqs: Optional[int] = option(
        None, "most sequences a vLLM engine schedules in one step (vLLM's max_num_seqs; null = the run's largest "
        "sampling call, as vllm_kv_cache_bytes counts it); less makes its start-up profiling set aside less memory",
        min=1)
    vllm_max_num_batched_tokens: Optional[int] = option(
        None, "most tokens a vLLM engine processes in one step (vLLM's max_num_batched_tokens; null = the largest "
        "call's tokens, at most 4096 as TRL's, at least max_length); less: less activation memory set aside, long "
        "prompts prefilled in more steps", min=1)
    vllm_importance_cap: Optional[float] = option(
        None, "off-policy correction for vLLM's sampler (TRL's vllm_importance_sampling_correction and _cap): each "
        "completion token's policy-gradient term is weighted by the ratio q_hf / q_vllm, bounded by cap as "
        "vllm_importance_mode says, q the token's probability under the sampling settings (temperature, top-k, top-p) "
        "from the trained model and from vLLM; null = off (TRL's cap: 3); needs generation_backend vllm; "
        "policy-gradient trainers only (not madpo, madpo_iter)", min=1.0)
    vllm_importance_mode: str = option(
        "token_truncate", "TRL's vllm_importance_sampling_mode: token_truncate (each token's ratio, at most cap), "
        "token_mask (a token whose ratio passes cap weighs 0), sequence_truncate (one ratio per completion, the "
        "product of its tokens', at most cap, for every token), sequence_mask (a completion whose ratio passes cap "
        "weighs 0; TRL's default)", choices=("token_truncate", "token_mask", "sequence_truncate", "sequence_mask"))
    # the stale-weights guard (cooprl.rollout.vllm_guard): probe log-probs of each engine against the trained model
    vllm_weight_check: Optional[float] = option(
        None, "after every weight push into a vLLM engine and every wake-up, the engine and the trained model score "
        "fixed probe texts, and a mean log-prob gap above this bound stops the run (the engine would sample stale "
        "weights); null = the weights' dtype's bound (0.01 float32, 0.1 bfloat16/float16), 0 = no check", min=0.0)
    logprob_chunk_size: Optional[int] = option(
        None, "the update's log-probs: completion positions whose [positions x vocab] logits exist at once (the LM "
        "head, log-softmax and its backward run chunk by chunk); null = the whole batch's at once", min=1)
    gradient_checkpointing: bool = option(
        False,
        "recompute each layer's activations in the backward instead of "
        "keeping them (transformers' gradient checkpointing, non-reentrant; LoRA too)",
    )
    autocast: str = option("none", "bf16: the agents' forward passes (update and HF generation) run under bfloat16 "
                           "autocast, on CPU too; weights stay in torch_dtype; log-softmax in float32",
                           choices=("none", "bf16"))
    bf16_optimizer: str = option(
        "kahan", "how bfloat16 weights are trained (agents, critics, reward model): kahan (torch-optimi's AdamW with "
        "Kahan summation and a float32 second moment: a bf16 buffer per weight keeps what rounding dropped, so "
        "updates below a bf16 ulp add up as in float32, and the second moment decays as in float32; 4 more bytes per "
        "weight) or pure (torch.optim.AdamW on the bf16 weights: most updates at lr 2e-5 round away, and "
        "its bf16 second moment does not decay); float32 weights and LoRA adapters always get torch.optim.AdamW",
        choices=("kahan", "pure"))
    memory_plan: str = option(
        "refuse", "what a GPU run does when its memory plan (weights, optimizer states, engines and the update's "
        "gradients and activations per GPU, counted before any model loads; --memory-plan GIB prints it) does not "
        "fit: refuse (stop with the figures and the keys to change) or warn (start anyway)",
        choices=("refuse", "warn"))
    init_from: Optional[str] = option(
        None, "start every agent from a finished run's agents: a run folder (its final/ models, else its newest "
        "checkpoint) or a checkpoint folder; each agent loads its own saved weights, or its LoRA adapters, which it "
        "then trains on (agent_model.lora must then match their settings, or be null: merged in; the tokenizer stays "
        "agent_model.name's; with LoRA a reference KL's frozen start model is the base "
        "model, adapters off); null = the models as agent_model names them")
    share_base: bool = option(
        False, "with agent_model.lora: every agent's LoRA adapter on one base model in memory (and, with "
        "generation_backend vllm, one engine per process serving each agent's adapter as its own LoRA request: needs "
        "vllm_weight_sync lora; it sleeps once per rollout with vllm_sleep): each agent trains only its "
        "own adapter with its own optimizer and its KL reference is the base, adapters off; the agents must share "
        "one base model (issue 45)")
    shared_policy: bool = option(
        False, "one model (full or LoRA), optimizer and sampler play every role: each agent's prompts and samples are "
        "its own, their advantages are per agent, one optimizer step trains the model on the sum of the agents' own "
        "losses (magrpo, madpo; docs/algorithms.md); checkpoints hold it once, as agent_0/")


@dataclass
class CriticModelSection:
    name: Optional[str] = option(None, "critic backbone (null = the agent's model)")
    type: str = option("qwen", "model family (informational, like agent_model.type)")
    max_length: Optional[int] = option(None, "longest critic input in tokens, cut from the left like the actors' "
                                       "prompts (null = agent_model.max_length)", min=16)
    temperature: Optional[float] = option(None, "no effect: a critic scores, it does not sample",
                                          min=0.0)
    top_p: Optional[float] = option(None, "no effect: a critic does not sample", min=0.0, max=1.0)
    torch_dtype: str = option("auto", "critic weights dtype", choices=("auto", "float32", "bfloat16", "float16"))
    lora: Optional[LoraSection] = option(None, "LoRA adapters on the critic backbone; null = full fine-tuning")


@dataclass
class OutputSection:
    base_dir: str = option("runs", "parent folder of run folders")
    run_name: Optional[str] = option(None, "run folder name (null = <trainer>-<dataset>-<time>); when taken, a new "
                                     "run writes <run_name>-2, -3, ...")
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
    ray_workers_per_actor: int = option(4, "executor ray: workers (CPUs) per pool (a local Ray: fewer or smaller "
                                        "pools when they do not fit its free CPUs, logged)", min=1)
    ray_placement_timeout_s: float = option(45.0, "executor ray: the run stops with an error when the cluster has "
                                            "not placed every pool within this many seconds", min=1.0)
    require_full_isolation: bool = option(False, "refuse to train when the reward's executor cannot isolate its "
                                          "work fully (no namespaces, no separate uid: its start-up warning says "
                                          "what lacks)")
    pipeline_nodes: Optional[int] = option(
        None, "MAGRPO/GRPO rollouts: nodes of a turn sampled per generate call (null = the whole turn in one call per "
        "agent; 1 = node by node): with reward.pipeline, each chunk's joint actions are scored "
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


def _own(key: str, doc: str) -> Any:
    """Return an `agents:` entry's field for the trainer key `key`: null (the shared value) or a value within the
    shared key's own bounds."""
    meta = next(f.metadata for f in dataclasses.fields(TrainerSection) if f.name == key)
    return option(None, doc, min=meta["min"], max=meta["max"])


@dataclass
class AgentEntry:
    """An `agents:` entry given as a mapping: one agent's model and its own settings; null = the shared value."""
    name: Optional[str] = option(None, "the agent's model (null = agent_model.name)")
    learning_rate: Optional[float] = _own("learning_rate", "the agent's AdamW learning rate (null = the trainer's "
                                          "learning_rate)")
    temperature: Optional[float] = _own("temperature", "the agent's sampling temperature (null = the trainer's, else "
                                        "agent_model.temperature)")
    top_p: Optional[float] = _own("top_p", "the agent's nucleus sampling mass (null = the trainer's, else "
                                  "agent_model.top_p)")
    top_k: Optional[int] = _own("top_k", "the agent's top-k, 0 = off (null = the trainer's, else agent_model.top_k)")
    max_new_tokens: Optional[int] = _own("max_new_tokens", "tokens the agent generates per completion, which caps "
                                         "its completions (null = the trainer's max_new_tokens)")


@dataclass
class Config:
    agent_model: AgentModelSection = option(AgentModelSection(), "the agents' model (homogeneous agents)")
    agents: Optional[list[Union[str, AgentEntry]]] = option(
        None, "one entry per agent: its model name (heterogeneous agents), or a mapping of its own model and settings "
        "{name, learning_rate, temperature, top_p, top_k, max_new_tokens}, each key left out falling back to the "
        "shared value (e.g. [{temperature: 1.0}, {temperature: 0.3}]: a planner that samples hot, a coder that "
        "samples cold); null = agent_model.name and the shared settings for every agent")
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

    def trainer(self, name: str) -> TrainerSection:
        """Return the section of trainer `name` (e.g. 'magrpo'), a key of TRAINER_SECTIONS. A run reads its own
        through `cooprl.config.Run`, built once: this lookup by name is the loader's and `Run.of`'s."""
        return getattr(self, name)

    def sections_read_by(self, trainer: str) -> list[str]:
        """Return the trainer sections `trainer` reads: its own, plus its `rl_algorithm`'s (MARLHF with IAC or
        MAAC takes those trainers' own keys, such as critic_type, from their sections)."""
        section = self.trainer(trainer)
        rl = section.rl_algorithm if isinstance(section, MARLHFSection) else None
        return [trainer] + ([rl] if rl in TRAINER_SECTIONS and rl != "magrpo" else [])

    def to_dict(self, trainer: str | None = None) -> dict[str, Any]:
        """Return the config as plain data; with `trainer`, the sections of trainers it does not read are left out
        (and MARLHF's rl_algorithm section holds only its own keys, such as critic_type)."""
        data = dataclasses.asdict(self)
        task = data.pop("task") or {}
        data = {**{k: v for k, v in data.items() if k not in TRAINER_SECTIONS}, **task,
                **{k: v for k, v in data.items() if k in TRAINER_SECTIONS}}
        if trainer is not None:
            kept = self.sections_read_by(trainer)
            data = {k: v for k, v in data.items() if k not in TRAINER_SECTIONS or k in kept}
            # MARLHF's rl_algorithm section (iac, maac) gives only its own keys: the shared ones are MARLHF's
            shared = {f.name for f in dataclasses.fields(TrainerSection)}
            for helper in kept[1:]:
                data[helper] = {k: v for k, v in data[helper].items() if k not in shared}
        return data

    def to_yaml(self, trainer: str | None = None) -> str:
        """Return the config as YAML text (what --print-config prints and config.yaml holds)."""
        return yaml.safe_dump(self.to_dict(trainer), sort_keys=False, default_flow_style=False)
