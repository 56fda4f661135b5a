"""Prompts and parsing shared by the strategies: code prompts that end with the problem's code (so even a
135M model just continues the function), and parsers for what the LLM writes back (code, asserts, call
arguments, expected values, scores, lists). Parsing never runs model text: it only uses `ast.parse` and
`ast.literal_eval` (which evaluates literals, no names, calls or operators beyond +/- on numbers)."""

from __future__ import annotations

import ast
import re

from rewards.problem import Problem
from envs.code_generation.prompts import completion_to_code, problem_code, single_prompt, stop_strings
from rewards.cleaning import PARSE_ERRORS, parse_python, prompt_imports, strip_fences

CODE_STOP = tuple(stop_strings("single"))   # column-0 code after the function: the answer is over
LINE_STOP = ("\n",)


def entry(problem: Problem) -> str:
    return problem.entry_point


def code_prompt(problem: Problem, guidance: str = "") -> str:
    """Return a prompt asking for the whole function, `guidance` (a plan, feedback) first, ending with the
    problem's code so that the answer is the function body."""
    head = f"{guidance.strip()}\n\n" if guidance.strip() else ""
    return head + single_prompt(problem)


def extract_code(problem: Problem, text: str) -> str:
    """Return the program for an answer to `code_prompt`: the problem's code + the body, or the function the
    answer wrote out in full (fences and text after the function are dropped). An answer that defines other
    functions before the entry point (a team's `aux`, a chat answer's helpers) is kept whole, after the
    problem's imports: cutting it at the first `def` would lose the helpers."""
    code = strip_fences(text)
    header = re.search(rf"^def {re.escape(entry(problem))}\(", code, flags=re.MULTILINE)
    if header and re.search(r"^def ", code[:header.start()], flags=re.MULTILINE):
        return "\n".join(prompt_imports(problem.prompt) + [code])
    return completion_to_code("single", problem, text)


def call_of(problem: Problem, args: str) -> str | None:
    """Return `entry(args)` when it parses as one call of the entry point with literal-looking arguments, else None."""
    text = f"{entry(problem)}({args})"
    try:
        node = parse_python(text, mode="eval").body
    except PARSE_ERRORS:
        return None
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == entry(problem)):
        return None
    if any(isinstance(n, (ast.Call, ast.Lambda, ast.NamedExpr,
                          ast.Attribute)) for n in ast.walk(node) if n is not node):
        return None   # an input is data: no calls (imports, eval) hidden in the arguments
    return text


def args_from_line(text: str) -> str:
    """Return the arguments an answer to a prompt ending with `entry(` wrote: up to the call's closing paren."""
    line = text.split("\n", 1)[0]
    depth = 1
    for i, ch in enumerate(line):   # the matching ")" (quotes are rare enough in inputs to ignore)
        depth += {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}.get(ch, 0)
        if depth == 0:
            return line[:i].strip()
    return line.strip().rstrip(")")


def normalize_value(text: str) -> str | None:
    """Return a canonical form of a Python literal written by the LLM (`repr` of `ast.literal_eval`), or None
    when it is not one. `1` and `1.0` stay different, as `==` in a test would not make them."""
    text = text.strip().split("\n", 1)[0].strip()
    if not text:
        return None
    try:
        return repr(ast.literal_eval(text))
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def parse_asserts(problem: Problem, text: str, limit: int | None = None) -> list[str]:
    """Return the lines of `text` that are `assert entry(...) ...` statements that parse (at most `limit`)."""
    found = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("assert ") or f"{entry(problem)}(" not in line:
            continue
        try:
            parse_python(line)
        except PARSE_ERRORS:
            continue
        if line not in found:
            found.append(line)
        if limit is not None and len(found) >= limit:
            break
    return found


def doctest_asserts(problem: Problem) -> list[str]:
    """Return the examples of the problem statement (`>>> f(x)` then the value) as asserts: CollabCoder's
    visible tests. They are part of the prompt, not the hidden tests."""
    lines = problem.prompt.splitlines()
    out = []
    for i, line in enumerate(lines[:-1]):
        line = line.strip()
        if not line.startswith(">>> ") or f"{entry(problem)}(" not in line:
            continue
        want = lines[i + 1].strip()
        if not want or want.startswith(">>>") or normalize_value(want) is None:
            continue
        test = f"assert {line[4:].strip()} == {want}"
        try:
            parse_python(test)
        except PARSE_ERRORS:
            continue
        out.append(test)
    return out


def numbered_items(text: str, limit: int) -> list[str]:
    """Return up to `limit` items of a list the LLM wrote (`1. ...`, `- ...` or plain lines), stripped."""
    items = []
    for line in text.splitlines():
        line = re.sub(r"^\s*(?:\d+[.)]|[-*•])\s*", "", line).strip()
        if len(line) >= 3 and line not in items:
            items.append(line)
        if len(items) >= limit:
            break
    return items


def score_of(text: str, name: str, default: float) -> float:
    """Return the number after `name:` in `text`, clipped to [0, 1] (percentages divided by 100); `default` when
    absent."""
    m = re.search(rf"{re.escape(name)}\s*[:=]\s*(-?\d+(?:\.\d+)?)\s*(%?)", text, flags=re.IGNORECASE)
    if not m:
        return default
    value = float(m.group(1)) / (100.0 if m.group(2) or float(m.group(1)) > 1 else 1.0)
    return min(1.0, max(0.0, value))


def doctest_prompt(problem: Problem, intro: str = "") -> str:
    """Return the problem's code followed by `>>> entry(`: the model continues with the arguments of a call."""
    head = f"# {intro.strip()}\n" if intro.strip() else ""
    return f"{problem_code(problem).rstrip()}\n\n{head}>>> {entry(problem)}("


def output_prompt(problem: Problem, call: str) -> str:
    """Return the problem's code followed by `>>> call` and a new line: the model continues with the value."""
    return f"{problem_code(problem).rstrip()}\n\n>>> {call}\n"
