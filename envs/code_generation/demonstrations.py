"""Reference demonstrations of the code task: what each agent should write, built from a problem's reference solution.

Each function returns one completion per agent for the agent's first prompt (`envs.code_generation.prompts`), or
None when the problem has no reference to build it from. A completion continues its prompt exactly as a sampled
one would: the aux prompt ends with `def aux(`, so aux's completion is the rest of the reference aux; the main and
single prompts end with the problem's code (or inside the body, `code_prompt.open_body`), so their completion is the
function's body. The trainer (cooprl.trainers.sft) never calls these on eval problems.

- aux+main: the coop set's reference pair (`reference_aux`, `reference_main`): main's body calls aux;
- single (one agent, and the coders of the team environments): HumanEval's canonical solution, or the coop set's
  reference as one function (the reference aux nested at the top of main's body: a column-0 helper would end the
  completion at the stop string `\\ndef `).
"""

from __future__ import annotations

import re
import textwrap

from envs.code_generation.prompts import AUX_HEADER, problem_code
from rewards.problem import Problem

INDENT = "    "


def function_body(code: str, name: str) -> str | None:
    """Return the body of function `name` in `code` (its lines after the header, as written), or None when `code`
    has no `def name(` at column 0. Lines before the header (imports) are dropped; the prompt has them."""
    header = re.search(rf"^def {re.escape(name)}\(", code, flags=re.MULTILINE)
    if header is None:
        return None
    # the header ends at the first line ending with ':' (a signature may run over several lines)
    end = re.search(r":[ \t]*(#[^\n]*)?\n", code[header.start():])
    if end is None:
        return None
    return code[header.start() + end.end():]


def _continue_prompt(prompt: str, body: str) -> str:
    """Return `body` as the continuation of `prompt`: when the prompt already ends with the body's first indentation
    (`code_prompt.open_body`), that indentation is not written twice."""
    tail = prompt[len(prompt.rstrip(" \t")):]
    if tail and body.startswith(tail):
        return body[len(tail):]
    return body


def aux_completion(problem: Problem) -> str | None:
    """Return aux's demonstration: the reference aux after its prompt's `def aux(`; None without a reference aux."""
    aux = problem.extra.get("reference_aux") or ""
    if not aux.startswith(AUX_HEADER):
        return None
    return aux[len(AUX_HEADER):].rstrip() + "\n"


def main_completion(problem: Problem) -> str | None:
    """Return main's demonstration: the body of the reference main (it calls aux); None without a reference pair."""
    body = function_body(problem.extra.get("reference_main") or "", problem.entry_point)
    if body is None or not problem.extra.get("reference_aux"):
        return None
    return _continue_prompt(problem_code(problem), body.rstrip() + "\n")


def single_completion(problem: Problem) -> str | None:
    """Return the one-function demonstration (single agent, coder): HumanEval's canonical solution, or the coop
    reference with aux nested at the top of main's body; None without a reference."""
    canonical = problem.extra.get("canonical_solution")
    if canonical:
        body = canonical
    else:
        main = function_body(problem.extra.get("reference_main") or "", problem.entry_point)
        aux = problem.extra.get("reference_aux") or ""
        if main is None:
            return None
        body = (textwrap.indent(aux.rstrip() + "\n", INDENT) + "\n" if aux.strip() else "") + main
    return _continue_prompt(problem_code(problem), body.rstrip() + "\n")


def code_demonstrations(problem: Problem, num_agents: int) -> list[str] | None:
    """Return [aux, main] completions (two agents) or [single] (one agent) for `problem`, None without a reference."""
    completions = [aux_completion(problem),
                   main_completion(problem)] if num_agents == 2 else [single_completion(problem)]
    return None if any(c is None for c in completions) else completions
