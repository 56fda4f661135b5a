"""Between turns: the next prompt of each agent, from its own history plus external feedback.

An agent sees only its own prompts and responses. The next prompt extends the agent's last prompt: that
prompt already holds every earlier turn (it was built here), so the new one is

    last prompt without its code prefix + the code of the last response + feedback + the code prefix

and each earlier response appears exactly once, as the cleaned code the reward scored. Like the first
prompt, every next prompt ends with the role's code prefix (`def aux(` or the problem's prompt), so the
model continues the code.

Modes (`external.mode`): `level_feedback` (diagnostics of the reward run on the sliced tests),
`plain` (a request for a concise revision), `expert_edits` (compact edits suggested by an external LLM).
The caller scores the feedback run itself: `code_reward(feedback_problem(problem, sandbox_slice), aux, main)`,
and passes that breakdown in.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import re
import urllib.request
import warnings
from typing import Any, Callable, Sequence

from envs.code_generation.prompts import code_prefix, completion_to_code, problem_code
from cooprl.text import safe_text
from rewards.assert_units import check_units
from rewards.cleaning import PARSE_ERRORS, parse_python
from rewards.problem import Problem

MODES = ("level_feedback", "plain", "expert_edits")
DEFAULT_EXPERT_MODEL = "deepseek-coder"
MAX_FAILURES_SHOWN = 5
MAX_FAILURE_CHARS = 300

ExpertClient = Callable[[list[dict]], str]


# ---------------------------------------------------------------- which tests the feedback runs

def _select(sandbox_slice: Any, count: int) -> range:
    """Return the indices of the tests that `sandbox_slice` picks out of `count`."""
    if sandbox_slice is None or (isinstance(sandbox_slice, str) and sandbox_slice.strip().lower() in ("all", "none",
                                                                                                      "")):
        return range(count)
    try:
        n = int(sandbox_slice)
    except (TypeError, ValueError):
        raise ValueError(f"sandbox_slice={sandbox_slice!r}: expected an integer, 0, None or 'all'") from None
    if n == 0:
        return range(count)
    return range(min(n, count)) if n > 0 else range(max(count + n, 0), count)


def _test_units(test_src: str, prompt: str = "", entry_point: str = "") -> list[tuple[int, int]] | None:
    """Return the (first, last) 1-based line spans of the tests in `check`, or None when it does not parse.

    The tests are exactly those of the reward's sandbox (`TestSuite.from_check`, `assert_units.check_units`):
    an assert, or a loop or other statement holding asserts, that exercises the candidate; `assert True` and
    other asserts that test nothing are setup, and setup is always kept.
    """
    try:
        module = parse_python(test_src)
    except PARSE_ERRORS:
        return None
    if not any(isinstance(n, ast.FunctionDef) and n.name == "check" for n in module.body):
        return None
    try:
        _, units, _ = check_units(module, entry_point, [prompt] if prompt else [])
    except RecursionError:
        return None
    return [(s.lineno, s.end_lineno) for kind, s in units if kind == "test"]


def _line_units(test_src: str) -> list[tuple[int, int]]:
    # Fallback for a test file that does not parse: single-line asserts inside `def check(`.
    units, inside = [], False
    for number, line in enumerate(test_src.splitlines(), 1):
        if line.startswith("def "):
            inside = line.startswith("def check(")
        elif inside and line.strip().startswith("assert "):
            units.append((number, number))
    return units


def slice_tests(test_src: str, sandbox_slice: Any = 1, prompt: str = "", entry_point: str = "") -> str:
    """Return `test_src` with only the selected asserts of `check` kept (all other lines unchanged).

    `sandbox_slice`: 1 (default) the first; n > 0 the first n; n < 0 the last |n|; 0, None or 'all'
    (any case) every one. `prompt`, `entry_point`: the problem's (what the tests may call the candidate by).
    """
    units = _test_units(test_src, prompt, entry_point)
    if units is None:
        units = _line_units(test_src)
    keep = set(_select(sandbox_slice, len(units)))
    dropped = {line for i, (first, last) in enumerate(units) if i not in keep for line in range(first, last + 1)}
    lines = test_src.splitlines(keepends=True)
    return "".join(line for number, line in enumerate(lines, 1) if number not in dropped)


def _prompt_of(problem: Problem) -> tuple[str, str]:
    return problem.prompt, problem.entry_point


def feedback_problem(problem: Problem, sandbox_slice: Any = 1) -> Problem:
    """Return a copy of `problem` with its test reduced to the asserts feedback runs and shows."""
    test = slice_tests(problem.test, sandbox_slice, *_prompt_of(problem))
    return dataclasses.replace(problem, test=test)


def visible_asserts(problem: Problem, sandbox_slice: Any = 1) -> list[str]:
    """Return the source of each test the feedback shows (one string per selected assert or loop)."""
    test = problem.test
    units = _test_units(test, *_prompt_of(problem))
    units = _line_units(test) if units is None else units
    lines = test.splitlines()
    return ["\n".join(lines[first - 1:last]).strip() for i, (first, last) in enumerate(units)
            if i in set(_select(sandbox_slice, len(units)))]


# ---------------------------------------------------------------- level feedback

def _syntax_error(code: str) -> tuple[int, int, str] | None:
    try:
        compile(code, "<code>", "exec")
    except SyntaxError as err:
        return err.lineno or 0, err.offset or 0, err.msg
    except PARSE_ERRORS as err:   # garbage the parser gives up on (e.g. 100,000 nested unary minuses)
        return 0, 0, f"the parser gave up ({type(err).__name__})"
    return None


def _short(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= MAX_FAILURE_CHARS else text[:MAX_FAILURE_CHARS - 3] + "..."


def _usage_notes(role: str, entry: str, b: Any) -> list[str]:
    # The reward judges aux usage only once a test passed with aux defined; before that the flags are
    # defaults, not findings, so nothing is said.
    if role == "single" or not b.aux_defined or not b.tests_passed:
        return []
    if role == "main":
        notes = {"not_called": f"Your function {entry} does not call aux. Call aux(...) and use the value it returns.",
                 "wrapper": f"Your function {entry} only wraps aux. {entry} should do part of the work itself.",
                 "ignored": f"Your function {entry} calls aux but ignores the value it returns. Use that value."}
    else:
        notes = {"not_called": f"The main function {entry} does not call your helper aux. "
                               f"Make aux a sub-task that {entry} needs.",
                 "wrapper": f"The main function {entry} only wraps your helper aux. "
                            "aux should do a sub-task, not the whole problem.",
                 "ignored": f"The main function {entry} ignores the value your helper aux returns. "
                            f"Make aux return what {entry} needs."}
    if not b.uses_aux:
        return [notes["not_called"]]
    return ([] if b.not_wrapper else [notes["wrapper"]]) + ([notes["ignored"]] if b.ignored_aux_return else [])


def diagnostics(problem: Problem, role: str, breakdown: Any, own_code: str = "") -> list[str]:
    """Return the diagnostic lines of level feedback (no closing request), most basic first.

    `own_code` is the code the agent wrote (see `completion_to_code`); a syntax error in it is reported
    at its own line and column, which is what the agent can fix.
    """
    b, entry = breakdown, problem.entry_point
    main_name = f"Your function {entry}" if role != "aux" else f"The main function {entry}"
    lines = []
    if role != "single":
        aux_name = "Your helper aux" if role == "aux" else "The helper aux"
        lines.append(f"{aux_name}: {'defined' if b.aux_defined else 'missing or has no return value'}.")
    lines.append(f"{main_name}: {'defined' if b.main_defined else 'missing or has no return value'}.")
    if not b.main_defined:
        lines.append(f"Syntax and tests were not checked because {entry} is missing.")
        return lines
    if not b.syntax_ok:
        own = _syntax_error(own_code) if own_code else None
        if own:
            where = f" at line {own[0]}, column {own[1]}" if own[0] else ""
            lines.append(f"Syntax error in your code{where}: {own[2]}.")
        else:
            where = re.search(r"syntax error: (.*) \(line (\d+), column (\d+)\)", b.reason or "")
            detail = (f" at line {where.group(2)}, column {where.group(3)}: {where.group(1)}" if where else "")
            lines.append(f"Syntax error in the combined program{detail}.")
        lines.append("Tests were not run because of the syntax error.")
        return lines
    lines.append("Syntax: OK.")
    if not b.tests_total:
        lines.append("Tests: none were run.")
    else:
        lines.append(f"Tests: {b.tests_passed}/{b.tests_total} passed.")
        failures = list(b.failures)
        lines += [f"  Failed: {_short(f)}" for f in failures[:MAX_FAILURES_SHOWN]]
        if len(failures) > MAX_FAILURES_SHOWN:
            lines.append(f"  ... and {len(failures) - MAX_FAILURES_SHOWN} more failed tests.")
    return lines + _usage_notes(role, entry, b)


def _all_good(role: str, b: Any) -> bool:
    return (b.main_defined and b.syntax_ok and b.tests_total > 0 and b.tests_passed == b.tests_total
            and (role == "single" or (b.aux_defined and b.uses_aux and b.not_wrapper and not b.ignored_aux_return)))


def level_feedback(problem: Problem, role: str, breakdown: Any, own_code: str = "") -> str:
    """Return level feedback: definitions, syntax error (line, column), `p/t` tests with each failing assert,
    aux-usage notes, then a request for a code-only revision. Role-aware ("your helper aux", "your function f")."""
    body = "\n".join(f"- {line}" if not line.startswith("  ") else line
                     for line in diagnostics(problem, role, breakdown, own_code))
    closing = ("No problems were found. Write your final code again, improving it if you can."
               if _all_good(role, breakdown) else "Revise your code to fix these problems.")
    return safe_text(f"Feedback on your code:\n{body}\n{closing} Write only the code, no explanation.")


def plain_feedback(problem: Problem, role: str) -> str:
    """Return a request for a concise, code-only revision of the agent's previous code."""
    target = "your helper aux" if role == "aux" else f"your function {problem.entry_point}"
    return f"Revise {target}: fix any mistakes and keep it concise. Write only the code, no explanation."


