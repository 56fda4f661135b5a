"""SFT: supervised fine-tuning of every agent of a team on demonstrations (train_sft.py).

Each agent learns its own role's text after its own prompt: the loss is the negative log-likelihood of the
demonstrated completion's tokens (and the EOS that ends it), the prompt's tokens masked out. It runs on the shared
loop (`cooprl.trainers.loop`): one run folder, checkpoints, resume, W&B/JSONL and the evaluation of every other
trainer, and its run folder is what `agent_model.init_from` starts the RL trainers from.

Why the project's own update and not TRL's SFTTrainer per agent: TRL's trainer owns a loop, a run folder and
checkpoints per model, so a team of N agents would be N runs with N folders and no team evaluation between them;
here one loop trains the agents side by side, evaluates them as a team on the task (the same rollouts and metrics as
the RL trainers: the task's reward parts, pass@k) and saves them in the checkpoint layout the other trainers resume and
start from. The update is one `cooprl.update.engine.optimizer_step` per agent (`sft_step`) on
`cooprl.update.losses.sft_loss` divided by
the completion tokens: the mean NLL per token, with the engine's non-finite skip and clipping.

Demonstrations (`sft.demonstrations`):
- `reference`: the task's own (`Task.demonstrations`), one per training problem that has a reference; a training
  problem that is also an eval problem (overlapping splits) is left out, with a warning;
- a `.jsonl` file: one `{"prompts": [...], "completions": [...]}` record a line, one string per agent each (a teacher
  model's answers, say). A malformed record, or one whose prompt is an eval problem's, is a DemonstrationError naming
  FILE:LINE.
A training step takes `sft.batch_size` demonstrations: the demonstrations are shuffled once with the seed and cut into
batches, which become the task's training items (the loop's data order permutes them every epoch).
"""

from __future__ import annotations

import json
import logging
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch

from cooprl.config import ConfigError, Run, SFTSection
from cooprl.errors import UserError
from cooprl.metrics import SUM, Metrics
from cooprl.models.logprobs import completion_logprobs
from cooprl.parallel.context import Parallel
from cooprl.task import Task, all_first_prompts
from cooprl.text import plain_text
from cooprl.trainers.base import TeamAlgorithm
from cooprl.trainers.team import Agent, build_team
from cooprl.update.engine import Term, optimizer_step
from cooprl.update.losses import sft_loss

log = logging.getLogger(__name__)


class DemonstrationError(UserError, ValueError):
    """A demonstrations file that cannot be read, or a malformed record in it; the message names FILE:LINE."""


@dataclass
class Demonstration:
    """What every agent should answer to its prompt: one prompt and one completion per agent, and where it is from."""

    prompts: list[str]
    completions: list[str]
    source: str                 # the problem's id, or FILE:LINE


@dataclass
class TokenizedDemonstration:
    """A demonstration as token ids, per agent: the prompt as the agent's sampler encodes it, the completion + EOS."""

    prompt_ids: list[torch.Tensor]
    completion_ids: list[torch.Tensor]
    source: str


# ------------------------------------------------------------------------------------------ the loss and the update
def sft_step(model: Any, optimizer: torch.optim.Optimizer, prompts: Sequence[torch.Tensor],
             completions: Sequence[torch.Tensor], pad_id: int, max_grad_norm: float | None) -> dict[str, float]:
    """Take one optimizer step of `model` on the NLL of `completions` after `prompts` (one forward, through the update
    engine); return metrics: nll (mean per token), grad_norm, tokens, skipped_nonfinite (1 when a non-finite loss or
    gradient skipped it)."""
    tokens = float(sum(len(c) for c in completions))   # what the forward's mask counts: every completion token

    def loss(_batch: Any, denominator: float) -> tuple[torch.Tensor, dict[str, float]]:
        token_logps, mask = completion_logprobs(model, list(prompts), list(completions), pad_id)
        return sft_loss(token_logps, mask.to(token_logps.dtype)) / max(denominator, 1.0), {}

    result = optimizer_step([optimizer], [Term([None], loss, "nll")], [model], weight=tokens,
                            max_grad_norm=max_grad_norm)
    norm = result.grad_norms[0] if result.grad_norms else None
    return {"nll": result.losses["nll"], "tokens": tokens, "grad_norm": norm if norm is not None else 0.0,
            "skipped_nonfinite": float(result.skipped)}


