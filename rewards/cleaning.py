"""Cleaning of model completions: markdown fences and prose stripped, one function extracted, and the lock under
which every AST of model text is built (no code is run here).

- `clean_completion(text, name)`: strip markdown fences and prose, extract the function `name` (AST first, then
  an indentation-based text fallback), and keep the completion's own top-level imports. Every other top-level
  statement of the completion (helper functions, classes, tests, prints, `if __name__ == '__main__'` blocks) is
  dropped: only the named function is scored.
- `extract_function(code, name)`: that extraction alone; the joint-answer parser of the code environment uses it
  too, so parser and reward read a text the same way.
- `defines_with_return`: level 1 (a `def` with a `return <value>`, judged on the text when the code does not
  parse).
- `prompt_imports`, `prompt_helpers`: what the prompt contributes to the program.
- `parse_python`, `compile_tree`: parsing and compiling under the process's AST lock (`PARSE_ERRORS`: what
  either may raise on model text).
"""

from __future__ import annotations

import ast
import re
import textwrap
import threading
from dataclasses import dataclass
from typing import Any

# What parsing or compiling model output may raise: a syntax error, or (for garbage such as 100,000 nested
# unary minuses) MemoryError / RecursionError from the parser itself. All of them mean "does not parse".
PARSE_ERRORS = (SyntaxError, ValueError, MemoryError, RecursionError)

# The longest completion the rewards read (a code, a tester's tests, a joint answer): a longer one is refused whole,
# before any parse. Cleaning is linear, but a 10 MB completion cost ~22 CPU s, most of it under the AST lock below
# that every scoring thread shares (1 MB: ~2-3 s per parse and compile). Sampled completions are a few kB (256
# tokens), long-context ones some tens of kB; parser bombs of a few hundred kB are still judged as before.
MAX_COMPLETION_CHARS = 1_000_000

# CPython 3.11 keeps the AST constructor's recursion depth in interpreter-wide state: when two threads build ASTs at
# once and one of them is switched out mid-construction (a garbage-collection callback running Python code is enough),
# the other raises SystemError "AST constructor recursion depth mismatch" (python/cpython#106905; seen in our suite,
# where the reward cleans a batch of answers on a thread pool). Every AST this project builds from model text in the
# trainer process is built under one lock; parsing is a few milliseconds next to the sandbox runs it precedes.
_AST_LOCK = threading.Lock()


def parse_python(source: str, mode: str = "exec") -> ast.AST:
    """Return `ast.parse(source, mode=mode)`, built under the process's AST lock (safe from any thread)."""
    with _AST_LOCK:
        return ast.parse(source, mode=mode)


def compile_tree(tree: ast.AST, filename: str, mode: str) -> Any:
    """Return the code object of AST `tree` (`compile(tree, filename, mode)`), under the same lock as `parse_python`
    (turning an AST back into the compiler's form keeps the same shared recursion depth)."""
    with _AST_LOCK:
        return compile(tree, filename, mode)

# Every pattern here runs on raw model output (tens of kB of garbage at worst) and must stay linear: no `\s` that
# can cross a newline under re.M (`^\s*` retried at each of n blank lines is O(n^2)), and possessive quantifiers
# (`*+`, `++`) wherever two neighbouring parts could match the same characters.
_FENCE = re.compile(r"^\s*+```[\w+-]*+\s*+$")                         # one line at a time
_IMPORT_LINE = re.compile(r"^(?:import[ \t]++[\w., \t]++|from[ \t]++[\w.]++[ \t]++import[ \t]++.+)$")
_DEF_LINE = re.compile(r"^[^\S\n]*+(?:async[^\S\n]++)?def\s", re.M)
_RETURN_VALUE = re.compile(r"^[^\S\n]++return[^\S\n]*+[^\s;#]", re.M)


@dataclass(frozen=True)
class Cleaned:
    """A cleaned completion: the function's source ('' when absent), the completion's import lines, and
    level 1's verdict on the function (`defines_with_return`, taken from the parse that found it)."""

    function: str
    imports: tuple[str, ...] = ()
    returns_value: bool = False

    @property
    def code(self) -> str:
        return "\n".join(list(self.imports) + [self.function]).strip("\n")


def strip_fences(text: str) -> str:
    """Return the code inside markdown fences (the blocks that define functions, else all blocks);
    text without fences comes back unchanged apart from stray fence lines."""
    lines = (text or "").replace("\r\n", "\n").split("\n")
    blocks, current, inside = [], [], False
    for line in lines:
        if _FENCE.match(line):
            if inside:
                blocks.append("\n".join(current))
                current = []
            inside = not inside
            continue
        if inside:
            current.append(line)
    if inside and current:  # an unterminated last block (generation cut off)
        blocks.append("\n".join(current))
    if not blocks:
        return "\n".join(line for line in lines if not line.strip().startswith("```"))
    with_def = [b for b in blocks if _DEF_LINE.search(b)]
    return "\n\n".join(with_def or blocks)


