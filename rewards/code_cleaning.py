"""Cleaning of model completions and the AST checks of the reward (no code is run here).

- `clean_completion(text, name)`: strip markdown fences and prose, extract the function `name` (AST first, then
  an indentation-based text fallback), and keep the completion's own top-level imports. Every other top-level
  statement of the completion (helper functions, classes, tests, prints, `if __name__ == '__main__'` blocks) is
  dropped, as the reference implementation does: only the named function is scored.
- `defines_with_return`: level 1 (a `def` with a `return <value>`, judged on the text when the code does not
  parse).
- `prompt_imports`, `prompt_helpers`: what the prompt contributes to the program.
- `calls_aux`, `is_thin_wrapper`, `ignores_aux_return`: the cooperation checks, on the AST (`cooperation`: all
  three from one parse).
"""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass

# What parsing or compiling model output may raise: a syntax error, or (for garbage such as 100,000 nested
# unary minuses) MemoryError / RecursionError from the parser itself. All of them mean "does not parse".
PARSE_ERRORS = (SyntaxError, ValueError, MemoryError, RecursionError)

_FENCE = re.compile(r"^\s*```[\w+-]*\s*$")
_IMPORT_LINE = re.compile(r"^(import\s+[\w., ]+|from\s+[\w.]+\s+import\s+.+)$")


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
    with_def = [b for b in blocks if re.search(r"^\s*(async\s+)?def\s", b, re.M)]
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


def _find_def(tree: ast.Module, name: str):
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
    pattern = re.compile(rf"^(\s*)(async\s+)?def\s+{re.escape(name)}\s*\(")
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
        header_open = line.count("(") - line.count(")")
        while end < len(lines):
            cur = lines[end]
            if header_open > 0:   # a signature over several lines
                header_open += cur.count("(") - cur.count(")")
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
        tree = ast.parse(code)
    except PARSE_ERRORS:
        tree = None
    if tree is not None:
        node = _find_def(tree, name)
        if node is None:
            return Cleaned("", _imports_of(code))
        first = node.decorator_list[0].lineno if node.decorator_list else node.lineno
        lines = code.split("\n")[first - 1:node.end_lineno]
        imports = tuple(ast.unparse(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)))
        return Cleaned(textwrap.dedent("\n".join(lines)).rstrip(), tuple(dict.fromkeys(imports)),
                       _has_value_return(node))
    function = _text_block(code, name)
    return Cleaned(function, _imports_of(code), defines_with_return(function, name))


def defines_with_return(function_src: str, name: str) -> bool:
    """Level 1: `def name` is present with a `return <value>`; judged on the text when it does not parse."""
    if not function_src.strip():
        return False
    try:
        tree = ast.parse(function_src)
    except PARSE_ERRORS:
        if not re.search(rf"^\s*(async\s+)?def\s+{re.escape(name)}\s*\(", function_src, re.M):
            return False
        return bool(re.search(r"^\s+return\s*[^\s;#]", function_src, re.M))
    node = _find_def(tree, name)
    return node is not None and _has_value_return(node)


def prompt_imports(prompt: str) -> list[str]:
    """The import lines of the prompt (top level)."""
    return list(_imports_of(prompt or ""))


def prompt_helpers(prompt: str, entry_point: str, skip: tuple[str, ...] = ("aux",)) -> list[str]:
    """Functions and classes the prompt defines fully besides the entry point (e.g. `poly` in HumanEval/32,
    `encode_cyclic` in HumanEval/38): the solution and the tests may call them."""
    try:
        tree = ast.parse(prompt or "")
    except PARSE_ERRORS:
        return []
    out = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and \
                node.name != entry_point and node.name not in skip:
            out.append(ast.unparse(node))
    return out


# --------------------------------------------------------------------------------------- cooperation checks

def _is_aux_call(node: ast.AST, aux: str = "aux") -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == aux


def _main_node(main_src: str, name: str):
    try:
        tree = ast.parse(main_src)
    except PARSE_ERRORS:
        return None
    return _find_def(tree, name)