# ------------------------------------------------------------------------------------------ demonstrations
def reference_demonstrations(task: Task) -> list[Demonstration]:
    """Return the task's own demonstrations of its training problems (none of an eval problem): the agents' first
    prompts, agent a > 0 of a sequential team after the earlier agents' demonstrated texts. ConfigError when the task
    has none."""
    if task.demonstrations is None:
        raise ConfigError(f"sft.demonstrations: reference: task {task.name} has no reference demonstrations; give "
                          f"a .jsonl file of {{prompts, completions}} records")
    eval_ids = {task.item_id(item) for item in task.eval_items}
    found, overlap = [], 0
    for item in task.train_items:
        if task.item_id(item) in eval_ids:
            overlap += 1
            continue
        completions = task.demonstrations(item)
        if completions is None:
            continue
        found.append(Demonstration(task_prompts(task, item, completions), list(completions), task.item_id(item)))
    if overlap:
        log.warning("sft: %d training problem(s) are also eval problems (overlapping splits): left out of the "
                    "demonstrations", overlap)
    if not found:
        raise ConfigError(f"sft.demonstrations: reference: none of the {len(task.train_items)} training problems of "
                          f"{task.name} (outside the eval split) has a reference to demonstrate")
    return found


def task_prompts(task: Task, item: Any, completions: Sequence[str]) -> list[str]:
    """Return each agent's first prompt for `item`; in a sequential team agent a > 0 sees the earlier agents'
    `completions` (`Task.follow_prompt`), as in a rollout."""
    prompts = task.first_prompts(item)
    if task.follow_prompt is None:
        return prompts
    return [prompts[0]] + [task.follow_prompt(item, a, prompts[a], list(completions[:a]))
                           for a in range(1, len(prompts))]


def read_demonstrations(path: Path, num_agents: int) -> list[Demonstration]:
    """Return the demonstrations of the JSONL file at `path`: one `{"prompts": [...], "completions": [...]}` record
    a line with one string per agent each (blank lines skipped). DemonstrationError naming FILE:LINE for a record
    that is not that, and for a file that cannot be read or holds none."""
    if not path.is_file():
        raise DemonstrationError(f"sft.demonstrations: {str(path)!r}: no such file (expected 'reference' or a "
                                 f".jsonl file)")
    found = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (UnicodeDecodeError, OSError) as err:
        raise DemonstrationError(f"{path}: cannot be read as UTF-8 text ({type(err).__name__})") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as err:
            raise DemonstrationError(f"{where}: not valid JSON ({getattr(err, 'msg', 'nested too deeply')})") from None
        found.append(_record(record, where, num_agents))
    if not found:
        raise DemonstrationError(f"{path}: holds no demonstration")
    return found


def _record(record: Any, where: str, num_agents: int) -> Demonstration:
    """Return the Demonstration of one JSONL record; DemonstrationError naming `where` and the fault otherwise."""
    if not isinstance(record, dict):
        raise DemonstrationError(f"{where}: a record is an object with 'prompts' and 'completions', not a "
                                 f"{type(record).__name__}")
    unknown = sorted(set(record) - {"prompts", "completions", "id"})
    if unknown:
        raise DemonstrationError(f"{where}: unknown field(s) {unknown}; a record has 'prompts', 'completions' "
                                 f"(and an optional 'id')")
    for key in ("prompts", "completions"):
        value = record.get(key)
        if not isinstance(value, list) or len(value) != num_agents:
            raise DemonstrationError(f"{where}: '{key}' must be a list of {num_agents} strings (one per agent), got "
                                     f"{_kind(value)}")
        for a, text in enumerate(value):
            if not isinstance(text, str) or not text.strip():
                raise DemonstrationError(f"{where}: {key}[{a}] must be a non-empty string, got {_kind(text)}")
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                raise DemonstrationError(f"{where}: {key}[{a}] holds a lone surrogate") from None
    return Demonstration(list(record["prompts"]), list(record["completions"]), str(record.get("id") or where))


def _kind(value: Any) -> str:
    if isinstance(value, list):
        return f"a list of {len(value)}"
    return "nothing" if value is None else f"a {type(value).__name__}"


def check_no_eval_prompts(demonstrations: Sequence[Demonstration], task: Task) -> None:
    """Raise DemonstrationError naming the record when a demonstration's prompt is the first prompt of an eval problem
    (a model trained on it would be evaluated on what it was shown)."""
    eval_prompts = {}
    for item in task.eval_items:
        for prompt in task.first_prompts(item):
            eval_prompts.setdefault(prompt, task.item_id(item))
    for demo in demonstrations:
        for a, prompt in enumerate(demo.prompts):
            if prompt in eval_prompts:
                raise DemonstrationError(f"{demo.source}: prompts[{a}] is the prompt of eval problem "
                                         f"{eval_prompts[prompt]}: demonstrations never come from the eval split")


def load_demonstrations(spec: str, task: Task) -> list[Demonstration]:
    """Return the demonstrations `sft.demonstrations` names for `task` (see the module docstring)."""
    if spec == "reference":
        return reference_demonstrations(task)
    demonstrations = read_demonstrations(Path(spec).expanduser(), task.num_agents)
    check_no_eval_prompts(demonstrations, task)
    return demonstrations


