"""Rules between keys: devices, `parallel_training` (mp, ddp, fsdp) against the trainer and its other keys,
vLLM options, a shared base, pass@k; `check_consistency` runs them all when a config is loaded."""

from __future__ import annotations

from typing import Any

from cooprl.config.agents import agent_entries
from cooprl.config.fields import ConfigError, show
from cooprl.config.run import Run
from cooprl.config.schema import AgentEntry, Config
from cooprl.config.trainer_sections import (TRAINER_SECTIONS, ActorCriticSection, IterativeFields, MADPOSection,
                                            MAGRPOSection, MARLHFSection, PreferenceFields, TrainerSection)


_DEVICE_NAMES = ("cpu", "cuda", "mps", "auto")
DEVICE_KEYS = ("agent_devices", "critic_devices", "comparator_devices", "reward_model_device")
MP_TRAINERS = ("magrpo", "grpo")    # parallel_training mp: the agents' generations and updates run concurrently
# parallel_training fsdp: sharded agents (cooprl.parallel.fsdp), whose updates run as many passes on every process
FSDP_TRAINERS = ("magrpo", "grpo", "iac", "maac", "ac", "madpo", "madpo_iter", "marlhf", "marlhf_iter")
DATA_PARALLEL_MODES = ("ddp", "fsdp")   # one process per device, items sharded over them (cooprl.parallel.distributed)


def is_data_parallel(section: TrainerSection) -> bool:
    """Return whether `section` trains data-parallel: one process per device (`parallel_training` ddp or fsdp)."""
    return section.parallel_training in DATA_PARALLEL_MODES


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


def model_devices(value: Any, key: str, count: int, fallback: str) -> list[str]:
    """Return the device of each of `count` models from `value`, a section's `key` (e.g. agent_devices): one device
    for all (a device, or a list naming one device, repeated or not, e.g. [cuda:0]), or one per model;
    `fallback` (e.g. agent_model.device) when the key is null. ConfigError for a list of several devices of another
    length, naming the key."""
    devices = device_list(value, key)
    if not devices:
        return [fallback] * count
    if len(set(devices)) == 1:
        return devices[:1] * count
    if len(devices) != count:
        raise ConfigError(f"{key}: {len(devices)} devices given for {count} model(s); give one device for all, or "
                          f"one per model")
    return devices


def trainer_device(value: Any, key: str, fallback: str) -> str:
    """Return the first device `value`, a section's `key` (e.g. agent_devices), names, else `fallback` (e.g.
    agent_model.device)."""
    devices = device_list(value, key)
    return devices[0] if devices else fallback


def section_devices(section: TrainerSection) -> dict[str, Any]:
    """Return the device keys of `section` (DEVICE_KEYS: the ones its trainer has) with their values."""
    devices = {"agent_devices": section.agent_devices}
    if isinstance(section, ActorCriticSection):
        devices["critic_devices"] = section.critic_devices
    if isinstance(section, IterativeFields):
        devices["comparator_devices"] = section.comparator_devices
    if isinstance(section, MARLHFSection):
        devices["reward_model_device"] = section.reward_model_device
    return devices


