"""The team of agents: one model, tokenizer, sampler and optimizer per agent (decentralized mode).

Homogeneous agents load `agent_model.name` once per agent (each agent trains its own copy); heterogeneous
agents give one name per agent in `agents:`. With `agent_model.lora`, each agent gets its own adapter.
With `agent_model.generation_backend: vllm`, each agent samples with its own vLLM engine, which receives
the agent's new weights after every optimizer step (see cooprl.rollout.vllm_generation).

Placement: `agent_devices` puts every agent on one device or each on its own (one device per agent); under
`parallel_training: ddp` each process puts its agents on its own GPU (cuda:LOCAL_RANK) and its optimizers average
their gradients over the processes (cooprl.parallel.distributed); under `fsdp` each process keeps a shard of every agent
(cooprl.parallel.fsdp). Under `parallel_training: mp` an `AgentRunner` runs the
agents' calls on one thread per agent (torch releases the GIL in its kernels, so agents on different GPUs overlap).
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Sequence, TypeVar

import torch

from cooprl.checkpoint import init_folders, lost_init
from cooprl.config import Config, ConfigError, MADPOSection, Run, TrainerSection, model_devices
from cooprl.models.loading import (check_saved_lora, load_causal_lm, load_tokenizer, resolve_model_path,
                                   set_memory_options)
from cooprl.parallel.context import Parallel
from cooprl.rollout import memory_plan, vllm_platform
from cooprl.rollout.generation import Completion, HFGenerator, SamplingParams
from cooprl.rollout.vllm_generation import VLLMGenerator, build_vllm_generator, watch_optimizer
from cooprl.update.optim import build_adamw

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass
class Agent:
    """One trainable policy."""

    name: str
    model: Any
    tokenizer: Any
    generator: Any             # HFGenerator, or VLLMGenerator (same interface) with generation_backend: vllm
    optimizer: torch.optim.Optimizer
    params: SamplingParams

    def sample(self, prompts: Sequence[str], n: int) -> list[list[Completion]]:
        """Return n completions for each prompt."""
        return self.generator.sample(prompts, n, self.params)


def agent_model_names(config: Config, num_agents: int) -> list[str]:
    """Return the model name of each agent (the `agents:` list, or agent_model.name for all)."""
    if config.agents is None:
        return [config.agent_model.name] * num_agents
    if len(config.agents) != num_agents:
        raise ConfigError(f"agents: {len(config.agents)} model names given for {num_agents} agents; give one per "
                          f"agent, or agents=null for agent_model.name in every agent")
    return list(config.agents)


def agent_devices(config: Config, section: TrainerSection, num_agents: int) -> list[str]:
    """Return each agent's device: `agent_devices` (one for all, or one per agent), else agent_model.device; under
    data-parallel training with several processes, the process's own GPU when the device is CUDA."""
    devices = model_devices(section.agent_devices, "agent_devices", num_agents, config.agent_model.device)
    return Parallel.devices(devices)


def build_team(run: Run, num_agents: int, stop_strings: Sequence[tuple[str, ...]] = (),
               parallel: Parallel | None = None, prompts: Callable[[], Sequence[str]] | None = None) -> list[Agent]:
    """Return one Agent per role of `run` with its model (agent_model), sampler settings and AdamW optimizer (the
    run's section); under fsdp (`parallel`, None: the run's section's) each process keeps a shard of every agent.
    `prompts()`: the task's first prompts, which bound a single-turn GPU run's in the memory plan."""
    config, section = run.config, run.section
    model_cfg = config.agent_model
    params = SamplingParams(
        max_new_tokens=section.max_new_tokens,
        temperature=section.temperature if section.temperature is not None else model_cfg.temperature,
        top_p=section.top_p if section.top_p is not None else model_cfg.top_p,
        top_k=section.top_k if section.top_k is not None else model_cfg.top_k)
    devices = agent_devices(config, section, num_agents)
    if model_cfg.generation_backend == "vllm":
        vllm_platform.check_vllm_devices(model_cfg, devices)   # before any model is loaded: fail fast with the fix
    # either backend: states, engines and the update's peak, per GPU
    memory_plan.check_memory(config, devices, run, prompts=prompts)
    parallel = parallel or Parallel.of(section)
    # agent_model.init_from: each agent starts from its own saved weights or adapters of a finished run
    # (a resumed run whose init_from folder was deleted: its checkpoint holds every weight, see lost_init)
    init_from = model_cfg.init_from
    if config.checkpoint.resume_from_checkpoint and lost_init(init_from, model_cfg.lora, uses_start_models(section)):
        init_from = None
    inits = init_folders(init_from, num_agents) if init_from else [None] * num_agents
    for init in inits:   # before any model loads
        check_saved_lora(init, model_cfg.lora)
    team = []
    for i, name in enumerate(agent_model_names(config, num_agents)):
        device = devices[i]
        model = load_causal_lm(name, torch_dtype=model_cfg.torch_dtype, device=device, lora=model_cfg.lora,
                               init=inits[i])
        set_memory_options(model, logprob_chunk_size=model_cfg.logprob_chunk_size,
                           gradient_checkpointing=model_cfg.gradient_checkpointing, autocast=model_cfg.autocast)
        tokenizer = load_tokenizer(name, model_cfg.special_tokens)
        model.config.use_cache = True
        model = parallel.prepare(model)   # sharded under fsdp, before the optimizer, which must hold the shards
        max_prompt_tokens = max(model_cfg.max_length - section.max_new_tokens, 8)
        trainable = [p for p in model.parameters() if p.requires_grad]
        optimizer = build_adamw(trainable, lr=section.learning_rate, weight_decay=section.weight_decay,
                                bf16_optimizer=model_cfg.bf16_optimizer)
        if model_cfg.generation_backend == "vllm":
            generator = build_vllm_generator(model, tokenizer, model_cfg, resolve_model_path(name), max_prompt_tokens,
                                             section.max_new_tokens, config.seed, device=device,  # engine on it
                                             section=section, ranks=parallel.ranks, agent=f"agent {i}")
            watch_optimizer(optimizer, generator)  # every optimizer step, whichever trainer takes it
        else:
            generator = HFGenerator(model, tokenizer, max_prompt_tokens=max_prompt_tokens,
                                    chat_template=model_cfg.chat_template)
        agent_params = params
        if i < len(stop_strings) and stop_strings[i]:
            agent_params = SamplingParams(**{**params.__dict__, "stop_strings": tuple(stop_strings[i])})
        team.append(Agent(name, model, tokenizer, generator, optimizer, agent_params))
        n_train = sum(p.numel() for p in trainable)
        log.info("agent %d: %s on %s, %.1fM trainable parameters", i, name, model.device, n_train / 1e6)
    return team


