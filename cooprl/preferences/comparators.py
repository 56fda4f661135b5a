"""Comparators for the iterative preference trainers: who writes the candidates the policies are compared against.

`comparator_policy`:
- `current`: the live policies write a second candidate set of their own; with
  `comparator_candidate_budget: shared` and no `comparator_num_candidates`, no comparator (build returns None): the
  policies' own samples are compared with each other. In centralized mode the live policy of agent
  `comparator_centralized_agent_index` writes joint answers;
- `current_copy`: a frozen copy of the policies, refreshed at the start of every iteration (CurrentCopyComparator);
- `copy`: a frozen copy of the start policies (with LoRA: the same model with its adapters disabled);
- `history`: frozen copies of the policies as they were `comparator_history_k` iterations earlier (HistoryComparator);
  its snapshots are part of the trainer's checkpoint, so a resumed run compares against the same policies;
- `model`: `comparator_model`, loaded once as a frozen model that plays every role;
- `api`: `comparator_model` behind an OpenAI-compatible chat API (deterministic: one candidate per item).
`comparator_generation_mode`:
- `decentralized`: the comparator answers each policy's own prompt (role by role);
- `centralized`: it writes every role in one answer to the task's joint prompt, split back into one text per
  policy by the task's `JointFormat` (e.g. one tagged section per role). A task whose
  single policy already answers jointly (centralized collaboration) just uses its own prompt.
"""

from __future__ import annotations

import copy
import json
import os
import urllib.request
from dataclasses import replace
from typing import Any, Callable, Sequence

import torch

from cooprl.config import (ConfigError, IterativeFields, MADPOIterSection, MARLHFIterSection, Run, model_devices,
                           trainer_device)
from cooprl.models.loading import load_causal_lm, load_tokenizer
from cooprl.parallel.context import Parallel
from cooprl.preferences.pairs import Candidate
from cooprl.rollout.generation import Completion, HFGenerator, SamplingParams
from cooprl.task import ApiClientFactory, JointFormat, Task

class Comparator:
    """Writes `n` unscored joint candidates per item with one generator per role (or one for the joint prompt)."""

    def __init__(self, task: Task, generators: Sequence[Any], params: Sequence[SamplingParams],
                 joint_format: JointFormat | None = None, keep_ids: bool = False, max_candidates: int | None = None):
        self.task, self.generators, self.params = task, list(generators), list(params)
        self.joint_format, self.keep_ids, self.max_candidates = joint_format, keep_ids, max_candidates
        self.num_candidates: int | None = None   # comparator_num_candidates: its own count (None: share the total)

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


# the sections with a comparator: the iterative preference trainers' (their comparator_* keys: IterativeFields)
ComparatorSection = MADPOIterSection | MARLHFIterSection


def build_comparator(run: Run[ComparatorSection], task: Task, team: Sequence[Any]) -> Comparator | None:
    """Return the comparator `run`'s section asks for (None: `current` with a shared budget, see the module doc),
    with the task's joint answer format and API client; ConfigError when it cannot be built."""
    comparator = _build_comparator(run, task, team, task.joint_format, task.api_client)
    if comparator is not None:
        comparator.num_candidates = comparator_candidate_count(run.section)
    return comparator


def comparator_candidate_count(section: IterativeFields) -> int | None:
    """Return how many candidates of its own the comparator writes per problem: `comparator_num_candidates`, else
    (budget `separate`, the default) `preference_num_candidates`; None (budget `shared`): up to half of
    `preference_num_candidates` (see cooprl.preferences.pairs.split_candidates)."""
    if section.comparator_num_candidates is not None:
        return section.comparator_num_candidates
    return section.preference_num_candidates if section.comparator_candidate_budget == "separate" else None


