"""Plain-text prompts for the aux, main and single agents, and the centralized joint prompt and its parser.

Every agent prompt ENDS WITH THE START OF THE CODE, so even a 135M model simply continues the code:
the aux prompt ends with `def aux(`, the main and single prompts end with the problem's own prompt
(imports + signature + docstring), so their completion is the function body. `completion_to_code`
rebuilds the code the reward scores from that prefix and the completion. No chat template is applied
here; a trainer that wants one wraps these strings itself.

`problem` is a `Problem` or any mapping with `prompt`, `test` and `entry_point`.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, replace

from cooprl.rollout.generation import first_stop
from rewards.problem import Problem
from rewards.cleaning import MAX_COMPLETION_CHARS, extract_function

ROLES = ("aux", "main", "single")
AUX_HEADER = "def aux("

# Column-0 markers that can only come after the function is over. A nested `def` or a comment inside
# the body is indented, so these never cut a function short.
_STOP_STRINGS = ["\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\n```", "\n# Test", "\nassert "]


def problem_code(problem: Problem) -> str:
    """Return the problem's prompt (imports, signature, docstring) without its leading blank lines."""
    return problem.prompt.lstrip("\n")


def open_body(problem: Problem) -> Problem:
    """Return `problem` with its prompt ending inside the function: the docstring, a line break, then the body's
    indentation (the docstring's, else four spaces). Every prompt and code prefix built from it then ends there, so a
    model's first token is the body's code, and `completion_to_code` glues the completion to it unchanged."""
    prompt = problem.prompt.rstrip(" \t")
    if not prompt.endswith("\n"):
        prompt += "\n"
    header = re.search(rf"^def {re.escape(problem.entry_point)}\(.*$", prompt, flags=re.MULTILINE)
    body = prompt[header.end():] if header else ""
    indents = [line[:len(line) - len(line.lstrip())] for line in body.splitlines() if line.strip()]
    return replace(problem, prompt=prompt + (indents[0] if indents and indents[0] else "    "))


def _check_role(role: str) -> None:
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; expected one of {', '.join(ROLES)}")


# ---------------------------------------------------------------- agent prompts

def _aux_task(problem: Problem) -> str:
    entry = problem.entry_point
    return (
        "Problem:\n"
        f"{problem.prompt.strip(chr(10))}\n\n"
        f"Write a helper function named `aux` that solves a useful sub-task of this problem. "
        f"The main function `{entry}` will call `aux` and use the value it returns.\n"
        "Write only the Python code of `aux`, ending with a return statement. "
        "No explanation, no tests, no example usage."
    )


def _main_task(problem: Problem) -> str:
    entry = problem.entry_point
    return (
        "A helper function `aux(...)` is already defined and available. "
        "Do not redefine `aux`; call it in your solution.\n"
        f"Implement only the function `{entry}` below. "
        "Write only the Python code, no explanation, no tests.\n\n"
        f"{problem_code(problem)}"
    )


def aux_prompt(problem: Problem) -> str:
    """Return the aux agent's prompt: the problem, a request for a helper `aux`, ending with `def aux(`."""
    return f"{_aux_task(problem)}\n\n{AUX_HEADER}"


def main_prompt(problem: Problem) -> str:
    """Return the main agent's prompt: aux is available, implement only the entry point; ends with the problem's
    prompt."""
    return _main_task(problem)


def with_aux_code(prompt: str, aux_code: str) -> str:
    """Return main's `prompt` (any turn's) preceded by the aux code of its joint action, for a team whose main sees
    aux (`aux_main.main_sees_aux`); a missing aux is said as such."""
    shown = aux_code.strip() or "# (the helper agent wrote no aux this time)"
    return f"The helper function `aux` is defined as follows:\n\n{shown}\n\n{prompt}"


def single_prompt(problem: Problem) -> str:
    """Return the single agent's prompt (GRPO/AC baselines): implement the whole function; ends with the problem's
    prompt."""
    entry = problem.entry_point
    return (
        f"Implement the function `{entry}` below. "
        "Write only the Python code, no explanation, no tests.\n\n"
        f"{problem_code(problem)}"
    )


