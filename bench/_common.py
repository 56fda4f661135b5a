"""Shared pieces of the benchmarks: the fixed settings, prompts, reward, transition, timers and peak memory.

Everything here is plain Python that every side (cooprl, comlrl, TRL) is given unchanged, so the only
difference between the sides is the trainer itself.
"""

from __future__ import annotations

import functools
import json
import os
import resource
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# The fixed settings every side uses.
MODEL = os.environ.get("BENCH_MODEL", "offline:smollm2-135m-instruct")   # offline:tiny-random for a smoke test
NUM_GENERATIONS = 4
MAX_NEW_TOKENS = 64
TEMPERATURE = 0.6
TOP_P = 0.6
TOP_K = 50                 # comlrl's default; given to cooprl and TRL too
LEARNING_RATE = 2e-5
NUM_PROBLEMS = 4           # the first N HumanEval problems (test[:N])
SEED = 0


def embedded_generator(threads: int = 1, seed: int = 0) -> Any:
    """Return an HFGenerator on the embedded SmolLM2 (float32, CPU), torch seeded and limited to `threads` threads:
    the sampler of the behaviour benches (aux_calls, function_rate, self_tests_correlation)."""
    import torch
    from cooprl.rollout.generation import HFGenerator
    from cooprl.models.loading import SMOLLM2, load_causal_lm, load_tokenizer
    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    return HFGenerator(load_causal_lm(SMOLLM2, torch_dtype="float32", device="cpu"), load_tokenizer(SMOLLM2),
                       max_prompt_tokens=1024)


def model_path() -> str:
    """Return the local HF folder of the embedded SmolLM2 (loadable by path by any trainer)."""
    from cooprl.models.loading import resolve_model_path
    return str(resolve_model_path(MODEL))


def problems(n: int) -> list[Any]:
    """Return the first n HumanEval problems."""
    from envs.code_generation.data import load_problems
    return load_problems({"type": "humaneval"}, f"test[:{n}]")


ROLES = ("You write a helper function for the main function below.",
         "You complete the main function below.")


def first_prompt(agent: int, num_agents: int, problem_prompt: str) -> str:
    """Return the first-turn prompt of `agent` (the same text for every side)."""
    if num_agents == 1:
        return f"Complete the following Python function.\n\n{problem_prompt}"
    return f"{ROLES[agent % len(ROLES)]}\n\n{problem_prompt}"


def plain_transition(prompt: str, completion: str) -> str:
    """The `plain` next-turn prompt: the agent's own last prompt and answer, then a request to revise."""
    return f"{prompt}{completion}\n\nRevise your answer above.\n"


def format_score(text: str) -> float:
    """A pure-Python reward of one completion in [0, 1]: a small code-format score (no sandbox)."""
    score = 0.0
    if "def " in text or "return" in text:
        score += 0.4
    if "return" in text:
        score += 0.2
    if "```" not in text:
        score += 0.2
    # a smooth length term, so that sibling samples almost never tie (a tie gives a zero advantage,
    # and cooprl skips zero-advantage samples: the update would not be measured)
    score += 0.2 * min(len(text.strip()), 200) / 200
    return score


def joint_reward(texts: list[str]) -> float:
    """Shared reward of a joint action: the sum of the agents' format scores (max = number of agents)."""
    return float(sum(format_score(t) for t in texts))


class Timers:
    """Accumulated wall seconds, process CPU seconds and call counts per named phase.

    CPU seconds (user + system of this process) are the steadier figure on a shared machine: with 1 torch
    thread they are the phase's own compute, while wall seconds also count the time other jobs held the core.
    """

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.cpu_seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}

    @contextmanager
    def time(self, name: str):
        start, start_cpu = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - start, time.process_time() - start_cpu)

    def add(self, name: str, seconds: float, cpu_seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds
        self.cpu_seconds[name] = self.cpu_seconds.get(name, 0.0) + cpu_seconds
        self.calls[name] = self.calls.get(name, 0) + 1

    def wrap(self, owner: Any, attr: str, name: str) -> None:
        """Replace owner.attr (a function or method) by a timed version, from the outside."""
        original = getattr(owner, attr)
        timers = self

        @functools.wraps(original)
        def timed(*args, **kwargs):
            with timers.time(name):
                return original(*args, **kwargs)

        setattr(owner, attr, timed)

    def get(self, name: str) -> float:
        return self.seconds.get(name, 0.0)

    def get_cpu(self, name: str) -> float:
        return self.cpu_seconds.get(name, 0.0)


def peak_rss_gb() -> float:
    """Peak resident memory of this process in GB (Linux ru_maxrss is in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2


def write_result(path: str | os.PathLike, result: dict[str, Any]) -> None:
    """Write one side's result as JSON (the parent process reads it back)."""
    result = {**result, "peak_rss_gb": peak_rss_gb()}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(result, indent=2))


def seed_all(seed: int = SEED) -> None:
    import random

    import torch
    random.seed(seed)
    torch.manual_seed(seed)


def now() -> float:
    return time.perf_counter()


Callback = Callable[..., Any]