def _has_value_return(fn: ast.AST) -> bool:
    """True when `fn` (not its nested functions or classes) has a `return <value>`."""
    stack = list(ast.iter_child_nodes(fn))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(node, ast.Return) and node.value is not None:
            return True
        stack.extend(ast.iter_child_nodes(node))
    return False


def find_def(tree: ast.Module, name: str):
    """The top-level function `name`, else the first one anywhere (e.g. inside a class or an if block)."""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return node
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return node
    return None


def _text_block(text: str, name: str) -> str:
    """Indentation-based extraction of `def name(...)` and its body, for code that does not parse."""
    lines = text.split("\n")
    pattern = re.compile(rf"^(\s*+)(?:async\s++)?def\s++{re.escape(name)}\s*+\(")   # one line at a time
    for i, line in enumerate(lines):
        m = pattern.match(line)
        if not m:
            continue
        indent = len(m.group(1).expandtabs())
        start = i
        while start > 0 and lines[start - 1].strip().startswith("@") and \
                len(lines[start - 1]) - len(lines[start - 1].lstrip()) == len(m.group(1)):
            start -= 1
        end = i + 1
        # a signature over several lines: open parentheses, up to the line that ends the header with ":"
        depth = line.count("(") - line.count(")")
        header_open = depth > 0 and not line.rstrip().endswith(":")
        while end < len(lines):
            cur = lines[end]
            if header_open:
                depth += cur.count("(") - cur.count(")")
                header_open = depth > 0 and not cur.rstrip().endswith(":")
                end += 1
                continue
            if cur.strip() and len(cur.expandtabs()) - len(cur.expandtabs().lstrip()) <= indent:
                break
            end += 1
        block = "\n".join(lines[start:end]).rstrip()
        return textwrap.dedent(block)
    return ""


def _imports_of(text: str) -> tuple[str, ...]:
    out = []
    for line in text.split("\n"):
        stripped = line.rstrip()
        if stripped and not stripped[0].isspace() and _IMPORT_LINE.match(stripped):
            out.append(stripped)
    return tuple(dict.fromkeys(out))


def clean_completion(text: str, name: str) -> Cleaned:
    """Extract the function `name` and the top-level imports from a completion (fences and prose removed).

    Returns a `Cleaned`; its `returns_value` is level 1's verdict, judged on the node this parse found (one
    parse per completion: parsing is most of the reward's cost in the trainer), or on the text when the
    completion does not parse."""
    code = strip_fences(text)
    try:
        tree = parse_python(code)
    except PARSE_ERRORS:
        tree = None
    if tree is not None:
        node = find_def(tree, name)
        if node is None:
            return Cleaned("", _imports_of(code))
        imports = tuple(ast.unparse(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)))
        return Cleaned(_node_source(code, node), tuple(dict.fromkeys(imports)), _has_value_return(node))
    function = _text_block(code, name)
    return Cleaned(function, _imports_of(code), defines_with_return(function, name))


def _node_source(code: str, node: ast.AST) -> str:
    """The source lines of a parsed definition, from its first decorator to its end, dedented."""
    first = node.decorator_list[0].lineno if node.decorator_list else node.lineno
    lines = code.split("\n")[first - 1:node.end_lineno]
    return textwrap.dedent("\n".join(lines)).rstrip()


def extract_function(code: str, name: str) -> str:
    """Return the source of the function `name` in `code` (markdown fences already removed), or "".

    The one extractor of the project (the reward and the joint-answer parser both use it, so they never disagree
    on a text): the top-level definition, else the first nested one (in a class or an if block), with its
    decorators and a header over several lines, `async` included, dedented; by AST, or by indentation when the
    code does not parse."""
    try:
        tree = parse_python(code)
    except PARSE_ERRORS:
        return _text_block(code, name)
    node = find_def(tree, name)
    return _node_source(code, node) if node is not None else ""


def defines_with_return(function_src: str, name: str) -> bool:
    """Level 1: `def name` is present with a `return <value>`; judged on the text when it does not parse."""
    if not function_src.strip():
        return False
    try:
        tree = parse_python(function_src)
    except PARSE_ERRORS:
        if not re.search(rf"^[^\S\n]*+(?:async[^\S\n]++)?def[^\S\n]++{re.escape(name)}[^\S\n]*+\(", function_src, re.M):
            return False
        return bool(_RETURN_VALUE.search(function_src))
    node = find_def(tree, name)
    return node is not None and _has_value_return(node)


def prompt_imports(prompt: str) -> list[str]:
    """The import lines of the prompt (top level)."""
    return list(_imports_of(prompt or ""))


def prompt_helpers(prompt: str, entry_point: str, skip: tuple[str, ...] = ("aux",)) -> list[str]:
    """Functions and classes the prompt defines fully besides the entry point (e.g. `poly` in HumanEval/32,
    `encode_cyclic` in HumanEval/38): the solution and the tests may call them."""
    try:
        tree = parse_python(prompt or "")
    except PARSE_ERRORS:
        return []
    out = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and \
                node.name != entry_point and node.name not in skip:
            out.append(ast.unparse(node))
    return out