@dataclass(frozen=True)
class Cooperation:
    """The cooperation checks of one main function (see `cooperation`)."""

    uses_aux: bool
    thin_wrapper: bool
    ignores_return: bool


def cooperation(main_src: str, name: str, aux: str = "aux") -> Cooperation:
    """`calls_aux`, `is_thin_wrapper` and `ignores_aux_return` of `main_src` from one parse."""
    node = _main_node(main_src, name)
    return Cooperation(_calls_aux(node, main_src, aux), _thin_wrapper(node, aux), _ignores_return(node, aux))


def calls_aux(main_src: str, name: str, aux: str = "aux") -> bool:
    """True when the main function calls `aux(...)` anywhere in its body (on the text when it does not parse)."""
    return _calls_aux(_main_node(main_src, name), main_src, aux)


def _calls_aux(node, main_src: str, aux: str) -> bool:
    if node is None:
        return bool(re.search(rf"\b{re.escape(aux)}\s*\(", main_src.split("\n", 1)[-1]))
    return any(_is_aux_call(n, aux) for n in ast.walk(node))


def _body_without_docstring(node) -> list[ast.stmt]:
    body = list(node.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and \
            isinstance(body[0].value.value, str):
        body = body[1:]
    return [s for s in body if not isinstance(s, ast.Pass) and
            not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) and s.value.value is Ellipsis)]


def is_thin_wrapper(main_src: str, name: str, aux: str = "aux") -> bool:
    """True when the main body (without docstring and comments) is empty, or only `return <expr using aux>`,
    or `v = aux(...)` followed by `return v`."""
    return _thin_wrapper(_main_node(main_src, name), aux)


def _thin_wrapper(node, aux: str) -> bool:
    if node is None:
        return False
    body = _body_without_docstring(node)
    if not body:
        return True
    uses = lambda n: any(_is_aux_call(x, aux) for x in ast.walk(n))  # noqa: E731
    if len(body) == 1 and isinstance(body[0], ast.Return) and body[0].value is not None and uses(body[0].value):
        return True
    if len(body) == 2 and isinstance(body[0], ast.Assign) and len(body[0].targets) == 1 and \
            isinstance(body[0].targets[0], ast.Name) and _is_aux_call(body[0].value, aux) and \
            isinstance(body[1], ast.Return) and isinstance(body[1].value, ast.Name) and \
            body[1].value.id == body[0].targets[0].id:
        return True
    return False


def ignores_aux_return(main_src: str, name: str, aux: str = "aux") -> bool:
    """True when main calls `aux(...)` as a bare statement, or assigns its result to a name never read
    afterwards (a read anywhere later in the function, or anywhere in an enclosing loop, counts)."""
    return _ignores_return(_main_node(main_src, name), aux)


def _ignores_return(node, aux: str) -> bool:
    if node is None:
        return False
    parents = {}
    for parent in ast.walk(node):
        for child in ast.iter_child_nodes(parent):
            parents[child] = parent
    loads = [(n.id, (n.lineno, n.col_offset), n) for n in ast.walk(node)
             if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]
    for stmt in ast.walk(node):
        if isinstance(stmt, ast.Expr) and _is_aux_call(stmt.value, aux):
            return True
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None and \
                _is_aux_call(stmt.value, aux):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            if len(names) != len(targets) or not names:
                continue  # unpacking, attributes, subscripts: the value is used
            end = (stmt.end_lineno, stmt.end_col_offset)
            loops = []
            p = parents.get(stmt)
            while p is not None and p is not node:
                if isinstance(p, (ast.For, ast.While, ast.AsyncFor)):
                    loops.append(p)
                p = parents.get(p)
            loop_nodes = {id(x) for loop in loops for x in ast.walk(loop)}
            for target in names:
                read = any(n == target and (pos > end or id(obj) in loop_nodes) for n, pos, obj in loads)
                if not read:
                    return True
    return False
