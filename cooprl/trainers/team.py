"""The team of agents: one model, tokenizer, sampler and optimizer per agent (decentralized mode).

Homogeneous agents load `agent_model.name` once per agent (each agent trains its own copy); heterogeneous
agents give one name per agent in `agents:`, where an entry may also give the agent its own learning rate and
sampling settings (cooprl.config.agents). With `agent_model.lora`, each agent gets its own adapter; with
`agent_model.share_base` too, every agent's adapter sits on one base model (cooprl.models.shared_base). With
`agent_model.shared_policy` every agent holds the same model, tokenizer, sampler and optimizer (built as a team of one),
and keeps its own sampling settings (`build_shared_policy_team`).
With `agent_model.generation_backend: vllm`, each agent samples with its own vLLM engine, which receives
the agent's new weights after every optimizer step (see cooprl.rollout.vllm_generation); with
`agent_model.share_base`, one engine serves every agent's adapter (cooprl.rollout.vllm_team).

Placement: `agent_devices` puts every agent on one device or each on its own (one device per agent); under
`parallel_training: ddp` each process puts its agents on its own GPU (cuda:LOCAL_RANK) and its optimizers average
their gradients over the processes (cooprl.parallel.distributed); under `fsdp` each process keeps a shard of every agent
(cooprl.parallel.fsdp). Under `parallel_training: mp` an `AgentRunner` runs the
agents' calls on one thread per agent (torch releases the GIL in its kernels, so agents on different GPUs overlap).
"""

from __future__ import annotations

import dataclasses
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

import torch

from cooprl.checkpoint import init_folders, init_source, lost_init, saved_policies, shared_policy_agents
from cooprl.config import (Config, ConfigError, MADPOSection, Run, TrainerSection, agent_settings,
                           model_devices)
from cooprl.models.loading import (check_saved_lora, load_causal_lm, load_tokenizer, resolve_model_path,
                                   set_memory_options)
from cooprl.models.shared_base import check_shareable, load_shared_base, shares_a_base
from cooprl.parallel.context import Parallel
from cooprl.rollout import memory_plan, vllm_platform
from cooprl.rollout.generation import Completion, HFGenerator, SamplingParams
from cooprl.rollout.vllm_engines import AgentEngine
from cooprl.rollout.vllm_generation import VLLMGenerator, build_vllm_generator, watch_optimizer
from cooprl.rollout.vllm_team import TeamEngine
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
    if run.config.agent_model.shared_policy:   # one model plays every role (issue 45)
        return build_shared_policy_team(run, num_agents, stop_strings, parallel, prompts)
    config, section = run.config, run.section
    model_cfg = config.agent_model
    settings = agent_settings(config, section, num_agents)   # each agent's own (`agents:` entries), else the shared
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
    names = [own.name for own in settings]
    shared = None   # agent_model.share_base: one base model, an adapter per agent (cooprl.models.shared_base)
    if model_cfg.share_base:
        check_shareable(names, devices, inits)
        shared = load_shared_base(names[0], inits, lora=model_cfg.lora, torch_dtype=model_cfg.torch_dtype,
                                  device=devices[0])
    team = []
    # agent_model.share_base with vLLM: one engine serves every agent's adapter (cooprl.rollout.vllm_team)
    team_engine = TeamEngine(num_agents) if model_cfg.share_base and model_cfg.generation_backend == "vllm" else None
    for i, own in enumerate(settings):
        name, device = own.name, devices[i]
        model = shared[i] if shared else load_causal_lm(name, torch_dtype=model_cfg.torch_dtype, device=device,
                                                        lora=model_cfg.lora, init=inits[i])
        set_memory_options(model, logprob_chunk_size=model_cfg.logprob_chunk_size,
                           gradient_checkpointing=model_cfg.gradient_checkpointing, autocast=model_cfg.autocast)
        tokenizer = load_tokenizer(name, model_cfg.special_tokens)
        model.config.use_cache = True
        model = parallel.prepare(model)   # sharded under fsdp, before the optimizer, which must hold the shards
        max_prompt_tokens = max(model_cfg.max_length - own.max_new_tokens, 8)
        trainable = [p for p in model.parameters() if p.requires_grad]
        optimizer = build_adamw(trainable, lr=own.learning_rate, weight_decay=section.weight_decay,
                                bf16_optimizer=model_cfg.bf16_optimizer)
        if model_cfg.generation_backend == "vllm":
            agent_engine = AgentEngine(resolve_model_path(name), max_prompt_tokens, own.max_new_tokens, config.seed,
                                       device=device, name=f"agent {i}")   # the engine on the agent's device
            generator = build_vllm_generator(model, tokenizer, model_cfg, agent_engine, section=section,
                                             ranks=parallel.ranks, team=team_engine)
            watch_optimizer(optimizer, generator)  # every optimizer step, whichever trainer takes it
        else:
            generator = HFGenerator(model, tokenizer, max_prompt_tokens=max_prompt_tokens,
                                    chat_template=model_cfg.chat_template)
        agent_params = SamplingParams(max_new_tokens=own.max_new_tokens, temperature=own.temperature, top_p=own.top_p,
                                      top_k=own.top_k, stop_strings=tuple(stop_strings[i]) if i < len(stop_strings)
                                      else ())
        team.append(Agent(name, model, tokenizer, generator, optimizer, agent_params))
        n_train = sum(p.numel() for p in trainable)
        log.info("agent %d: %s on %s, %.1fM trainable parameters", i, name, model.device, n_train / 1e6)
    return team