def _build_comparator(run: Run[ComparatorSection], task: Task, team: Sequence[Any],
                      joint_format: JointFormat | None, api_client: ApiClientFactory | None) -> Comparator | None:
    trainer, section = run.trainer, run.section
    kind = section.comparator_policy
    centralized = section.comparator_generation_mode == "centralized" and task.num_agents > 1
    if kind == "current" and not centralized and comparator_candidate_count(section) is None:
        return None   # shared budget: the policies' own candidates are compared with each other
    if centralized and joint_format is None:
        raise ConfigError(f"{trainer}.comparator_generation_mode=centralized: task {task.name!r} has no joint answer "
                          f"format")
    if kind == "model" and not (section.comparator_model or section.comparator_agents):
        raise ConfigError(f"{trainer}.comparator_policy=model needs {trainer}.comparator_model (a model name) or "
                          f"{trainer}.comparator_agents (one per role)")
    if kind == "api" and not (section.comparator_model or section.comparator_api_model):
        raise ConfigError(f"{trainer}.comparator_policy=api needs {trainer}.comparator_model or "
                          f"{trainer}.comparator_api_model (the API's model name)")
    writer = section.comparator_centralized_agent_index   # who writes a centralized comparator's joint answer
    if centralized and kind in ("current", "current_copy", "copy", "history") and writer >= len(team):
        raise ConfigError(f"{trainer}.comparator_centralized_agent_index={writer}: there are {len(team)} policies "
                          f"(0 to {len(team) - 1})")

    joint_budget = None
    if section.comparator_generation_mode == "centralized":
        joint_budget = section.comparator_centralized_max_new_tokens or section.max_new_tokens
    if centralized:  # one generator answers the joint prompt, sampling as agent `writer` (agent 0 for a model/api)
        agent = team[writer] if writer < len(team) else team[0]
        params = [replace(agent.params, max_new_tokens=joint_budget, stop_strings=tuple(joint_format.stop_strings))]
    else:            # one generator per role, sampling as its agent does (its own settings), with the role's stops
        stops = [task.stop_strings[a] if a < len(task.stop_strings) else () for a in range(task.num_agents)]
        params = [replace(agent.params, max_new_tokens=joint_budget or agent.params.max_new_tokens,
                          stop_strings=tuple(s)) for agent, s in zip(team, stops, strict=True)]
    roles = len(params)
    max_tokens = max(p.max_new_tokens for p in params)

    if kind == "current" and centralized:  # the live policy of agent `writer` answers the joint prompt
        return Comparator(task, [team[writer].generator], params, joint_format)
    if kind == "current":  # the live policies write a candidate set of their own
        return Comparator(task, [agent.generator for agent in team[:roles]], params, keep_ids=True)
    if kind in ("history", "current_copy"):  # frozen snapshots of the policies (see HistoryComparator)
        players = [team[writer]] if centralized else list(team[:roles])
        if kind == "current_copy":
            return CurrentCopyComparator(task, players, params, joint_format if centralized else None)
        return HistoryComparator(task, players, params, section.comparator_history_k or 1,
                                 joint_format if centralized else None)
    if kind == "copy":  # role a is played by agent a's start model (the joint answer by agent `writer`'s)
        players = [team[writer]] if centralized else team[:roles]
        generators = [_frozen_generator(agent) for agent in players]
        return Comparator(task, generators, params, joint_format if centralized else None, keep_ids=not centralized)
    if kind == "model":
        names = comparator_model_names(run, roles)
        return Comparator(task, _model_generators(run, names, max_tokens), params,
                          joint_format if centralized else None)
    if api_client is None:
        raise ConfigError(f"{trainer}.comparator_policy=api: this task provides no API client")
    model = section.comparator_api_model or section.comparator_model
    key = None
    if section.comparator_api_key_env:
        key = os.environ.get(section.comparator_api_key_env)
        if not key:
            raise ConfigError(f"{trainer}.comparator_api_key_env: the environment variable "
                              f"{section.comparator_api_key_env} (the comparator API's key) is not set")
    if section.comparator_api_format == "generic" and section.comparator_api_url:
        complete = generic_api_completer(section.comparator_api_url, model, key, max_tokens,
                                         section.comparator_api_max_n_per_request, params[0])
        return Comparator(task, [_CompletionApiGenerator(complete)] * roles, params,
                          joint_format if centralized else None)
    try:
        client = api_client(model, max_tokens, base_url=section.comparator_api_url, api_key=key)
    except ValueError as err:
        raise ConfigError(f"{trainer}.comparator_policy=api: the comparator model {model!r} (an OpenAI-compatible "
                          f"chat API) has {err}, or give {trainer}.comparator_api_url and "
                          f"{trainer}.comparator_api_key_env (the variable holding its key)") from None
    return Comparator(task, [_ApiGenerator(client)] * roles, params, joint_format if centralized else None,
                      max_candidates=1)