def uses_start_models(section: TrainerSection) -> bool:
    """Return whether training compares the agents with their start models (a reference KL, MADPO's
    reference_model): frozen copies of them are built with the team."""
    return section.reference_kl_coef > 0 or (isinstance(section, MADPOSection) and section.reference_model)


class AgentRunner:
    """Runs one call per agent: on one thread per agent under `parallel_training: mp`, else one after the other.

    Random numbers decide what runs concurrently, so that mp gives the numbers none gives:
    - sampling draws from the generator of the agent's device. Agents on distinct CUDA devices each have their own
      generator, so their sampling runs concurrently and each draws what it draws in order; agents that share a
      generator (the CPU's, or one GPU's) sample one after the other, in agent order;
    - an update draws no random number unless a model has active dropout (none of the Qwen/Llama family in training
      does): updates run concurrently, except for agents with dropout that share a generator. The update's own
      draws (the node schedule's shuffle) are taken before, in agent order (see MAGRPO.update).
    """

    def __init__(self, team: Sequence[Agent], mode: str = "none"):
        self.concurrent = mode == "mp" and len(team) > 1
        # (only mp needs the devices: scripted agents of the tests have no model)
        devices = [next(agent.model.parameters()).device for agent in team] if self.concurrent else []
        own_generators = all(d.type == "cuda" for d in devices) and len(set(devices)) == len(devices)
        # vLLM engines in one process share vLLM's process-wide forward context: never two generate calls at once
        engines = self.concurrent and any(isinstance(agent.generator, VLLMGenerator) for agent in team)
        self.concurrent_sampling = self.concurrent and own_generators and not engines
        self.concurrent_updates = self.concurrent and (own_generators or
                                                       not any(has_dropout(agent.model) for agent in team))
        self._pool = ThreadPoolExecutor(len(team), thread_name_prefix="cooprl-agent") if self.concurrent else None

    def run_sampling(self, call: Callable[[int], T], num_agents: int) -> list[T]:
        """Return [call(0), call(1), ...] for the agents' sampling (concurrent when their generators are their own)."""
        return self._map(call, num_agents, self.concurrent_sampling)

    def run_updates(self, call: Callable[[int], T], num_agents: int) -> list[T]:
        """Return [call(0), call(1), ...] for the agents' updates (concurrent under mp, see the class docstring)."""
        return self._map(call, num_agents, self.concurrent_updates)

    def _map(self, call: Callable[[int], T], num_agents: int, concurrent: bool) -> list[T]:
        if not concurrent or self._pool is None:
            return [call(a) for a in range(num_agents)]
        futures = [self._pool.submit(call, a) for a in range(num_agents)]
        return [future.result() for future in futures]   # the first agent's error is raised here


def has_dropout(model: Any) -> bool:
    """Return whether `model` draws random numbers in training mode: a dropout module or attention dropout > 0."""
    config = getattr(model, "config", None)
    if (getattr(config, "attention_dropout", 0.0) or 0.0) > 0:
        return True
    return any(isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.p > 0 for m in model.modules())