def build_shared_policy_team(run: Run, num_agents: int, stop_strings: Sequence[tuple[str, ...]] = (),
                             parallel: Parallel | None = None,
                             prompts: Callable[[], Sequence[str]] | None = None) -> list[Agent]:
    """Return `num_agents` Agents that are one model, tokenizer, sampler and optimizer (agent_model.shared_policy),
    built as a team of one; each role keeps its own sampling settings (its stop strings)."""
    config = run.config
    # (check_shared_policy refused different models, learning rates or max_new_tokens among the agents)
    settings = agent_settings(config, run.section, num_agents)
    alone = dataclasses.replace(config, agents=config.agents[:1] if config.agents else None,
                                agent_model=dataclasses.replace(config.agent_model, shared_policy=False))
    [member] = build_team(dataclasses.replace(run, config=alone), 1, (), parallel, prompts)
    team = []
    for i, own in enumerate(settings):   # each role samples with its own settings (its `agents:` entry's)
        params = dataclasses.replace(member.params, temperature=own.temperature, top_p=own.top_p, top_k=own.top_k,
                                     stop_strings=tuple(stop_strings[i]) if i < len(stop_strings) else ())
        team.append(dataclasses.replace(member, params=params))
    log.info("shared policy: the one model plays all %d agents", num_agents)
    return team


def check_shared_policy(run: Run, num_agents: int) -> None:
    """Raise ConfigError, before any model loads, when agent_model.shared_policy cannot train `run` with
    `num_agents` agents; nothing when it is off."""
    config, trainer = run.config, run.trainer
    if not config.agent_model.shared_policy:
        return
    key = "agent_model.shared_policy"
    if trainer not in SHARED_POLICY_TRAINERS:
        raise ConfigError(f"{key}: {trainer} does not train a shared policy (it is built for "
                          f"{', '.join(SHARED_POLICY_TRAINERS)}): {SHARED_POLICY_REFUSALS.get(trainer, '')}")
    if num_agents < 2:
        raise ConfigError(f"{key}: this {trainer} run has one agent (grpo, or a centralized task), so there is no "
                          "other role to share its model with; remove it")
    if config.agent_model.share_base:
        raise ConfigError(f"{key} and agent_model.share_base: a shared policy is one model (one adapter, with LoRA) "
                          "for every agent, share_base one base with an adapter per agent; choose one")
    settings = agent_settings(config, run.section, num_agents)
    if len({own.name for own in settings}) > 1:
        raise ConfigError(f"{key}: agents names different models ({', '.join(own.name for own in settings)}), and one "
                          "model plays every role; name one model (agent_model.name) or set shared_policy false")
    for what in ("learning_rate", "max_new_tokens"):   # one optimizer; one sampler cuts prompts for one budget
        if len({getattr(own, what) for own in settings}) > 1:
            raise ConfigError(f"{key}: the agents: entries give different {what}s, and one model with one optimizer "
                              f"and one sampler plays every role; give every agent one {what} (sampling settings may "
                              "differ)")
    init_from = config.agent_model.init_from
    if init_from and Path(init_from).expanduser().exists():
        source = init_source(init_from)
        if not shared_policy_agents(source) and len(saved_policies(source)) > 1:
            raise ConfigError(f"{key} with agent_model.init_from: {source} holds {len(saved_policies(source))} "
                              "separate agents, and a shared policy starts from one model: a shared-policy run's or a "
                              "one-agent run's")
    mode = run.section.parallel_training
    if mode != "none":
        raise ConfigError(f"{key} with {trainer}.parallel_training: {mode}: {SHARED_POLICY_MODES[mode]}; set "
                          f"{trainer}.parallel_training=none")


# what agent_model.shared_policy trains (one optimizer step on every agent's loss), and why the others do not
SHARED_POLICY_TRAINERS = ("magrpo", "madpo")
SHARED_POLICY_REFUSALS = {
    "grpo": "it trains one agent, so there is no other role to share its model with",
    "iac": "its actors step one after the other, each with its critic's values, not in one step",
    "maac": "its actors step one after the other, each with the critic's values, not in one step",
    "ac": "it trains one agent, so there is no other role to share its model with",
    "madpo_iter": "its comparator's policy snapshots are per agent",
    "marlhf": "its reward model is saved as one of the agents' folders",
    "marlhf_iter": "its reward model is saved as one of the agents' folders",
    "sft": "it takes one optimizer step per agent on its demonstrations",
}
SHARED_POLICY_MODES = {
    "mp": "mp runs each agent's calls on a thread (and device) of its own, and a shared policy is one model",
    "ddp": "not built yet (its gradient average weighs every process by its whole step, not by each agent's part)",
    "fsdp": "not built yet (a sharded step divides every term by one global sample count)",
}


def distinct(items: Sequence[T]) -> list[T]:
    """Return `items` without repeats (by identity), in order: the models or optimizers of a team, each once (a
    shared policy's agents hold the same ones)."""
    return list({id(item): item for item in items}.values())


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
        # agents of one shared base (agent_model.share_base) switch its adapter around each call: never at once
        self.concurrent = mode == "mp" and len(team) > 1 and not shares_a_base([agent.model for agent in team])
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