class HistoryComparator(Comparator):
    """comparator_policy history: at iteration i the comparator is the policies as iteration
    i - comparator_history_k ended them, i.e. at the start of iteration i - k + 1 (the start policies when that is
    before iteration 0). With k = 1 that is the policies as the iteration began, frozen while it trains. Snapshots
    of the trainable weights are kept on the CPU, one per iteration start, and only as long as a later iteration can
    still play them (at most k); `state_dict` hands them to the trainer's checkpoint, so a resumed run plays exactly
    the snapshots the uninterrupted run would."""

    def __init__(self, task: Task, players: Sequence[Any], params: Sequence[SamplingParams], history_k: int,
                 joint_format: JointFormat | None = None):
        self.players, self.history_k = list(players), history_k
        self.copies = [copy.deepcopy(agent.model).eval().requires_grad_(False) for agent in self.players]
        generators = [HFGenerator(model, agent.tokenizer, max_prompt_tokens=agent.generator.max_prompt_tokens,
                                  chat_template=agent.generator.chat_template)
                      for model, agent in zip(self.copies, self.players)]
        super().__init__(task, generators, params, joint_format, keep_ids=joint_format is None)
        self.snapshots: dict[int, list[dict[str, torch.Tensor]]] = {}
        self.loaded: int | None = None

    def start_iteration(self, iteration: int) -> int:
        """Snapshot the policies at the start of `iteration` (once) and load the snapshot the comparator plays;
        return the iteration whose start it is."""
        if iteration not in self.snapshots:
            self.snapshots[iteration] = [{name: p.detach().to("cpu", copy=True) for name,
                                          p in agent.model.named_parameters()
                                          if p.requires_grad} for agent in self.players]
        target = max(iteration - self.history_k + 1, 0)
        older = [k for k in self.snapshots if k <= target]
        source = max(older) if older else min(self.snapshots)
        for stale in [k for k in self.snapshots if k < source]:   # later iterations play `source` or newer ones
            del self.snapshots[stale]
        if source != self.loaded:
            for model, state in zip(self.copies, self.snapshots[source]):
                model.load_state_dict(state, strict=False)
            self.loaded = source
        return source

    def state_dict(self) -> dict[str, Any]:
        """Return the snapshots still in play, {iteration: [one {parameter name: CPU tensor} per player]}: plain
        data for the trainer's checkpoint (read back with torch.load(weights_only=True))."""
        return {"snapshots": {k: [dict(state) for state in states] for k, states in self.snapshots.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the snapshots `state_dict` saved; the next `start_iteration` loads the one it plays."""
        self.snapshots = {int(k): [dict(s) for s in states] for k, states in state["snapshots"].items()}
        self.loaded = None


class CurrentCopyComparator(HistoryComparator):
    """comparator_policy current_copy: a copy of the current policies made at the start of every iteration and
    frozen while it trains. Pairs
    collected offline at the iteration's first step see the same weights as `current`; online collection (every step)
    compares the moving policies with the iteration's starting point. A history comparator with k = 1."""

    def __init__(self, task: Task, players: Sequence[Any], params: Sequence[SamplingParams],
                 joint_format: JointFormat | None = None):
        super().__init__(task, players, params, 1, joint_format)


def comparator_model_names(run: Run[ComparatorSection], roles: int) -> list[str]:
    """Return the comparator model of each role: `comparator_agents` (one per role), else `comparator_model`."""
    trainer, section = run.trainer, run.section
    if section.comparator_agents is None:
        return [section.comparator_model] * roles
    if len(section.comparator_agents) != roles:
        raise ConfigError(f"{trainer}.comparator_agents: {len(section.comparator_agents)} model names given for "
                          f"{roles} comparator role(s)")
    return list(section.comparator_agents)


def _model_generators(run: Run[ComparatorSection], names: Sequence[str], max_tokens: int) -> list[Any]:
    """Return one frozen generator per role for `names` (a name used by several roles is loaded once, on its first
    role's device), on `comparator_devices` (one for all, or one per role; else the first agent's device)."""
    cfg, section = run.config.agent_model, run.section
    devices = Parallel.devices(model_devices(section.comparator_devices, "comparator_devices", len(names),
                                             trainer_device(section.agent_devices, "agent_devices", cfg.device)))
    loaded: dict[str, Any] = {}
    for name, device in zip(names, devices):
        if name in loaded:   # a model two roles share stays on its first role's device
            continue
        model = load_causal_lm(name, torch_dtype=cfg.torch_dtype, device=device)
        model.eval().requires_grad_(False)
        loaded[name] = HFGenerator(model, load_tokenizer(name, cfg.special_tokens),
                                   max_prompt_tokens=max(cfg.max_length - max_tokens,
                                                         8), chat_template=cfg.chat_template)
    return [loaded[name] for name in names]


def _post_json(url: str, payload: dict, headers: dict[str, str], timeout_s: float = 120.0) -> Any:
    request = urllib.request.Request(url, data=json.dumps(payload).encode(), method="POST",
                                     headers={"Content-Type": "application/json", **headers})
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        return json.loads(response.read().decode())


def generic_api_completer(url: str, model: str | None, api_key: str | None, max_tokens: int,
                          max_n_per_request: int | None, params: SamplingParams,
                          post: Callable[[str, dict, dict], Any] = _post_json) -> Callable[[str, int], list[str]]:
    """Return `complete(prompt, n) -> n texts` for the generic comparator API (`comparator_api_format: generic`;
    docs/upstream.md says where it comes from): POST {prompt, n, max_tokens, temperature, top_p, model} to `url`,
    answer {"completions": [text, ...]}; at most `max_n_per_request` completions asked per request (several
    requests when n is larger); an answer without a non-empty `completions` list is a RuntimeError."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def complete(prompt: str, n: int) -> list[str]:
        texts: list[str] = []
        while len(texts) < n:
            ask = n - len(texts) if not max_n_per_request else min(max_n_per_request, n - len(texts))
            payload = {"prompt": prompt, "n": ask, "max_tokens": max_tokens, "temperature": params.temperature,
                       "top_p": params.top_p, **({"model": model} if model else {})}
            reply = post(url, payload, headers)
            got = reply.get("completions") if isinstance(reply, dict) else None
            if not isinstance(got, list) or not got:
                raise RuntimeError(f"comparator API at {url}: expected {{\"completions\": [...]}}, got "
                                   f"{str(reply)[:200]}")
            texts += [str(t) for t in got[:ask]]
        return texts
    return complete


class _CompletionApiGenerator:
    """Samples from the generic comparator API (`generic_api_completer`): `complete(prompt, n)` returns n texts."""

    def __init__(self, complete: Callable[[str, int], list[str]]):
        self.complete = complete

    def sample(self, prompts: Sequence[str], n: int, params: SamplingParams) -> list[list[Completion]]:
        empty = torch.zeros(0, dtype=torch.long)
        return [[Completion(text, empty, empty, False) for text in self.complete(p, n)] for p in prompts]
