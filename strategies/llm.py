"""LLM backends for the strategies, all with `generate(prompt, n, params) -> list[Generation]`:

- `GeneratorLLM`: a local model through cooprl's samplers (transformers `HFGenerator`, or `VLLMGenerator` with
  `agent_model.generation_backend: vllm`): any HF model, the embedded ones, a trained checkpoint's agent.
- `TeamLLM`: a trained two-agent team (aux + main) as the coder: code prompts go through both agents (aux writes
  the helper, main the entry point, as in training); every other prompt goes to main.
- `OpenAILLM`: an OpenAI-compatible HTTP endpoint (`/chat/completions` or `/completions`), with urllib only
  (`evaluate_strategy.py --endpoint URL`).
- `ScriptedLLM`: canned answers chosen by substrings of the prompt, for tests.
`build_llm(config, checkpoint)` builds the local ones from a cooprl config.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Sequence

from cooprl.errors import UserError
from cooprl.rollout.generation import SamplingParams
from strategies.base import Generation


# Stop strings that end a code continuation but not a chat answer, which is markdown: prose may come before the
# opening fence, imports and helpers before the function (strategies.text.extract_code reads the fenced code).
_NOT_FOR_CHAT = ("\ndef ", "\nclass ", "\n```")


def for_chat(params: SamplingParams) -> SamplingParams:
    """Return `params` without the stop strings that would cut a chat (markdown) answer short."""
    return replace(params, stop_strings=tuple(s for s in params.stop_strings if s not in _NOT_FOR_CHAT))


class GeneratorLLM:
    """A local model: wraps an HFGenerator or VLLMGenerator (cooprl.rollout.generation /
    cooprl.rollout.vllm_generation)."""

    def __init__(self, generator: Any, name: str = "local"):
        self.generator, self.name = generator, name

    def generate(self, prompt: str, n: int, params: SamplingParams) -> list[Generation]:
        """Return n sampled answers, their token counts read off the sampler's ids."""
        if getattr(self.generator, "chat_template", False):
            params = for_chat(params)
        completions = self.generator.sample([prompt], n, params)[0]
        return [Generation(c.text, int(len(c.prompt_ids)), int(len(c.completion_ids))) for c in completions]


class TeamLLM:
    """A two-agent team as one coder. `generate` on a code prompt (one that ends with the problem's code, see
    strategies.text.code_prompt) samples aux and main with their training prompts, the guidance in front, and
    returns the joined program; any other prompt is answered by main alone. `main_sees_aux` (the team trained with
    aux_main.main_sees_aux): main's prompt shows the aux code of its own sample, as in training."""

    def __init__(self, aux: GeneratorLLM, main: GeneratorLLM, problems: Sequence[Any] = (),
                 main_sees_aux: bool = False):
        self.aux, self.main, self.name = aux, main, f"team({aux.name}+{main.name})"
        self.problems = list(problems)   # to recognise code prompts
        self.main_sees_aux = main_sees_aux

    def _problem_of_code_prompt(self, prompt: str) -> Any:
        from envs.code_generation.prompts import single_prompt
        for p in self.problems:
            if prompt.endswith(single_prompt(p)):
                return p
        return None

    def generate(self, prompt: str, n: int, params: SamplingParams) -> list[Generation]:
        from envs.code_generation.prompts import (aux_prompt, completion_to_code, main_prompt, single_prompt,
                                                  with_aux_code)
        problem = self._problem_of_code_prompt(prompt)
        if problem is None:
            return self.main.generate(prompt, n, params)
        guidance = prompt[:len(prompt) - len(single_prompt(problem))]
        auxes = self.aux.generate(guidance + aux_prompt(problem), n, params)
        if self.main_sees_aux:   # each main sample reads its own aux, as the sequential team trained
            mains = [self.main.generate(guidance + with_aux_code(main_prompt(problem),
                                                                 completion_to_code("aux", problem, a.text)), 1,
                                        params)[0] for a in auxes]
        else:
            mains = self.main.generate(guidance + main_prompt(problem), n, params)
        out = []
        for a, m in zip(auxes, mains):
            # the joined program, written out in full, so that strategies.text.extract_code keeps it as is
            code = completion_to_code("aux", problem, a.text) + "\n\n" + completion_to_code("main", problem, m.text)
            out.append(Generation(code, a.tokens_in + m.tokens_in, a.tokens_out + m.tokens_out))
        return out


class EndpointError(UserError):
    """An OpenAI-compatible endpoint could not be reached or answered with an error (the message names the URL)."""