def tokenize(demonstration: Demonstration, team: Sequence[Agent]) -> TokenizedDemonstration:
    """Return `demonstration` as each agent's token ids: the prompt as its sampler encodes it (chat template, left
    cut), the completion as plain text followed by the EOS token (what a sampled completion ends with)."""
    prompts, completions = [], []
    for agent, prompt, completion in zip(team, demonstration.prompts, demonstration.completions):
        prompts.append(agent.generator.encode_prompts([prompt])[0])
        ids = agent.tokenizer(plain_text(completion, agent.tokenizer), add_special_tokens=False)["input_ids"]
        eos = agent.tokenizer.eos_token_id
        completions.append(torch.tensor(list(ids) + [eos if isinstance(eos, int) else eos[0]], dtype=torch.long))
    return TokenizedDemonstration(prompts, completions, demonstration.source)


# ------------------------------------------------------------------------------------------ the algorithm
class SFT(TeamAlgorithm):
    """Supervised fine-tuning for the shared training loop: a training item is a batch of demonstrations."""

    section: SFTSection
    # no reward to train on: the bar, the summary and the plot show the loss (cooprl.trainers.loop)
    loss_key = "nll_mean"

    def train_step(self, item: list[TokenizedDemonstration], step: int) -> Metrics:
        """Take one optimizer step per agent on its completions of the batch `item`; return per-agent metrics."""
        def update(a: int) -> dict[str, float]:
            agent = self.team[a]
            return sft_step(agent.model, agent.optimizer, [d.prompt_ids[a] for d in item],
                            [d.completion_ids[a] for d in item], agent.tokenizer.pad_token_id,
                            self.section.max_grad_norm)

        metrics = Metrics({"demonstrations": float(len(item))})
        metrics.add("env_steps", len(item), SUM)
        per_agent = self.runner.run_updates(update, len(self.team))
        for a, agent_metrics in enumerate(per_agent):
            metrics.merge(Metrics(agent_metrics), prefix=f"agent_{a}/")
        nll = [agent_metrics["nll"] for agent_metrics in per_agent]
        metrics.add("nll_mean", sum(nll) / len(nll) if all(math.isfinite(x) for x in nll) else float("nan"))
        return metrics


def demonstration_batches(demonstrations: list[TokenizedDemonstration], size: int, seed: int
                          ) -> list[list[TokenizedDemonstration]]:
    """Return the demonstrations shuffled once with `seed` and cut into batches of `size` (the last may be short)."""
    order = list(range(len(demonstrations)))
    random.Random(seed).shuffle(order)
    shuffled = [demonstrations[i] for i in order]
    return [shuffled[start:start + size] for start in range(0, len(shuffled), size)]


# a cap below this share of the demonstrations is a mistake worth a warning; a few long ones are the usual tail
LONG_DEMONSTRATIONS_WARN_SHARE = 0.25


def note_long_demonstrations(tokenized: Sequence[TokenizedDemonstration], max_new_tokens: int, trainer: str) -> int:
    """Log how many demonstrations have a completion longer than `max_new_tokens` (the agents learn answers their
    sampling cuts short): a warning when they are more than LONG_DEMONSTRATIONS_WARN_SHARE of them, else an info
    line (configs/sft_che_cpu.yaml keeps 128, the cap its RL phase samples and evaluates with, for 5 of 69 longer
    ones); return their number."""
    lengths = [max(len(ids) for ids in d.completion_ids) for d in tokenized]
    long = sum(n > max_new_tokens for n in lengths)
    if long:
        share = long / len(lengths)
        (log.warning if share > LONG_DEMONSTRATIONS_WARN_SHARE else log.info)(
            "sft: %d of %d demonstrated completions are longer than %s.max_new_tokens=%d (the longest %d tokens): "
            "the agents learn answers their sampling will cut short", long, len(lengths), trainer, max_new_tokens,
            max(lengths))
    return long


def build_sft(run: Run[SFTSection], task: Task, parallel: Parallel | None = None) -> SFT:
    """Return the SFT algorithm for `task`, its agents loaded; `task.train_items` become the batches of tokenized
    demonstrations the loop steps through (the eval items stay the task's problems). ConfigError for a data-parallel
    `parallel_training` (one process trains the agents) and for demonstrations that cannot be had."""
    config, trainer, section = run.config, run.trainer, run.section
    if section.parallel_training not in ("none", "auto"):
        raise ConfigError(f"{trainer}.parallel_training: {section.parallel_training}: supervised fine-tuning runs in "
                          f"one process, the agents one after the other; set it to none")
    demonstrations = load_demonstrations(section.demonstrations, task)   # before any model is loaded
    team = build_team(run, task.num_agents, task.stop_strings, parallel, lambda: all_first_prompts(task))
    tokenized = [tokenize(d, team) for d in demonstrations]
    note_long_demonstrations(tokenized, section.max_new_tokens, trainer)
    task.train_items = demonstration_batches(tokenized, section.batch_size, config.seed)
    log.info("sft: %d demonstrations in %d batches of up to %d", len(tokenized), len(task.train_items),
             section.batch_size)
    return SFT(run, task, team, parallel=parallel)
