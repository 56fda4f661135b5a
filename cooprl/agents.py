"""The team of agents: one model, tokenizer, sampler and optimizer per agent (decentralized mode).

Homogeneous agents load `agent_model.name` once per agent (each agent trains its own copy); heterogeneous
agents give one name per agent in `agents:`. With `agent_model.lora`, each agent gets its own adapter.
With `agent_model.generation_backend: vllm`, each agent samples with its own vLLM engine, which receives
the agent's new weights after every optimizer step (see cooprl.vllm_generation).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from cooprl.config import Config, ConfigError, trainer_device
from cooprl.generation import Completion, HFGenerator, SamplingParams
from cooprl.models import load_causal_lm, load_tokenizer, resolve_model_path, set_memory_options

log = logging.getLogger(__name__)


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
        raise ConfigError(f"agents: {len(config.agents)} model names given for {num_agents} agents")
    return list(config.agents)


def build_team(config: Config, section: Any, num_agents: int,
               stop_strings: Sequence[tuple[str, ...]] = ()) -> list[Agent]:
    """Return one Agent per role with its model, sampler settings and AdamW optimizer."""
    model_cfg = config.agent_model
    params = SamplingParams(
        max_new_tokens=section.max_new_tokens,
        temperature=section.temperature if section.temperature is not None else model_cfg.temperature,
        top_p=section.top_p if section.top_p is not None else model_cfg.top_p,
        top_k=section.top_k if getattr(section, "top_k", None) is not None else model_cfg.top_k)
    device = trainer_device(section, "agent_devices", model_cfg.device)   # upstream's agent_devices: one device
    if model_cfg.generation_backend == "vllm":
        from cooprl.vllm_generation import check_vllm_backend
        check_vllm_backend(device)  # before any model is loaded: fail fast with the fix
    team = []
    for i, name in enumerate(agent_model_names(config, num_agents)):
        model = load_causal_lm(name, torch_dtype=model_cfg.torch_dtype, device=device, lora=model_cfg.lora)
        set_memory_options(model, logprob_chunk_size=model_cfg.logprob_chunk_size,
                           gradient_checkpointing=model_cfg.gradient_checkpointing, autocast=model_cfg.autocast)
        tokenizer = load_tokenizer(name, model_cfg.special_tokens)
        model.config.use_cache = True
        max_prompt_tokens = max(model_cfg.max_length - section.max_new_tokens, 8)
        trainable = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(trainable, lr=section.learning_rate, weight_decay=section.weight_decay)
        if model_cfg.generation_backend == "vllm":
            from cooprl.vllm_generation import build_vllm_generator, watch_optimizer
            generator = build_vllm_generator(model, tokenizer, model_cfg, resolve_model_path(name), max_prompt_tokens,
                                             section.max_new_tokens, config.seed)
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
