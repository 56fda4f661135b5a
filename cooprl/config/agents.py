"""Each agent's own settings: an `agents:` entry (a model name, or a mapping of the agent's model and settings) with
every key it leaves out taken from the shared value, resolved once into a frozen `AgentSettings`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

from cooprl.config.fields import ConfigError
from cooprl.config.schema import AgentEntry, Config
from cooprl.config.trainer_sections import TrainerSection


@dataclass(frozen=True)
class AgentSettings:
    """What one agent samples and trains with: its model, AdamW learning rate and sampling settings."""

    name: str
    learning_rate: float
    temperature: float
    top_p: float
    top_k: Optional[int]
    max_new_tokens: int


def agent_entries(config: Config) -> list[AgentEntry] | None:
    """Return the `agents:` list with every entry as a mapping (a plain string: its model name), or None when
    `agents` is null."""
    if config.agents is None:
        return None
    return [AgentEntry(name=entry) if isinstance(entry, str) else entry for entry in config.agents]


def agent_names(config: Config, num_agents: int | None = None) -> list[str]:
    """Return the model name of each of `num_agents` agents (None: one per `agents:` entry, one when it is null): its
    `agents:` entry's, else agent_model.name; ConfigError when `agents` gives another number of entries."""
    entries = agent_entries(config)
    if entries is None:
        return [config.agent_model.name] * (1 if num_agents is None else num_agents)
    if num_agents is not None and len(entries) != num_agents:
        raise ConfigError(f"agents: {len(entries)} model names given for {num_agents} agents; give one per agent (a "
                          "model name or a mapping of its own settings), or agents=null for agent_model.name in every "
                          "agent")
    return [entry.name or config.agent_model.name for entry in entries]


def agent_settings(config: Config, section: TrainerSection, num_agents: int) -> list[AgentSettings]:
    """Return the settings of each of `num_agents` agents trained by `section`: its `agents:` entry's own values,
    else the section's (temperature, top_p and top_k: else agent_model's); ConfigError for a wrong count."""
    names = agent_names(config, num_agents)
    model = config.agent_model
    shared = AgentSettings(
        name=model.name, learning_rate=section.learning_rate,
        temperature=section.temperature if section.temperature is not None else model.temperature,
        top_p=section.top_p if section.top_p is not None else model.top_p,
        top_k=section.top_k if section.top_k is not None else model.top_k,
        max_new_tokens=section.max_new_tokens)
    entries = agent_entries(config) or [AgentEntry()] * num_agents
    own = [{key: value for key, value in dataclasses.asdict(entry).items() if value is not None} for entry in entries]
    return [dataclasses.replace(shared, **{**values, "name": name}) for name, values in zip(names, own, strict=True)]