def check_parallel_training(run: Run) -> None:
    """ConfigError when the parallel_training of `run`'s section does not fit the trainer or its other keys."""
    name, section = run.trainer, run.section
    mode = section.parallel_training
    if mode == "fsdp" and name not in FSDP_TRAINERS:
        raise ConfigError(f"{name}.parallel_training: fsdp is supported by {', '.join(FSDP_TRAINERS)}; {name} trains "
                          "data-parallel with ddp (a full copy of each model per process)")
    if mode == "fsdp" and isinstance(section, ActorCriticSection) and not section.use_separate_critic:
        raise ConfigError(f"{name}.use_separate_critic=false with parallel_training fsdp: a value head on the sharded "
                          "actor would run its own forward/backward passes on it; set it true (critics are not "
                          "sharded)")
    if mode == "fsdp" and isinstance(section, IterativeFields) and section.comparator_policy in ("current_copy",
                                                                                                 "history"):
        raise ConfigError(f"{name}.comparator_policy: {section.comparator_policy} keeps frozen copies of the policies, "
                          "which are not sharded; with parallel_training fsdp use current, copy, model or api")
    if mode == "mp" and name not in MP_TRAINERS:
        raise ConfigError(f"{name}.parallel_training: mp is supported by {', '.join(MP_TRAINERS)}; {name} runs its "
                          "agents one after the other (none), its models placed with the *_devices keys")
    if mode in DATA_PARALLEL_MODES and isinstance(section, MADPOSection) and (
            section.train_batch_size is not None or section.rollout_buffer_size is not None):
        raise ConfigError(f"{name}.parallel_training: {mode} needs the same number of optimizer steps on every "
                          f"process: "
                          f"set {name}.train_batch_size=null and {name}.rollout_buffer_size=null (one DPO step per "
                          "training step on the step's pairs of every process); a step's pair count differs between "
                          "processes")
    if mode in DATA_PARALLEL_MODES and isinstance(section, IterativeFields) and section.log_reward_distribution:
        raise ConfigError(f"{name}.log_reward_distribution: not with parallel_training {mode} (each process sees only "
                          "its own problems' candidates); set it to false")
    if (mode in DATA_PARALLEL_MODES and isinstance(section, MAGRPOSection) and section.update_schedule == "nodes"
            and section.num_turns > 1):
        raise ConfigError(f"{name}.parallel_training: {mode} needs the same number of optimizer steps on every "
                          f"process: "
                          f"set {name}.update_schedule=items (or num_turns 1): with nodes, a multi-turn tree's node "
                          "count depends on early termination, so ranks would update at different steps")
    if mode in DATA_PARALLEL_MODES and isinstance(section, ActorCriticSection) and (
            section.update_schedule != "episodes" or section.train_batch_size is not None):
        raise ConfigError(f"{name}.parallel_training: {mode} needs the same number of optimizer steps on every "
                          f"process: "
                          f"set {name}.update_schedule=episodes and {name}.train_batch_size=null (one step per model "
                          "per update); a turns buffer, or batches of turns, count turn samples, which early "
                          "termination makes differ between processes")
    if mode in DATA_PARALLEL_MODES and len(set(device_list(section.agent_devices, f"{name}.agent_devices"))) > 1:
        raise ConfigError(f"{name}.agent_devices: {mode} places a process's models on its own device "
                          f"(cuda:LOCAL_RANK); "
                          "several agent devices are parallel_training mp's")


def _greedy_key(run: Run) -> str | None:
    """Return the sampling key that makes one of `run`'s agents sample greedily (temperature 0, top_k 1 or top_p 0:
    its `agents:` entry's value, else its section's, else agent_model's), as `key=value`; None when they sample."""
    section, model = run.section, run.config.agent_model
    for i, entry in enumerate(agent_entries(run.config) or [AgentEntry()]):
        settings = (("temperature", (entry.temperature, section.temperature, model.temperature), 0),
                    ("top_k", (entry.top_k, section.top_k, model.top_k), 1),
                    ("top_p", (entry.top_p, section.top_p, model.top_p), 0))
        for name, values, greedy in settings:
            keys = (f"agents[{i}].{name}", f"{run.trainer}.{name}", f"agent_model.{name}")
            key, value = next((k, v) for k, v in zip(keys, values, strict=True) if v is not None or k == keys[-1])
            if value == greedy:
                return f"{key}={value}"
    return None


def check_training_samples_differ(run: Run) -> None:
    """Raise ConfigError when greedy sampling makes every sample `run` trains on compare equal to its siblings:
    MAGRPO's advantages (each sample's return against its group's; not advantage_mode raw) would all be 0, and a
    preference trainer's candidates (without a comparator of another model: comparator_policy model or api) would
    all tie, so nothing would train.
    Evaluation samples greedily as asked: only training checks this."""
    greedy = _greedy_key(run)
    if greedy is None:
        return
    name, section = run.trainer, run.section
    fix = "sample with a temperature above 0 (e.g. 0.6; top_k null or above 1, top_p above 0)"
    # a comparator of another model (or an API) writes other candidates; copies of the policies write the same
    other_writer = isinstance(section, IterativeFields) and section.comparator_policy in ("model", "api")
    if isinstance(section, PreferenceFields) and not other_writer:
        raise ConfigError(f"{greedy} with {name}.preference_num_candidates={section.preference_num_candidates}: "
                          f"greedy sampling makes a problem's candidates one answer (a comparator that copies the "
                          f"policies writes it too), so every pair ties and nothing trains; {fix}")
    rl = run.rl or run
    if isinstance(rl.section, MAGRPOSection) and rl.section.num_generations > 1 and rl.section.advantage_mode != "raw":
        raise ConfigError(f"{greedy} with {name}.num_generations={rl.section.num_generations}: greedy sampling makes "
                          f"a group's samples one completion, so every advantage (advantage_mode "
                          f"{rl.section.advantage_mode}) is 0 and nothing trains; {fix}")