def agent_prompts(problem: Problem, num_agents: int) -> list[str]:
    """Return `[aux_prompt, main_prompt]` for 2 agents, `[single_prompt]` for 1; ValueError otherwise."""
    if num_agents == 2:
        return [aux_prompt(problem), main_prompt(problem)]
    if num_agents == 1:
        return [single_prompt(problem)]
    raise ValueError(f"num_agents={num_agents!r}: code generation supports 1 (single) or 2 (aux + main) agents")


# ---------------------------------------------------------------- from completion to code

def code_prefix(role: str, problem: Problem) -> str:
    """Return the code text every prompt of `role` ends with: `def aux(` for aux, the problem's prompt otherwise."""
    _check_role(role)
    return AUX_HEADER if role == "aux" else problem_code(problem)


def stop_strings(role: str) -> list[str]:
    """Return the strings at which a completion of `role` is over (column-0 code after the function)."""
    _check_role(role)
    return list(_STOP_STRINGS)


def truncate_at_stop(role: str, text: str) -> str:
    """Return `text` cut at the first stop string of `role` that follows some non-blank text.

    Generators differ: vLLM drops the stop string, `transformers` keeps it; cutting here makes both the same.
    A stop string at the very start is skipped, as the generator does (`cooprl.rollout.generation.first_stop`):
    a completion that opens with a blank line and restarts the function header is the answer itself.
    """
    cut = first_stop(text, stop_strings(role))
    return text if cut is None else text[:cut]


def _strip_leading_fence(text: str) -> str:
    # "```python\n" right at the start of a completion: the model started a markdown block.
    stripped = text.lstrip()
    if stripped.startswith("```"):
        newline = stripped.find("\n")
        return "" if newline == -1 else stripped[newline + 1:]
    return text


def _restart_at(text: str, name: str) -> int | None:
    """Return where a completion restarts the whole function `def name(`, or None when it does not.

    It counts as a restart only when nothing but imports and blank lines comes before the header.
    """
    match = re.search(rf"^def {re.escape(name)}\(", text, flags=re.MULTILINE)
    if match is None:
        return None
    before = text[:match.start()].splitlines()
    if all(not line.strip() or line.startswith(("import ", "from ")) for line in before):
        return match.start()
    return None


def _preamble(problem: Problem) -> str:
    # The problem prompt before its `def entry_point(` header: imports and any helpers it defines.
    prompt, entry = problem_code(problem), problem.entry_point
    match = re.search(rf"^def {re.escape(entry)}\(", prompt, flags=re.MULTILINE)
    return prompt[:match.start()] if match else ""


def completion_to_code(role: str, problem: Problem, completion: str) -> str:
    """Return the code the reward scores for a completion of `role`: the role's code prefix + the completion.

    Robustness, because small models repeat themselves:
    - a leading markdown fence (```python) is dropped;
    - if the completion restarts the whole function (`def aux(` for aux, `def <entry_point>(` for
      main/single, possibly after import lines), the completion is used as the function instead of being
      glued after the prefix, so there is never a double header; for main/single the prompt's preamble
      (imports and helpers before the entry point) is kept in front of it;
    - the text after the function is cut at the first stop string (see `stop_strings`).
    A completion over `MAX_COMPLETION_CHARS` is returned as it is, unread: the reward refuses it whole.
    """
    _check_role(role)
    if len(completion or "") > MAX_COMPLETION_CHARS:
        return completion
    text = _strip_leading_fence(completion)
    name = "aux" if role == "aux" else problem.entry_point
    start = _restart_at(text, name)
    if start is None:
        head, body = code_prefix(role, problem), text
    else:
        header_end = text.find("\n", start)
        header_end = len(text) if header_end == -1 else header_end
        preamble = "" if role == "aux" else _preamble(problem)
        head, body = preamble + text[:header_end], text[header_end:]
    return head + truncate_at_stop(role, body)


# ---------------------------------------------------------------- centralized (one model writes both)

CENTRALIZED_STYLES = ("concat", "native", "example")
CENTRALIZED_ANSWERS = ("open", "bounded")
AUX_OPEN, AUX_CLOSE, MAIN_OPEN, MAIN_CLOSE = "<auxiliary>", "</auxiliary>", "<main>", "</main>"


