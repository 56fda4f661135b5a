"""Comparators for the iterative preference trainers: who writes the candidates the policies are compared against.

`comparator_policy`:
- `current`: no comparator; the policies' own samples are compared with each other (build returns None);
- `copy`: a frozen copy of the start policies (with LoRA: the same model with its adapters disabled);
- `model`: `comparator_model`, loaded once as a frozen model that plays every role;
- `api`: `comparator_model` behind an OpenAI-compatible chat API (deterministic: one candidate per item).
`comparator_generation_mode`:
- `decentralized`: the comparator answers each policy's own prompt (role by role);
- `centralized`: it writes every role in one answer to the task's joint prompt, split back into one text per
  policy by the task's `JointFormat` (for the code task: `<auxiliary>`/`<main>` sections). A task whose
  single policy already answers jointly (centralized collaboration) just uses its own prompt.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

import torch

from cooprl.config import Config, ConfigError
from cooprl.generation import Completion, HFGenerator, SamplingParams
from cooprl.preferences import Candidate
from cooprl.task import Task

# (model name, max new tokens) -> client(messages) -> reply text; e.g. envs.code_generation.transitions.make_expert_client
ApiClientFactory = Callable[[str, int], Callable[[list[dict]], str]]


@dataclass
class JointFormat:
    """How one model answers for every role at once (the task provides it for centralized comparators)."""

    prompt: Callable[[Any], str]               # item -> the joint prompt
    split: Callable[[Any, str], list[str]]     # (item, joint answer) -> one completion text per policy
    stop_strings: tuple[str, ...] = ()


class Comparator:
    """Writes `n` unscored joint candidates per item with one generator per role (or one for the joint prompt)."""

    def __init__(self, task: Task, generators: Sequence[Any], params: Sequence[SamplingParams],
                 joint_format: JointFormat | None = None, keep_ids: bool = False, max_candidates: int | None = None):
        self.task, self.generators, self.params = task, list(generators), list(params)
        self.joint_format, self.keep_ids, self.max_candidates = joint_format, keep_ids, max_candidates

    @torch.no_grad()
    def sample(self, items: Sequence[Any], n: int) -> list[list[Candidate]]:
        """Return n candidates per item: each a text per policy (ids only when the policies' tokenizer made them)."""
        none = [None] * self.task.num_agents
        if self.joint_format is not None:
            fmt = self.joint_format
            answers = self.generators[0].sample([fmt.prompt(item) for item in items], n, self.params[0])
            return [[Candidate(fmt.split(item, c.text), list(none)) for c in per_item]
                    for item, per_item in zip(items, answers)]
        prompts = [self.task.first_prompts(item) for item in items]
        per_role = [gen.sample([p[a] for p in prompts], n, params)
                    for a, (gen, params) in enumerate(zip(self.generators, self.params))]
        return [[Candidate([per_role[a][k][g].text for a in range(self.task.num_agents)],
                           [per_role[a][k][g].completion_ids.tolist() if self.keep_ids else None
                            for a in range(self.task.num_agents)]) for g in range(n)]
                for k in range(len(items))]


class _AdapterOffGenerator:
    """Samples from a LoRA policy with its adapters disabled: the start model, without a second copy."""

    def __init__(self, generator: HFGenerator):
        self.generator = generator

    def sample(self, prompts: Sequence[str], n: int, params: SamplingParams) -> list[list[Completion]]:
        with self.generator.model.disable_adapter():
            return self.generator.sample(prompts, n, params)


class _ApiGenerator:
    """Samples from an OpenAI-compatible chat API: each prompt is one user message."""

    def __init__(self, client: Callable[[list[dict]], str]):
        self.client = client

    def sample(self, prompts: Sequence[str], n: int, params: SamplingParams) -> list[list[Completion]]:
        empty = torch.zeros(0, dtype=torch.long)
        return [[Completion(self.client([{"role": "user", "content": p}]), empty, empty, False) for _ in range(n)]
                for p in prompts]


def _frozen_generator(agent: Any) -> Any:
    if hasattr(agent.model, "disable_adapter"):
        return _AdapterOffGenerator(agent.generator)
    model = copy.deepcopy(agent.model).eval().requires_grad_(False)
    return HFGenerator(model, agent.tokenizer, max_prompt_tokens=agent.generator.max_prompt_tokens,
                       chat_template=agent.generator.chat_template)


def build_comparator(config: Config, trainer: str, task: Task, team: Sequence[Any],
                     joint_format: JointFormat | None = None, api_client: ApiClientFactory | None = None
                     ) -> Comparator | None:
    """Return the comparator `trainer`'s section asks for (None for `current`); ConfigError when it cannot be built."""
    section = config.trainer(trainer)
    kind = section.comparator_policy
    centralized = section.comparator_generation_mode == "centralized" and task.num_agents > 1
    if kind == "current":
        if centralized:
            raise ConfigError(f"{trainer}.comparator_generation_mode=centralized needs a comparator that writes both "
                              f"roles: set {trainer}.comparator_policy to copy, model or api")
        return None
    if centralized and joint_format is None:
        raise ConfigError(f"{trainer}.comparator_generation_mode=centralized: task {task.name!r} has no joint answer format")
    if kind in ("model", "api") and not section.comparator_model:
        raise ConfigError(f"{trainer}.comparator_policy={kind} needs {trainer}.comparator_model (a model name)")

    max_tokens = section.max_new_tokens
    if section.comparator_generation_mode == "centralized":
        max_tokens = section.comparator_centralized_max_new_tokens or max_tokens
    if centralized:  # one generator answers the joint prompt
        stops = [joint_format.stop_strings]
    else:            # one generator per role, with that role's stop strings
        stops = [task.stop_strings[a] if a < len(task.stop_strings) else () for a in range(task.num_agents)]
    params = [replace(team[0].params, max_new_tokens=max_tokens, stop_strings=tuple(s)) for s in stops]
    roles = len(params)

    if kind == "copy":  # role a is played by agent a's start model (the joint answer by agent 0's)
        generators = [_frozen_generator(agent) for agent in team[:roles]]
        return Comparator(task, generators, params, joint_format if centralized else None, keep_ids=True)
    if kind == "model":
        from cooprl.models import load_causal_lm, load_tokenizer
        cfg = config.agent_model
        model = load_causal_lm(section.comparator_model, torch_dtype=cfg.torch_dtype, device=cfg.device)
        model.eval().requires_grad_(False)
        generator = HFGenerator(model, load_tokenizer(section.comparator_model, cfg.special_tokens),
                                max_prompt_tokens=max(cfg.max_length - max_tokens, 8), chat_template=cfg.chat_template)
        return Comparator(task, [generator] * roles, params, joint_format if centralized else None)
    if api_client is None:
        raise ConfigError(f"{trainer}.comparator_policy=api: this task provides no API client")
    try:
        client = api_client(section.comparator_model, max_tokens)
    except ValueError as err:
        raise ConfigError(f"{trainer}.comparator_policy=api needs an OpenAI-compatible API: {err}") from None
    return Comparator(task, [_ApiGenerator(client)] * roles, params, joint_format if centralized else None,
                      max_candidates=1)