# ---------------------------------------------------------------- expert edits

def expert_messages(problem: Problem, role: str, aux_code: str, main_code: str, breakdown: Any,
                    tests: Sequence[str] = ()) -> list[dict]:
    """Return the chat messages asking an expert LLM for compact edits to the `role` agent's function."""
    entry = problem.entry_point
    target = "the helper `aux`" if role == "aux" else f"the function `{entry}`"
    parts = [f"Problem:\n{problem_code(problem).rstrip()}"]
    if role != "single":
        parts.append(f"Helper function aux:\n```python\n{aux_code.strip()}\n```")
    parts.append(f"Function {entry}:\n```python\n{main_code.strip()}\n```")
    if tests:
        parts.append("Tests:\n" + "\n".join(tests))
    parts.append("Results:\n" + "\n".join(diagnostics(problem, role, breakdown,
                                                        aux_code if role == "aux" else main_code)))
    parts.append(f"Suggest compact edits to {target} only.")
    system = ("You are an expert Python programmer reviewing code. Suggest at most 3 compact edits, "
              "one line each, naming the exact change. Do not write the whole solution.")
    if role != "single":
        system += f" The main function `{entry}` should call the helper `aux` and use its return value."
    return [{"role": "system", "content": system}, {"role": "user", "content": safe_text("\n\n".join(parts))}]


