"""One vLLM engine for a team whose agents share one base model (`agent_model.share_base` with
`generation_backend: vllm`): each agent samples its own LoRA adapter as a LoRA request of that engine.

The engine is built with the first agent's generator (cooprl.rollout.vllm_generation.VLLMGenerator, LoRA sync) and
holds `max_loras` = agents adapters at once; every later agent gets a generator of its own that samples from the same
engine (`TeamEngine.join`). What is an agent's own: its model (the source of its adapter), tokenizer, adapter
versions and their LoRA ids (distinct over agents and versions: version v of agent i of N is (v - 1) x N + i + 1), and
its stale-weights guard, which checks the agent's own adapter after each new version and after every wake. What is
the engine's: its base weights (never pushed: LoRA sync), its KV cache and its sleep, which is the team's: the first
agent's update puts it to sleep, once per rollout, and the first agent to sample after wakes it, once
(`EngineUsers`). Under ddp each rank builds one such engine (vLLM's external_launcher executor, as a single agent's).

Merged weight sync cannot serve a team (one engine holds one set of weights): `agent_model.vllm_weight_sync: merged`
with share_base is refused when the config is loaded (cooprl.config.rules), before any model loads.
"""

from __future__ import annotations

import copy
from typing import Any

from cooprl.config import ConfigError
from cooprl.rollout.vllm_guard import WeightGuard
from cooprl.rollout.vllm_platform import engine_device


class TeamEngine:
    """The engine `size` agents share, built with the first generator (`seat_first`) and joined by the others."""

    def __init__(self, size: int):
        self.size = size
        self.generators: list[Any] = []

    def seat_first(self, generator: Any) -> Any:
        """Make `generator` (a VLLMGenerator with LoRA sync whose engine holds `size` adapters) the team's engine and
        its first agent's sampler; return it."""
        if generator.weight_sync != "lora":
            raise ConfigError("agent_model.share_base with generation_backend vllm: the team's engine serves every "
                              "agent's adapter as a LoRA request; set agent_model.vllm_weight_sync=lora")
        generator.seat = (0, self.size)
        self.generators.append(generator)
        return generator

    def join(self, model: Any, tokenizer: Any, guard: WeightGuard | None, device: str) -> Any:
        """Return the generator of the next agent (`model`, on `device`: the engine's) sampling from the team's
        engine: its own adapter versions, LoRA ids and guard; the engine's settings, sleep and close shared."""
        first = self.generators[0]
        index = len(self.generators)
        if index >= self.size:
            raise ValueError(f"the team's engine holds {self.size} agents' adapters; agent {index} is one more")
        if engine_device(device) != first.device:
            raise ConfigError(f"agent_model.share_base: agent {index} is on {device}, the team's vLLM engine on "
                              f"{first.device}; agents that share one base sit on one device")
        generator = copy.copy(first)   # the engine's attributes (its llm, device, settings) and its EngineUsers
        generator.set_agent(model, tokenizer, guard, adapter_dir=None)
        generator.seat = (index, self.size)
        if generator.sleep:   # this agent's update, too, puts the team's engine to sleep (whichever comes first)
            model.get_input_embeddings().register_forward_pre_hook(generator._sleep_for_update)
        first.users.generators.append(generator)
        self.generators.append(generator)
        return generator