class OpenAILLM:
    """An OpenAI-compatible endpoint (vLLM's or llama.cpp's server, `transformers serve`, a hosted API).

    `api="chat"` posts to `/chat/completions` (the prompt as one user message: what hosted APIs offer);
    `api="completions"` posts to `/completions` (the prompt continued as text: what our code prompts, which end
    inside the function, are written for). The key is read from the environment variable named by
    `api_key_env`. Servers differ in what they honour, so the answers are made the same here: a server that
    returns fewer than `n` choices (llama.cpp's and transformers' ignore `n`) is asked again for the rest; stop
    strings are sent (the first 4, OpenAI's cap) and applied again to every answer. A refused connection or an
    error status is retried `retries` times, then raises EndpointError."""

    APIS = ("chat", "completions")

    def __init__(self, model: str, base_url: str = "http://localhost:8000/v1", api_key_env: str = "OPENAI_API_KEY",
                 timeout_s: float = 120.0, api: str = "completions", retries: int = 2):
        if api not in self.APIS:
            raise ValueError(f"api {api!r}: expected one of {self.APIS}")
        self.name, self.base_url, self.timeout_s, self.api, self.retries = (
            model,
            base_url.rstrip("/"),
            timeout_s,
            api,
            retries,
        )
        self.api_key = os.environ.get(api_key_env, "")

    def generate(self, prompt: str, n: int, params: SamplingParams) -> list[Generation]:
        """Return n answers to `prompt`, cut at the stop strings; tokens: each request's prompt and answer tokens."""
        from cooprl.rollout.generation import first_stop
        if self.api == "chat":
            params = for_chat(params)
        out: list[Generation] = []
        while len(out) < n:
            choices, tokens_in, tokens_out = self._request(prompt, n - len(out), params)
            if not choices:
                raise EndpointError(f"{self.base_url}: the endpoint answered with no choices")
            for text in choices[:n - len(out)]:
                cut = first_stop(text, params.stop_strings)
                out.append(Generation(text if cut is None else text[:cut], tokens_in, tokens_out))
        return out

    def _request(self, prompt: str, n: int, params: SamplingParams) -> tuple[list[str], int, int]:
        """Return one request's (answer texts, prompt tokens, answer tokens per answer)."""
        body: dict[str, Any] = {"model": self.name, "n": n, "max_tokens": params.max_new_tokens,
                                "temperature": params.temperature, "top_p": params.top_p}
        if params.stop_strings:
            body["stop"] = list(params.stop_strings[:4])
        if self.api == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        url = f"{self.base_url}/{'chat/completions' if self.api == 'chat' else 'completions'}"
        request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json",
                                                  "Authorization": f"Bearer {self.api_key}"})
        for attempt in range(self.retries + 1):
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    reply = json.loads(response.read().decode("utf-8"))
                break
            except urllib.error.HTTPError as err:
                detail = err.read().decode("utf-8", "replace")[:300]
                if err.code < 500 or attempt == self.retries:   # a 4xx (bad model name, bad key) will not heal
                    raise EndpointError(f"{url}: HTTP {err.code}: {detail}") from None
            except (urllib.error.URLError, TimeoutError, ConnectionError, json.JSONDecodeError) as err:
                if attempt == self.retries:
                    raise EndpointError(f"{url}: {getattr(err, 'reason', err)} (is the server running? "
                                        f"--endpoint takes the base URL, e.g. http://localhost:8000/v1)") from None
            time.sleep(2 ** attempt)
        choices = reply.get("choices") or []
        texts = [((c.get("message") or {}).get("content") if self.api == "chat" else c.get("text")) or ""
                 for c in choices]
        usage = reply.get("usage") or {}
        return texts, int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0)) // max(1, len(texts))


class ScriptedLLM:
    """Deterministic canned answers for tests. `rules` is a list of (substring, answers): the first rule whose
    substring occurs in the prompt answers, cycling through its answers (a str, or a callable of the prompt).
    A prompt no rule matches gets `default`. Tokens are counted as whitespace-separated words. `prompts` logs
    every prompt asked."""

    def __init__(self, rules: Sequence[tuple[str, Sequence[str | Callable[[str], str]]]], default: str = "",
                 name: str = "scripted"):
        self.rules, self.default, self.name = [(k, list(v)) for k, v in rules], default, name
        self.turn: dict[int, int] = {}
        self.prompts: list[str] = []

    def generate(self, prompt: str, n: int, params: SamplingParams) -> list[Generation]:
        out = []
        for _ in range(n):
            self.prompts.append(prompt)
            text = self.default
            for i, (key, answers) in enumerate(self.rules):
                if key in prompt and answers:
                    k = self.turn.get(i, 0)
                    self.turn[i] = k + 1
                    answer = answers[k % len(answers)]
                    text = answer(prompt) if callable(answer) else answer
                    break
            out.append(Generation(text, len(prompt.split()), len(text.split())))
        return out