def _answer_format(problem: Problem) -> str:
    entry = problem.entry_point
    return (
        "Answer with code only, in exactly this form:\n"
        f"{AUX_OPEN}\ndef aux(...):\n    ...\n{AUX_CLOSE}\n"
        f"{MAIN_OPEN}\ndef {entry}(...):\n    ...\n{MAIN_CLOSE}"
    )


# The worked example of the `example` style: a different problem, so that copying it earns nothing.
_EXAMPLE_ANSWER = (
    "The answer format, shown for a different problem (`count_vowels`):\n"
    f"{AUX_OPEN}\ndef aux(ch):\n    return ch.lower() in 'aeiou'\n{AUX_CLOSE}\n"
    f"{MAIN_OPEN}\ndef count_vowels(s):\n    return sum(1 for ch in s if aux(ch))\n{MAIN_CLOSE}"
)


def centralized_prompt(problem: Problem, style: str = "concat", answer: str = "open") -> str:
    """Return the prompt for one model writing both functions, as `<auxiliary>` then `<main>` sections.

    `concat` joins the aux and main agents' tasks (the problem appears twice); `native` states the problem
    once and asks one programmer for both; both show the format as a template (`def aux(...):` / `...`).
    `example` states the problem once and shows the format as a worked answer to another problem: a small
    model copies a template's `...` literally (SmolLM2-135M, bounded: 3 of 36 answers scored above 0 with
    `native`, 33 of 36 with `example`). `bounded` ends the prompt with the start of the answer,
    `centralized_answer_prefix` (generation then stops at the first `</main>`, see `centralized_stop_strings`).
    """
    if style not in CENTRALIZED_STYLES:
        raise ValueError(f"centralized_prompt={style!r}; expected one of {', '.join(CENTRALIZED_STYLES)}")
    if answer not in CENTRALIZED_ANSWERS:
        raise ValueError(f"centralized_answer={answer!r}; expected one of {', '.join(CENTRALIZED_ANSWERS)}")
    entry = problem.entry_point
    if style == "concat":
        body = (
            f"Auxiliary function task:\n{_aux_task(problem)}\n\n"
            f"Main function task:\n{_main_task(problem).rstrip()}"
        )
    elif style == "native":
        body = (
            "Problem:\n"
            f"{problem.prompt.strip(chr(10))}\n\n"
            "You are one programmer writing two functions for this problem. "
            "First write a helper function named `aux` that solves a useful sub-task and returns its result. "
            f"Then write the main function `{entry}`, which calls `aux` and uses the value it returns. "
            "No explanation, no tests."
        )
    else:
        prompt = (
            "Problem:\n"
            f"{problem.prompt.strip(chr(10))}\n\n"
            "Write two Python functions for this problem: a helper `aux` that solves a useful sub-task, then "
            f"the main function `{entry}`, which calls `aux` and uses the value it returns. "
            "No explanation, no tests.\n\n"
            f"{_EXAMPLE_ANSWER}\n\n"
            f"Now the answer for `{entry}`:\n"
        )
        return prompt + centralized_answer_prefix(style, answer)
    prompt = f"{body}\n\n{_answer_format(problem)}\n"
    return f"{prompt}\n{centralized_answer_prefix(style, answer)}" if answer == "bounded" else prompt


def centralized_answer_prefix(style: str = "concat", answer: str = "open") -> str:
    """Return how a bounded prompt ends, the start of the answer that `parse_joint_answer` puts back:
    `<auxiliary>`, and for the `example` style also the aux header (`<auxiliary>\\ndef aux(`); "" when open."""
    if answer != "bounded":
        return ""
    return f"{AUX_OPEN}\n{AUX_HEADER}" if style == "example" else AUX_OPEN


def centralized_stop_strings(answer: str = "open") -> list[str]:
    """Return the stop strings of a joint answer: `["</main>"]` when bounded, none when open."""
    return [MAIN_CLOSE] if answer == "bounded" else []


@dataclass(frozen=True)
class JointAnswer:
    """The two functions split out of a joint answer; `reason` says how (empty when both came from tags)."""

    aux: str
    main: str
    reason: str = ""

    @property
    def used_fallback(self) -> bool:
        """Return True when some part came from a fallback (labels, fenced blocks, function name), not its tag."""
        return any(note.startswith(("aux from ", "main from ")) for note in self.reason.split("; "))