def _check_fsdp(run: Run) -> None:
    """ConfigError when the agent_model does not fit the sharded training of `run` (parallel_training fsdp)."""
    config, name, section = run.config, run.trainer, run.section
    if config.agent_model.generation_backend == "vllm":
        raise ConfigError(f"{name}.parallel_training: fsdp samples with the gathered HF model; vLLM's engine would "
                          "need every shard pushed to it: set agent_model.generation_backend=hf or use ddp")
    if isinstance(section, IterativeFields) and section.comparator_policy == "copy" and config.agent_model.lora is None:
        raise ConfigError(f"{name}.comparator_policy: copy with parallel_training fsdp needs agent_model.lora (the "
                          "start policies are then the policies with their adapters off; a full copy cannot be "
                          "sharded alongside)")
    if isinstance(section, MADPOSection) and section.reference_model and config.agent_model.lora is None:
        raise ConfigError(f"{name}.reference_model with parallel_training fsdp needs agent_model.lora: the reference "
                          "is then the model with its adapters off (a full copy cannot be sharded alongside)")
    if section.reference_kl_coef > 0 and config.agent_model.lora is None:
        raise ConfigError(f"{name}.reference_kl_coef > 0 with parallel_training fsdp needs agent_model.lora: the "
                          "frozen start model is then the model with its adapters off (a full copy cannot be sharded "
                          "alongside)")


# the adapter ranks vLLM's LoRA slots come in (vllm.config.lora.MaxLoRARanks, 0.20-0.33)
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
# vLLM raises a temperature in (0, 0.01) to 0.01 (vllm/sampling_params.py, 0.30.0:488-496): it would sample from
# another distribution than the one the update's log-probs assume
VLLM_MIN_TEMPERATURE = 0.01


def _check_vllm(config: Config) -> None:
    """ConfigError when the agent_model's vLLM options do not fit each other or the trainers' devices (the backend
    itself is checked when the engines are built)."""
    model_cfg = config.agent_model
    if model_cfg.vllm_weight_sync == "lora" and model_cfg.lora is None:
        raise ConfigError("agent_model.vllm_weight_sync: lora samples the trained LoRA adapter as a vLLM LoRA request; "
                          "set agent_model.lora (r, alpha, ...) or use vllm_weight_sync: merged")
    if model_cfg.share_base and model_cfg.generation_backend == "vllm" and model_cfg.vllm_weight_sync != "lora":
        raise ConfigError("agent_model.share_base with generation_backend vllm: the team's one engine serves each "
                          "agent's adapter as its own LoRA request and cannot hold merged weights (one set for every "
                          "agent); set agent_model.vllm_weight_sync=lora")
    if model_cfg.generation_backend == "vllm" and model_cfg.vllm_weight_sync == "lora":
        vllm_lora_slot(model_cfg.lora.r)
    if model_cfg.vllm_tensor_parallel_size > 1 and model_cfg.vllm_weight_sync != "lora":
        raise ConfigError("agent_model.vllm_tensor_parallel_size > 1 runs the engine's shards in worker processes, "
                          "where merged weights cannot be pushed from here; set agent_model.vllm_weight_sync=lora")
    if model_cfg.vllm_importance_cap is not None and model_cfg.generation_backend != "vllm":
        raise ConfigError("agent_model.vllm_importance_cap corrects for vLLM's sampler: it needs "
                          "agent_model.generation_backend=vllm (the hf backend samples from the trained model itself); "
                          "set it to null")
    if model_cfg.generation_backend == "vllm":
        _check_vllm_temperatures(config)
        _check_vllm_devices(config)


def check_vllm_temperature(temperature: float, key: str) -> None:
    """ConfigError when vLLM would sample at another temperature than `temperature` (the value of `key`): vLLM raises
    one in (0, 0.01) to 0.01, while the update computes its log-probs at the configured one."""
    if 0 < temperature < VLLM_MIN_TEMPERATURE:
        raise ConfigError(f"{key}={temperature} with agent_model.generation_backend=vllm: vLLM samples at 0.01 any "
                          f"temperature in (0, 0.01), while the update uses {temperature}; set it to 0 (greedy) or at "
                          "least 0.01")


def _check_vllm_temperatures(config: Config) -> None:
    check_vllm_temperature(config.agent_model.temperature, "agent_model.temperature")
    for i, entry in enumerate(agent_entries(config) or []):
        if entry.temperature is not None:
            check_vllm_temperature(entry.temperature, f"agents[{i}].temperature")
    for name in TRAINER_SECTIONS:
        temperature = config.trainer(name).temperature
        if temperature is not None:
            check_vllm_temperature(temperature, f"{name}.temperature")