def expert_feedback(problem: Problem, role: str, aux_code: str, main_code: str, breakdown: Any,
                    client: ExpertClient, tests: Sequence[str] = ()) -> str:
    """Return the expert's suggested edits followed by a request for a code-only revision.

    A failing expert call must not stop a training run: it warns and falls back to level feedback.
    """
    own = aux_code if role == "aux" else main_code
    try:
        edits = safe_text(client(expert_messages(problem, role, aux_code, main_code, breakdown, tests))).strip()
    except Exception as err:  # noqa: BLE001 - any client error: network, quota, bad response
        warnings.warn(f"expert_edits: the expert call failed ({err!r}); using level feedback", stacklevel=2)
        return level_feedback(problem, role, breakdown, own)
    if not edits:
        return level_feedback(problem, role, breakdown, own)
    return (f"An expert reviewer suggests these edits:\n{edits}\n"
            "Revise your code with these edits. Write only the code, no explanation.")


def make_expert_client(model: str = DEFAULT_EXPERT_MODEL, base_url: str | None = None,
                       api_key: str | None = None, *, timeout_s: float = 60.0,
                       max_tokens: int = 256) -> ExpertClient:
    """Return `client(messages) -> str` for an OpenAI-compatible chat-completions API.

    The URL and key come from the arguments, else `COOPRL_EXPERT_BASE_URL` / `OPENAI_BASE_URL` and
    `COOPRL_EXPERT_API_KEY` / `OPENAI_API_KEY`; a missing one raises ValueError here, not at the first call.
    Uses the `openai` package when installed, else a plain urllib POST to `{base_url}/chat/completions`.
    """
    base_url = base_url or os.environ.get("COOPRL_EXPERT_BASE_URL") or os.environ.get("OPENAI_BASE_URL")
    api_key = api_key or os.environ.get("COOPRL_EXPERT_API_KEY") or os.environ.get("OPENAI_API_KEY")
    if not base_url:
        raise ValueError("no API URL: set COOPRL_EXPERT_BASE_URL (or OPENAI_BASE_URL)")
    if not api_key:
        raise ValueError("no API key: set COOPRL_EXPERT_API_KEY (or OPENAI_API_KEY)")
    try:
        import openai
    except ImportError:
        openai = None
    if openai is not None:
        sdk = openai.OpenAI(base_url=base_url, api_key=api_key, timeout=timeout_s)

        def call_sdk(messages: list[dict]) -> str:
            reply = sdk.chat.completions.create(model=model, messages=messages, temperature=0.0,
                                                max_tokens=max_tokens)
            return reply.choices[0].message.content or ""
        return call_sdk

    url = base_url.rstrip("/") + "/chat/completions"

    def call_http(messages: list[dict]) -> str:
        body = json.dumps({"model": model, "messages": messages, "temperature": 0.0,
                           "max_tokens": max_tokens}).encode()
        request = urllib.request.Request(url, data=body, method="POST", headers={
            "Content-Type": "application/json", "Authorization": f"Bearer {api_key}"})
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            reply = json.loads(response.read().decode())
        return reply["choices"][0]["message"]["content"] or ""
    return call_http