_FENCE = re.compile(r"```[^\n`]*\n(.*?)(?:```|\Z)", re.DOTALL)
_TAG = re.compile(r"</?(?:auxiliary|main)>", re.IGNORECASE)


def _clean(section: str) -> str:
    # Sections often hold a fenced block or are indented as a whole; keep only the code.
    fenced = _FENCE.search(section)
    if fenced:
        section = fenced.group(1)
    return textwrap.dedent(section).strip("\n").rstrip()


def _tag_section(text: str, name: str) -> str | None:
    # `<name>` up to `</name>`, or, when the closing tag is missing, up to the next tag or the end.
    opening = re.search(rf"<{name}>", text, re.IGNORECASE)
    if opening is None:
        return None
    rest = text[opening.end():]
    closing = re.search(rf"</{name}>", rest, re.IGNORECASE)
    next_tag = _TAG.search(rest)
    end = closing.start() if closing else (next_tag.start() if next_tag else len(rest))
    return rest[:end]


_LABEL = re.compile(r"^[ \t#*]*(auxiliary|aux|main)(?:[ \t]+function)?[ \t*]*:[ \t*]*",
                    re.IGNORECASE | re.MULTILINE)


def _label_sections(text: str) -> dict[str, str]:
    # `Auxiliary:` / `Main:` labels at the start of a line; a section runs to the next label.
    found = list(_LABEL.finditer(text))
    sections: dict[str, str] = {}
    for i, match in enumerate(found):
        label = match.group(1).lower()
        key = "aux" if label.startswith("aux") else "main"
        end = found[i + 1].start() if i + 1 < len(found) else len(text)
        sections.setdefault(key, text[match.end():end])
    return sections


def parse_joint_answer(text: str, problem: Problem, answer: str = "open", style: str = "concat") -> JointAnswer:
    """Return the aux and main code of a joint answer; never raises.

    Each part falls back, in order, through: its tag section (a missing closing tag ends at the next tag
    or the end); `Auxiliary:` / `Main:` labels; fenced code blocks (the first two, or one block holding
    both functions); finally the function by name (`def aux` / `def <entry_point>`) anywhere in the text.
    With `answer="bounded"` the text continues the prompt's `centralized_answer_prefix(style, answer)`, which is
    put back (a model that restarts the answer with `<auxiliary>`, or restarts `def aux`, is read as it is).
    A part found nowhere is "" and `reason` names it ("no <main> section"); `reason` also notes parts
    that came from a fallback ("aux from labels").
    """
    text = text or ""
    if len(text) > MAX_COMPLETION_CHARS:   # unread, as the reward refuses a completion that long
        return JointAnswer("", "", f"answer too long ({len(text)} characters; the reward reads {MAX_COMPLETION_CHARS})")
    if answer == "bounded" and not text.lstrip().lower().startswith(AUX_OPEN):
        restarted = text.lstrip().startswith("def aux")
        text = (AUX_OPEN + "\n" if restarted else centralized_answer_prefix(style, answer)) + text
    entry = problem.entry_point
    names = {"aux": "aux", "main": entry}
    found: dict[str, str] = {}
    notes: list[str] = []

    def take(part: str, code: str | None, how: str) -> None:
        if part not in found and code is not None and _clean(code):
            found[part] = _clean(code)
            if how != "tags":
                notes.append(f"{part} from {how}")

    take("aux", _tag_section(text, "auxiliary"), "tags")
    take("main", _tag_section(text, "main"), "tags")
    labels = _label_sections(text)
    for part in ("aux", "main"):
        take(part, labels.get(part), "labels")
    blocks = _FENCE.findall(text)
    if len(blocks) >= 2:
        take("aux", blocks[0], "fenced block")
        take("main", blocks[1], "fenced block")
    elif len(blocks) == 1:
        for part in ("aux", "main"):
            take(part, extract_function(textwrap.dedent(blocks[0]), names[part]) or None, "fenced block")
    for part in ("aux", "main"):
        take(part, extract_function(_TAG.sub("", text), names[part]) or None, "function name")

    missing = [f"no <{'auxiliary' if part == 'aux' else 'main'}> section" for part in ("aux", "main")
               if part not in found]
    return JointAnswer(found.get("aux", ""), found.get("main", ""), "; ".join(missing + notes))