def vllm_lora_slot(rank: int) -> int:
    """Return the LoRA slot vLLM serves an adapter of rank `rank` in (its `max_lora_rank`: the smallest slot size at
    least `rank`; vLLM accepts any adapter rank up to it, vllm/lora/peft_helper.py `validate_legal`); ConfigError when
    `rank` is above vLLM's largest slot."""
    slot = next((size for size in VLLM_LORA_RANKS if size >= rank), None)
    if slot is None:
        raise ConfigError(f"agent_model.lora.r={rank} with agent_model.vllm_weight_sync=lora: vLLM serves LoRA "
                          f"adapters of rank up to {VLLM_LORA_RANKS[-1]}; lower it, or use vllm_weight_sync: merged "
                          "(any rank)")
    return slot


def _check_vllm_devices(config: Config) -> None:
    """ConfigError for placements an in-process vLLM engine cannot follow. An engine of one shard sits on its agent's
    GPU (cooprl.rollout.vllm_platform.gpu_executor), also under mp with one GPU per agent; under ddp each rank's
    engines sit on its own GPU, built by vLLM's external_launcher executor, one rank each (tensor parallelism would
    span the ranks). Shards of tensor parallelism run on cuda:0..T-1 (vLLM's multiprocess executor), not on an
    agent's other GPU."""
    tensor_parallel = config.agent_model.vllm_tensor_parallel_size > 1
    for name in TRAINER_SECTIONS:
        section = config.trainer(name)
        if section.parallel_training == "ddp" and tensor_parallel:
            raise ConfigError(f"{name}.parallel_training: ddp with agent_model.vllm_tensor_parallel_size > 1: under "
                              "ddp each rank's engine is one shard on the rank's own GPU (vLLM's external_launcher "
                              "executor); set agent_model.vllm_tensor_parallel_size=1")
        devices = [config.agent_model.device, *device_list(section.agent_devices, f"{name}.agent_devices")]
        other = [device for device in devices if device.startswith("cuda:") and device != "cuda:0"]
        if other and tensor_parallel:
            raise ConfigError(f"{name}: a device {other[0]} with agent_model.vllm_tensor_parallel_size > 1: the "
                              "engine's shards run on cuda:0..cuda:T-1 (vLLM's multiprocess executor), not on the "
                              "agent's device; put the agents on cuda:0, or use vllm_tensor_parallel_size: 1 (each "
                              "engine then sits on its agent's GPU)")


def _check_share_base(config: Config) -> None:
    """ConfigError when agent_model.share_base cannot hold: one base model holds every agent's LoRA adapter, so it
    needs LoRA, one device for the team and unsharded agents (the base model's names are checked as the team loads)."""
    if not config.agent_model.share_base:
        return
    if config.agent_model.lora is None:
        raise ConfigError("agent_model.share_base needs agent_model.lora: without LoRA each agent trains every weight "
                          "of its own model, which cannot be shared; set agent_model.lora (r, alpha, ...) or "
                          "share_base=false")
    for name in TRAINER_SECTIONS:
        section = Run.of(config, name).section
        if section.parallel_training == "fsdp":
            raise ConfigError(f"{name}.parallel_training: fsdp with agent_model.share_base: fsdp shards each agent's "
                              "model on its own; with a shared base use ddp (one base per process) or share_base=false")
        devices = device_list(section.agent_devices, f"{name}.agent_devices")
        if len(set(devices)) > 1:
            raise ConfigError(f"{name}.agent_devices: {', '.join(devices)} with agent_model.share_base: one base "
                              "model sits on one device; put every agent on one device, or share_base=false")


def check_consistency(config: Config) -> None:
    """Raise ConfigError for values that are fine alone but not together."""
    if hasattr(config.task, "validate"):
        config.task.validate()
    _check_vllm(config)
    _check_share_base(config)
    for name in TRAINER_SECTIONS:
        run = Run.of(config, name)
        section = run.section
        check_parallel_training(run)
        if section.parallel_training == "fsdp":
            _check_fsdp(run)
        for key, value in section_devices(section).items():
            device_list(value, f"{name}.{key}")
        if any(k < 1 or k > section.eval_num_generations for k in section.eval_pass_k):
            raise ConfigError(f"{name}.eval_pass_k: every k must be in [1, {name}.eval_num_generations="
                              f"{section.eval_num_generations}], got {section.eval_pass_k}")