# ---------------------------------------------------------------- the next prompt

def next_prompt(mode: str, problem: Problem, role: str, history: Sequence[tuple[str, str]], breakdown: Any, *,
                expert_client: ExpertClient | None = None, sandbox_slice: Any = 1, passthrough: bool = False,
                partner_code: str = "") -> str:
    """Return the agent's next prompt: its last prompt and response, the mode's feedback, the code prefix.

    `history`: this agent's (prompt, response) pairs, oldest first; the last prompt must be one built by
    `prompts` or by this function (it then already holds the earlier turns). `breakdown`: the reward of the
    last pair on `feedback_problem(problem, sandbox_slice)`. `partner_code`: the other agent's last code,
    shown only to the expert (agents never see each other's code). `passthrough=True`: the feedback alone,
    then the code prefix, without history.
    """
    if mode not in MODES:
        raise ValueError(f"external.mode={mode!r}; expected one of {', '.join(MODES)}")
    if not history:
        raise ValueError("next_prompt needs the agent's history of (prompt, response) pairs; it is empty")
    last_prompt, last_response = history[-1]
    own_code = completion_to_code(role, problem, last_response)
    if mode == "level_feedback":
        feedback = level_feedback(problem, role, breakdown, own_code)
    elif mode == "plain":
        feedback = plain_feedback(problem, role)
    else:
        if expert_client is None:
            raise ValueError("external.mode='expert_edits' needs an expert client (see make_expert_client)")
        aux_code, main_code = (own_code, partner_code) if role == "aux" else (partner_code, own_code)
        feedback = expert_feedback(problem, role, aux_code, main_code, breakdown, expert_client,
                                   tests=visible_asserts(problem, sandbox_slice))
    prefix = code_prefix(role, problem)
    # every part may hold model- or program-derived text (a lone surrogate from an error message, say)
    if passthrough:
        return safe_text(f"{feedback}\n\n{prefix}")
    context = last_prompt[:-len(prefix)] if last_prompt.endswith(prefix) else last_prompt.rstrip() + "\n\n"
    return safe_text(f"{context}{own_code.rstrip()}\n\n{feedback}\n\n{prefix}")