def checkpoint_folder(checkpoint: str) -> Path:
    """Return the checkpoint folder `checkpoint` names (a checkpoint folder; a checkpoints folder or a run folder:
    its newest complete checkpoint); ConfigError naming --checkpoint when there is none."""
    from cooprl import checkpoint as ckpt
    from cooprl.config import ConfigError
    try:
        return ckpt.find_named_checkpoint(checkpoint)
    except FileNotFoundError as err:
        raise ConfigError(f"--checkpoint: {err}") from None


def build_llm(config: Any, checkpoint: str | None = None, problems: Sequence[Any] = (),
              max_new_tokens: int = 256) -> Any:
    """Return the LLM a cooprl config describes: `agent_model` (or `agents:`) through the configured generation
    backend; with `checkpoint` (a checkpoint folder, a checkpoints folder or a run folder), the trained weights
    of agent 0 (one agent) or agents 0 and 1 when it holds two (a team: aux + main, see TeamLLM). `problems` are
    the problems the team will see (to recognise their code prompts)."""
    from cooprl import checkpoint as ckpt
    from cooprl.config import agent_names
    from cooprl.rollout.generation import HFGenerator
    from cooprl.checkpoint import init_folders, init_source, saved_policies
    from cooprl.models.loading import load_causal_lm, load_tokenizer, resolve_model_path, saved_models

    model_cfg = config.agent_model
    folder = checkpoint_folder(checkpoint) if checkpoint else None
    # agent_model.init_from: the starting weights of the run's agents (a checkpoint, when given, replaces them)
    start = init_source(model_cfg.init_from) if model_cfg.init_from else None
    saved = folder if folder is not None else start
    # the saved agents (an actor-critic run's critics come after them: a single actor and its critic is no team)
    # a shared policy's run saved one model for every agent (agent_model.shared_policy): a team, one model in memory
    shared = ckpt.shared_policy_agents(saved) if saved is not None else 0
    num_agents = 2 if saved is not None and (shared or len(saved_policies(saved) or saved_models(saved))) >= 2 else 1
    one = config.agents is not None and saved is None   # an untrained model of `agents:`: its first
    names = agent_names(config)[:1] if one else agent_names(config, num_agents)
    inits = init_folders(model_cfg.init_from, num_agents) if start is not None else [None] * num_agents
    # every agent and its engine on agent_model.device: checked as training does
    if model_cfg.generation_backend == "vllm":
        from cooprl.rollout.vllm_platform import check_vllm_devices
        check_vllm_devices(model_cfg, [model_cfg.device] * num_agents)   # fails fast, with the fix
    from cooprl.rollout.memory_plan import check_memory
    check_memory(config, [model_cfg.device] * (1 if shared else num_agents), max_new_tokens=max_new_tokens)
    llms = []
    for i, name in enumerate(names):
        if shared and llms:
            llms.append(GeneratorLLM(llms[0].generator, f"{name}#{i}"))
            continue
        model = load_causal_lm(name, torch_dtype=model_cfg.torch_dtype, device=model_cfg.device, lora=model_cfg.lora,
                               init=inits[i])
        if folder is not None:
            ckpt.load_agent_weights(model, folder, 0 if shared else i)
        tokenizer = load_tokenizer(name, model_cfg.special_tokens)
        model.config.use_cache = True
        max_prompt_tokens = max(model_cfg.max_length - max_new_tokens, 8)
        if model_cfg.generation_backend == "vllm":
            from cooprl.rollout.vllm_engines import AgentEngine
            from cooprl.rollout.vllm_generation import build_vllm_generator
            engine = AgentEngine(resolve_model_path(name), max_prompt_tokens, max_new_tokens, config.seed,
                                 name=f"agent {i}")
            generator = build_vllm_generator(model, tokenizer, model_cfg, engine)
        else:
            generator = HFGenerator(model, tokenizer, max_prompt_tokens=max_prompt_tokens,
                                    chat_template=model_cfg.chat_template)
        llms.append(GeneratorLLM(generator, f"{name}#{i}" if saved is not None else name))
    return llms[0] if len(llms) == 1 else TeamLLM(llms[0], llms[1], problems, config.task.aux_main.main_sees_aux)
