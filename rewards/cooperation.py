"""Cleaning of model completions and the AST checks of the reward (no code is run here).

- `clean_completion(text, name)`: strip markdown fences and prose, extract the function `name` (AST first, then
  an indentation-based text fallback), and keep the completion's own top-level imports. Every other top-level
  statement of the completion (helper functions, classes, tests, prints, `if __name__ == '__main__'` blocks) is
  dropped, as the reference implementation does: only the named function is scored.
- `extract_function(code, name)`: that extraction alone; the joint-answer parser of the code environment uses it
  too, so parser and reward read a text the same way.
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
import threading
from dataclasses import dataclass
from typing import Any, Sequence

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
        node = _find_def(tree, name)
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
    node = _find_def(tree, name)
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
    node = _find_def(tree, name)
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



# ------------------------------------------------------------------------------------ what can run (static)
#
# The cooperation checks and the split of a check into tests look only at code that can run:
# - a branch under a constant test is dead (`if False`, `if 0`, `if None`, `if ""`, `if ()`, `if not True`,
#   `if 1 == 2`, ...; likewise the `else` of a constant-true test, the body of `while <false>`, the `else`
#   of `while <true>`, the body of `for _ in []`), and so is the unused side of `x if <const> else y` and
#   the operands after a short-circuiting constant in `and` / `or`;
# - statements after an unconditional `return`, `raise`, `continue` or `break` in the same block (or after an
#   `if` whose branches all end so, or a `while True:` without a `break`) are dead;
# - a nested function, lambda or class is dead unless its name is read by live code (a lambda is dead only when
#   it is a bare statement or assigned to a name never read); defaults and decorators count as the enclosing
#   code. Names are matched by spelling, without scopes: reading a name anywhere live keeps every def of it.

def const_truth(e: ast.AST) -> bool | None:
    """The truth value `e` always has (True/False), or None when it depends on anything not constant."""
    if isinstance(e, ast.Constant):
        try:
            return bool(e.value)
        except Exception:  # noqa: BLE001
            return None
    if isinstance(e, (ast.Tuple, ast.List, ast.Set)):
        if not e.elts:
            return False
        return True if not any(isinstance(x, ast.Starred) for x in e.elts) else None
    if isinstance(e, ast.Dict):
        if not e.keys:
            return False
        return True if all(k is not None for k in e.keys) else None
    if isinstance(e, ast.JoinedStr):
        if not e.values:
            return False
        return True if any(isinstance(v, ast.Constant) and v.value for v in e.values) else None
    if isinstance(e, ast.Lambda):
        return True
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
        t = const_truth(e.operand)
        return None if t is None else not t
    if isinstance(e, ast.BoolOp):
        truths = [const_truth(v) for v in e.values]
        absorbing = isinstance(e.op, ast.Or)          # `or`: one truthy operand decides; `and`: one falsy one
        if absorbing in truths:
            return absorbing
        return (not absorbing) if all(t is not None for t in truths) else None
    if isinstance(e, ast.IfExp):
        t = const_truth(e.test)
        if t is not None:
            return const_truth(e.body if t else e.orelse)
        a, b = const_truth(e.body), const_truth(e.orelse)
        return a if a == b else None
    if isinstance(e, ast.Compare) and len(e.ops) == 1 and isinstance(e.left, ast.Constant) and \
            isinstance(e.comparators[0], ast.Constant):
        a, b = e.left.value, e.comparators[0].value
        scalar = (int, float, complex, str, bytes, bool, type(None))
        if not (isinstance(a, scalar) and isinstance(b, scalar)):
            return None
        ops = {ast.Eq: lambda: a == b, ast.NotEq: lambda: a != b, ast.Lt: lambda: a < b, ast.LtE: lambda: a <= b,
               ast.Gt: lambda: a > b, ast.GtE: lambda: a >= b, ast.Is: lambda: a is b if a is None or b is None
               else None, ast.IsNot: lambda: a is not b if a is None or b is None else None,
               ast.In: lambda: a in b, ast.NotIn: lambda: a not in b}
        try:
            result = ops[type(e.ops[0])]()
        except Exception:  # noqa: BLE001 - TypeError ('<' between str and int), ...
            return None
        return None if result is None else bool(result)
    return None


def _empty_iterable(e: ast.AST) -> bool:
    if isinstance(e, (ast.Tuple, ast.List, ast.Set)):
        return not e.elts
    if isinstance(e, ast.Dict):
        return not e.keys
    return isinstance(e, ast.Constant) and isinstance(e.value, (str, bytes)) and not e.value


def _own_break(loop: ast.AST) -> bool:
    """True when a `break` of this loop (not of a nested loop or function) is in its body."""
    stack = list(loop.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Break):
            return True
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        stack.extend(n for n in ast.iter_child_nodes(node) if isinstance(n, (ast.stmt, ast.excepthandler,
                                                                             ast.match_case)))
    return False


def _ends(stmt: ast.stmt) -> bool:
    """True when control never goes on past `stmt` (return, raise, continue, break, or all branches do)."""
    if isinstance(stmt, (ast.Return, ast.Raise, ast.Continue, ast.Break)):
        return True
    if isinstance(stmt, ast.If):
        return bool(stmt.body and stmt.orelse and _ends(stmt.body[-1]) and _ends(stmt.orelse[-1]))
    if isinstance(stmt, ast.While):
        return const_truth(stmt.test) is True and not _own_break(stmt)
    return False


def _prune_expr(e: ast.expr) -> ast.expr:
    while True:
        if isinstance(e, ast.IfExp) and const_truth(e.test) is not None:
            e = e.body if const_truth(e.test) else e.orelse
            continue
        if isinstance(e, ast.BoolOp):
            stop, keep = isinstance(e.op, ast.Or), []
            for v in e.values:
                keep.append(v)
                if const_truth(v) is stop:
                    break
            if len(keep) == 1:
                e = keep[0]
                continue
            e.values = keep
        break
    _prune_children(e)
    return e


def _prune_children(node: ast.AST) -> None:
    for field, value in ast.iter_fields(node):
        if isinstance(value, list):
            if value and isinstance(value[0], ast.stmt):
                setattr(node, field, _prune_block(value))
            else:
                for i, item in enumerate(value):
                    if isinstance(item, ast.expr):
                        value[i] = _prune_expr(item)
                    elif isinstance(item, ast.AST):
                        _prune_children(item)
        elif isinstance(value, ast.expr):
            setattr(node, field, _prune_expr(value))
        elif isinstance(value, ast.AST):
            _prune_children(value)


def _prune_stmt(s: ast.stmt) -> list[ast.stmt]:
    if isinstance(s, ast.If) and not isinstance(s.test, ast.NamedExpr):
        t = const_truth(s.test)
        if t is not None:
            return _prune_block(s.body if t else s.orelse)
    elif isinstance(s, ast.While) and not isinstance(s.test, ast.NamedExpr):
        t = const_truth(s.test)
        if t is False:
            return _prune_block(s.orelse)
        if t is True:
            s.orelse = []
    elif isinstance(s, (ast.For, ast.AsyncFor)) and _empty_iterable(s.iter):
        return _prune_block(s.orelse)
    _prune_children(s)
    return [s]


def _prune_block(stmts: list[ast.stmt]) -> list[ast.stmt]:
    """The statements of a block that can run, constant branches flattened into it (mutates the nodes)."""
    out = []
    for s in stmts:
        for n in _prune_stmt(s):
            out.append(n)
            if _ends(n):
                return out
    return out


_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _lambda_binding(node: ast.AST) -> str | None:
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) and \
            isinstance(node.value, ast.Lambda):
        return node.targets[0].id
    return None


def _region(root: ast.AST):
    """The nodes that run when `root` (a function, class or lambda, or a list of statements) runs, without the
    bodies of nested functions, classes and lambdas (their definitions, decorators and defaults are yielded)."""
    if isinstance(root, list):
        stack = list(reversed(root))
    elif isinstance(root, ast.Lambda):
        stack = [root.body]
    else:
        stack = list(reversed(root.body))
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, _DEFS):
            parts = list(node.decorator_list)
            if isinstance(node, ast.ClassDef):
                parts += list(node.bases) + [k.value for k in node.keywords]
            else:
                parts += list(node.args.defaults) + [d for d in node.args.kw_defaults if d is not None]
            stack.extend(reversed(parts))
        elif isinstance(node, ast.Lambda):
            stack.extend(reversed(list(node.args.defaults) + [d for d in node.args.kw_defaults if d is not None]))
        elif _lambda_binding(node) is not None:
            stack.extend(reversed(node.targets))
            stack.append(node.value.args)    # defaults only: the body is the lambda's own region
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Lambda):
            continue                          # a bare lambda statement: never called
        else:
            stack.extend(reversed(list(ast.iter_child_nodes(node))))


def _drop_uncalled(fn: ast.AST) -> None:
    """Remove (in place) the nested functions, classes and name-bound lambdas of `fn` that live code never reads."""
    loads: set[str] = set()
    waiting: dict[str, list] = {}
    bare: list = []
    queue = [fn]
    live = {id(fn)}
    while queue:
        for node in _region(queue.pop()):
            inner = node if isinstance(node, _DEFS) else (node.value if _lambda_binding(node) else None)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Lambda):
                bare.append(node)   # a lambda as a statement: never called
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in loads:
                loads.add(node.id)
                for d in waiting.pop(node.id, []):
                    live.add(id(d))
                    queue.append(d)
            elif inner is not None:
                name = node.name if isinstance(node, _DEFS) else _lambda_binding(node)
                if name in loads:
                    live.add(id(inner))
                    queue.append(inner)
                else:
                    waiting.setdefault(name, []).append(inner)
    dead = {id(d) for ds in waiting.values() for d in ds} | {id(b) for b in bare}
    if not dead:
        return
    for parent in ast.walk(fn):
        for field, value in ast.iter_fields(parent):
            if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                kept = [s for s in value if id(s) not in dead]
                setattr(parent, field, kept or [ast.Pass()])
            elif isinstance(value, ast.Lambda) and id(value) in dead:
                setattr(parent, field, ast.Constant(None))


def live_code(fn: ast.AST) -> ast.AST:
    """`fn` (a parsed function, mutated in place) reduced to the code that can run; see the rules above."""
    fn.body = _prune_block(fn.body) or [ast.Pass()]
    _drop_uncalled(fn)
    return fn


# --------------------------------------------------------------------------------------- cooperation checks
#
# On the live code of main (`live_code`):
# - main uses aux when it calls `aux` (or a name bound only to `aux`, e.g. `f = aux`). A main that binds the
#   name `aux` itself (a parameter, a nested def, `aux = ...`, an import) does not call the helper.
# - main is a thin wrapper when what it returns is aux's result passed through with no work of its own: every
#   value it can return (each `return`, `yield`, and falling off the end) is an aux call, a name holding one
#   (through re-assignments, aliases, walrus, `x if c else y` of two such values, `copy(x)`/`x.copy()`, an
#   identity operation with a constant such as `x + 0`, `x * 1`, `+x`), or a call of a local function that
#   returns only such values. The arguments given to aux are not looked at (preparing them is not the answer),
#   nor are docstrings, `pass`, asserts and code that cannot run. Also thin: a main whose only statement that
#   can run is one `return <expression calling aux>` (`return aux(x) + 1`), or with nothing but those trivia.
# - main ignores aux's return when it calls aux as a bare statement or assigns the result to a name never read
#   later, or when no value main can return depends on an aux result, by data or by control flow (printing
#   the result, or storing it in something never returned, is ignoring it).

_TRIVIAL = (ast.Pass, ast.Assert, ast.Global, ast.Nonlocal)
_COPY_NAMES = ("copy", "deepcopy")


def _identity(op: ast.operator, value: Any) -> bool:
    """True when `x <op> value` is `x` (for the numbers and strings a function returns)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return False
    if isinstance(op, (ast.Add, ast.Sub)):
        return value == 0 or value == ""
    if isinstance(op, (ast.Mult, ast.Pow)):
        return value == 1
    if isinstance(op, (ast.BitOr, ast.BitXor, ast.LShift, ast.RShift)):
        return value == 0 and isinstance(value, int)
    return False


def _root_name(e: ast.AST) -> str | None:
    while isinstance(e, (ast.Attribute, ast.Subscript, ast.Starred)):
        e = e.value
    return e.id if isinstance(e, ast.Name) else None


def _aux_names(fn: ast.AST, aux: str) -> frozenset:
    """`aux` and the names bound only to it in `fn` (`f = aux`); empty when `fn` binds the name `aux` itself."""
    params = {n.arg for n in ast.walk(fn) if isinstance(n, ast.arg)}
    values: dict[str, list] = {}
    other: set[str] = set()
    simple: set[int] = set()
    for node in ast.walk(fn):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                if isinstance(t, ast.Name):
                    values.setdefault(t.id, []).append(node.value)
                    simple.add(id(t))
        elif isinstance(node, _DEFS) and node is not fn:
            other.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            other.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            other.add(node.name)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            other.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            other.add(node.rest)
    other.update(n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))
                 and id(n) not in simple)
    if aux in params or aux in other or aux in values:
        return frozenset()
    names = {aux}
    changed = True
    while changed:
        changed = False
        for name, vs in values.items():
            if name not in names and name not in params and name not in other and \
                    all(isinstance(v, ast.Name) and v.id in names for v in vs):
                names.add(name)
                changed = True
    return frozenset(names)


class FlowBudgetExceeded(Exception):
    """The data-flow analysis of one main ran past its budget of steps (`FLOW_STEPS`)."""


# Steps (statements and expressions evaluated) the data-flow analysis of one main may take, its nested functions
# included. Loops run to a fixpoint of at most 10 passes each, so nested loops multiply: a degenerate main with
# 11-name chains at 5 nested levels took 11.7 CPU s before the cap. 50,000 steps are under 0.1 s here, and no
# main of HumanEval or the coop set comes near (the largest takes under 300); past it, `cooperation` gives up and
# returns the conservative verdict (no bonus).
FLOW_STEPS = 50_000


class _Flow:
    """A small abstract interpreter over one function: for every name, (holds exactly an aux result,
    depends on an aux result); it collects the same pair for every value the function can return.
    `budget` is a one-item list of the steps left, shared by every _Flow of one analysis."""

    NONE = (False, False)

    def __init__(self, aux: frozenset, local: dict, budget: list | None = None):
        self.aux, self.local = aux, local
        self.budget = budget if budget is not None else [FLOW_STEPS]
        self.returns: list[tuple[bool, bool]] = []
        self.pc = False              # control flow depends on an aux result
        self.loops: list[tuple[list, list]] = []

    def run(self, fn: ast.AST) -> list[tuple[bool, bool]]:
        if isinstance(fn, ast.Lambda):
            self.returns.append(self.eval(fn.body, {}))
            return self.returns
        end = self.block(fn.body, {})
        if end is not None:
            self.returns.append((False, self.pc))   # falling off the end returns None
        return self.returns

    # -- expressions
    def spend(self) -> None:
        self.budget[0] -= 1
        if self.budget[0] < 0:
            raise FlowBudgetExceeded(f"the data-flow analysis took more than {FLOW_STEPS} steps")

    def eval(self, e: ast.AST | None, st: dict) -> tuple[bool, bool]:
        if e is None:
            return self.NONE
        self.spend()
        if isinstance(e, ast.Name):
            if e.id in self.aux:
                return (False, True)     # aux itself, passed on (map(aux, xs), sorted(key=aux))
            return st.get(e.id, self.NONE)
        if isinstance(e, ast.Constant):
            return self.NONE
        if isinstance(e, ast.Call):
            return self.call(e, st)
        if isinstance(e, ast.NamedExpr):
            v = self.eval(e.value, st)
            self.bind(e.target, v, st)
            return v
        if isinstance(e, ast.BinOp):
            if isinstance(e.right, ast.Constant) and _identity(e.op, e.right.value):
                return self.eval(e.left, st)
            if isinstance(e.left, ast.Constant) and not isinstance(e.op, (ast.Sub, ast.Pow, ast.LShift, ast.RShift)) \
                    and _identity(e.op, e.left.value) and not isinstance(e.left.value, str):
                return self.eval(e.right, st)
            a, b = self.eval(e.left, st), self.eval(e.right, st)
            return (False, a[1] or b[1])
        if isinstance(e, ast.UnaryOp):
            if isinstance(e.op, ast.UAdd):
                return self.eval(e.operand, st)
            if isinstance(e.op, ast.USub) and isinstance(e.operand, ast.UnaryOp) and isinstance(e.operand.op, ast.USub):
                return self.eval(e.operand.operand, st)
            return (False, self.eval(e.operand, st)[1])
        if isinstance(e, ast.IfExp):
            t, a, b = self.eval(e.test, st), self.eval(e.body, st), self.eval(e.orelse, st)
            return (a[0] and b[0], t[1] or a[1] or b[1])
        if isinstance(e, ast.BoolOp):
            vs = [self.eval(v, st) for v in e.values]
            return (all(v[0] for v in vs), any(v[1] for v in vs))
        if isinstance(e, ast.Await):
            return self.eval(e.value, st)
        if isinstance(e, (ast.Yield, ast.YieldFrom)):
            v = self.eval(e.value, st)
            self.returns.append((v[0], v[1] or self.pc))
            return (False, v[1])
        dep = False
        for child in ast.iter_child_nodes(e):
            dep = self.eval_any(child, st) or dep
        return (False, dep)

    def eval_any(self, node: ast.AST, st: dict) -> bool:
        if isinstance(node, ast.expr):
            return self.eval(node, st)[1]
        dep = False
        for child in ast.iter_child_nodes(node):
            dep = self.eval_any(child, st) or dep
        return dep

    def call(self, e: ast.Call, st: dict) -> tuple[bool, bool]:
        f = e.func
        args = [self.eval(a.value if isinstance(a, ast.Starred) else a, st) for a in e.args] + \
            [self.eval(k.value, st) for k in e.keywords]
        dep_args = any(v[1] for v in args)
        receiver = [f.value] if isinstance(f, ast.Attribute) else []
        # the call may store the value in its receiver or in a container it is given (`out.append(v)`), or,
        # under a condition on aux's result, change its receiver depending on it (`if aux(w): out.append(w)`)
        if dep_args or (self.pc and receiver):
            for a in (list(e.args) if dep_args else []) + receiver:
                root = _root_name(a)
                if root is not None and root not in self.aux and not st.get(root, self.NONE)[1]:
                    st[root] = (False, True)
        if isinstance(f, ast.Name):
            if f.id in self.aux:
                return (True, True)
            if f.id in self.local:
                pure, calls, free = self.local[f.id]
                return (pure, dep_args or calls or any(st.get(n, self.NONE)[1] for n in free))
            if f.id in _COPY_NAMES and len(args) == 1 and not e.keywords:
                return args[0]
        if isinstance(f, ast.Attribute):
            if f.attr in _COPY_NAMES and len(args) == 1 and not e.keywords:
                return args[0]
            if f.attr == "copy" and not args:
                return self.eval(f.value, st)
        if isinstance(f, ast.Lambda):
            v = self.eval(f.body, st)
            return (v[0], v[1] or dep_args)
        fv = self.eval(f, st)
        return (False, dep_args or fv[1])

    # -- statements
    def bind(self, target: ast.AST, v: tuple[bool, bool], st: dict) -> None:
        if isinstance(target, ast.Name):
            st[target.id] = (v[0], v[1] or self.pc)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for elt in target.elts:
                self.bind(elt, (False, v[1]), st)
        elif isinstance(target, ast.Starred):
            self.bind(target.value, (False, v[1]), st)
        else:
            if isinstance(target, ast.Subscript):
                self.eval(target.slice, st)
            root = _root_name(target)
            if root is not None:
                st[root] = (False, st.get(root, self.NONE)[1] or v[1] or self.pc)

    @staticmethod
    def join(*states):
        states = [s for s in states if s is not None]
        if not states:
            return None
        out = {}
        for name in set().union(*states):
            vs = [s.get(name, _Flow.NONE) for s in states]
            out[name] = (all(v[0] for v in vs), any(v[1] for v in vs))
        return out

    def block(self, stmts, st):
        for s in stmts:
            if st is None:
                return None
            st = self.stmt(s, st)
        return st

    def branch(self, stmts, st, dep):
        saved = self.pc
        self.pc = saved or dep
        out = self.block(stmts, dict(st))
        self.pc = saved
        return out

    def stmt(self, s: ast.stmt, st: dict):
        self.spend()
        if isinstance(s, ast.Return):
            v = self.eval(s.value, st)
            self.returns.append((v[0], v[1] or self.pc))
            return None
        if isinstance(s, ast.Assign):
            t = s.targets[0]
            if len(s.targets) == 1 and isinstance(t, (ast.Tuple, ast.List)) and \
                    isinstance(s.value, (ast.Tuple, ast.List)) and len(t.elts) == len(s.value.elts) and \
                    not any(isinstance(x, ast.Starred) for x in t.elts + s.value.elts):
                values = [self.eval(x, st) for x in s.value.elts]
                for target, v in zip(t.elts, values):
                    self.bind(target, v, st)
                return st
            v = self.eval(s.value, st)
            for target in s.targets:
                self.bind(target, v, st)
            return st
        if isinstance(s, ast.AnnAssign):
            if s.value is not None:
                self.bind(s.target, self.eval(s.value, st), st)
            return st
        if isinstance(s, ast.AugAssign):
            load = st.get(s.target.id, self.NONE) if isinstance(s.target, ast.Name) else (False, False)
            if isinstance(s.value, ast.Constant) and _identity(s.op, s.value.value):
                v = load
            else:
                v = (False, load[1] or self.eval(s.value, st)[1])
            self.bind(s.target, v, st)
            return st
        if isinstance(s, ast.Expr):
            self.eval(s.value, st)
            return st
        if isinstance(s, ast.If):
            t = self.eval(s.test, st)
            out = self.join(self.branch(s.body, st, t[1]), self.branch(s.orelse, st, t[1]))
            if t[1] and any(isinstance(n, (ast.Return, ast.Raise, ast.Break, ast.Continue))
                            for part in (s.body, s.orelse) for x in part for n in ast.walk(x)):
                self.pc = True   # whether the code after this runs depends on aux's result
            return out
        if isinstance(s, (ast.For, ast.AsyncFor, ast.While)):
            return self.loop(s, st)
        if isinstance(s, (ast.Try, getattr(ast, "TryStar", ast.Try))):
            body = self.block(s.body, dict(st))
            entry = self.join(st, body)
            outs = [self.block(s.orelse, body) if body is not None else None]
            for h in s.handlers:
                hst = dict(entry)
                if h.name:
                    hst[h.name] = (False, self.pc)
                outs.append(self.block(h.body, hst))
            out = self.join(*outs)
            if s.finalbody:
                final = self.block(s.finalbody, dict(out if out is not None else entry))
                return final if out is not None else None
            return out
        if isinstance(s, (ast.With, ast.AsyncWith)):
            for item in s.items:
                v = self.eval(item.context_expr, st)
                if item.optional_vars is not None:
                    self.bind(item.optional_vars, (False, v[1]), st)
            return self.block(s.body, st)
        if isinstance(s, ast.Match):
            subject = self.eval(s.subject, st)
            outs = [st]
            for case in s.cases:
                cst = dict(st)
                for n in ast.walk(case.pattern):
                    for name in (getattr(n, "name", None), getattr(n, "rest", None)):
                        if isinstance(name, str):
                            cst[name] = (False, subject[1] or self.pc)
                if case.guard is not None:
                    self.eval(case.guard, cst)
                outs.append(self.branch(case.body, cst, subject[1]))
            return self.join(*outs)
        if isinstance(s, ast.Raise):
            self.eval(s.exc, st)
            return None
        if isinstance(s, (ast.Break, ast.Continue)):
            if self.loops:
                self.loops[-1][0 if isinstance(s, ast.Break) else 1].append(dict(st))
            return None
        if isinstance(s, _DEFS):
            for d in s.decorator_list:
                self.eval(d, st)
            st[s.name] = self.NONE
            return st
        if isinstance(s, ast.Delete):
            for t in s.targets:
                if isinstance(t, ast.Name):
                    st.pop(t.id, None)
            return st
        if isinstance(s, (ast.Import, ast.ImportFrom)):
            for alias in s.names:
                st[(alias.asname or alias.name).split(".")[0]] = self.NONE
            return st
        if isinstance(s, ast.Assert):
            self.eval(s.test, st)
        return st

    def loop(self, s, st):
        head = self.eval(s.iter if not isinstance(s, ast.While) else s.test, st)
        self.loops.append(([], []))
        cur = dict(st)
        for _ in range(10):
            if isinstance(s, ast.While):   # the test runs again after each pass, on what the body left
                t = self.eval(s.test, dict(cur))
                head = (head[0], head[1] or t[1])
            body_in = dict(cur)
            if not isinstance(s, ast.While):
                saved = self.pc
                self.pc = saved or head[1]
                self.bind(s.target, (False, head[1]), body_in)
                self.pc = saved
            out = self.branch(s.body, body_in, head[1])
            new = self.join(cur, out, *self.loops[-1][1])
            if new == cur:
                break
            cur = new
        breaks, _ = self.loops.pop()
        if head[1] and (isinstance(s, ast.While) or any(isinstance(n, (ast.Return, ast.Raise, ast.Break))
                                                        for x in s.body for n in ast.walk(x))):
            self.pc = True   # how long the loop runs (or whether it leaves early) depends on aux's result
        if isinstance(s, ast.While) and const_truth(s.test) is True:
            return self.join(*breaks)
        return self.join(self.block(s.orelse, dict(cur)), *breaks)


def _free_loads(fn: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _local_functions(fn: ast.AST, aux: frozenset, budget: list | None = None) -> dict:
    """Live nested functions and name-bound lambdas of `fn`: name -> (returns only aux results, calls aux,
    names it reads)."""
    found = {}
    for node in ast.walk(fn):
        if node is fn:
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found.setdefault(node.name, []).append(node)
        elif _lambda_binding(node) is not None:
            found.setdefault(_lambda_binding(node), []).append(node.value)
    local: dict = {}
    for _ in range(2):   # a local function may call another one
        for name, nodes in found.items():
            pure = calls = False
            free: set[str] = set()
            for i, node in enumerate(nodes):
                returns = _Flow(aux, {k: v for k, v in local.items() if k != name}, budget).run(node)
                p = bool(returns) and all(r[0] for r in returns)
                c = any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in aux
                        for n in ast.walk(node))
                pure = p if i == 0 else (pure and p)
                calls = calls or c
                free |= _free_loads(node)
            local[name] = (pure, calls, frozenset(free))
    return local


def _is_aux_call(node: ast.AST, aux: str | frozenset = "aux") -> bool:
    names = {aux} if isinstance(aux, str) else aux
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in names


def _main_node(main_src: str, name: str):
    """The live code (`live_code`) of the function `name` in `main_src`, or None when it does not parse."""
    try:
        tree = parse_python(main_src)
    except PARSE_ERRORS:
        return None
    node = _find_def(tree, name)
    if node is None:
        return None
    try:
        return live_code(node)
    except RecursionError:   # nesting the parser took but a recursive walk does not: judge the code as it is
        return node


@dataclass(frozen=True)
class Cooperation:
    """The cooperation checks of one main function (see `cooperation`)."""

    uses_aux: bool
    thin_wrapper: bool
    ignores_return: bool


def cooperation(main_src: str, name: str, aux: str = "aux") -> Cooperation:
    """`calls_aux`, `is_thin_wrapper` and `ignores_aux_return` of `main_src` from one parse (on live code)."""
    node = _main_node(main_src, name)
    if node is None:
        return Cooperation(_calls_aux(None, main_src, aux), False, False)
    try:
        names = _aux_names(node, aux)
        uses = _calls_aux(node, main_src, names)
        budget = [FLOW_STEPS]
        returns = _Flow(names, _local_functions(node, names, budget), budget).run(node)
        return Cooperation(uses, _thin_wrapper(node, names, returns), _ignores_return(node, names, returns))
    except (RecursionError, FlowBudgetExceeded):   # the conservative verdict: no bonus
        return Cooperation(False, True, True)


def calls_aux(main_src: str, name: str, aux: str = "aux") -> bool:
    """True when the live code of the main function calls `aux(...)` (on the text when it does not parse)."""
    return cooperation(main_src, name, aux).uses_aux


def _calls_aux(node, main_src: str, aux) -> bool:
    if node is None:
        return bool(re.search(rf"\b{re.escape(aux)}\s*\(", main_src.split("\n", 1)[-1]))
    return any(_is_aux_call(n, aux) for n in ast.walk(node))


def _is_trivial(s: ast.stmt) -> bool:
    return isinstance(s, _TRIVIAL) or (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))


def is_thin_wrapper(main_src: str, name: str, aux: str = "aux") -> bool:
    """True when main returns aux's result passed through with no work of its own (see the rules above)."""
    return cooperation(main_src, name, aux).thin_wrapper


def _thin_wrapper(node, aux: frozenset, returns) -> bool:
    body = [s for s in node.body if not _is_trivial(s)]
    if not body:
        return True
    if len(body) == 1 and isinstance(body[0], ast.Return) and body[0].value is not None and \
            any(_is_aux_call(x, aux) for x in ast.walk(body[0].value)):
        return True
    return bool(aux) and bool(returns) and all(pure for pure, _ in returns)


def ignores_aux_return(main_src: str, name: str, aux: str = "aux") -> bool:
    """True when main calls `aux(...)` and ignores what it returns (see the rules above)."""
    return cooperation(main_src, name, aux).ignores_return


def _ignores_return(node, aux: frozenset, returns) -> bool:
    if not any(_is_aux_call(n, aux) for n in ast.walk(node)):
        return False
    if not any(dep for _, dep in returns):
        return True
    parents = {}
    for parent in ast.walk(node):
        for child in ast.iter_child_nodes(parent):
            parents[child] = parent
    loads = [(n.id, (n.lineno, n.col_offset), n) for n in ast.walk(node)
             if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and hasattr(n, "lineno")]
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


# --------------------------------------------------------------------------------------- tests of a check
#
# A test is an assert, or a statement holding asserts (a loop, an if, a with, ...), that exercises the
# candidate: it can run (see "what can run"; an assert inside a nested function counts only through a call of
# that function), its condition is not constant (`assert True`, `assert 1 == 1`, `assert "x"`,
# `assert not False, "msg"`, `assert (candidate(1) == 2, "msg")`, `assert candidate(1) or True` test nothing),
# its failure is not swallowed (`try: ... except AssertionError`, `with suppress(...)`), and its condition
# calls the candidate or uses a value computed by calling it. The candidate is the check's parameter and the
# entry point's name, or a name bound to one of them (`f = candidate`), or a function (of the check, its test
# file or the suite's context) that refers to one. Calling it means a call whose callee refers to it, or that
# is given it as an argument (`map(candidate, xs)`; not `callable(candidate)` and other introspection). A
# value computed by calling it is a name bound by a statement that calls it (`r = candidate(x)`,
# `out.append(candidate(x))` makes `out` one), or by one that uses such a value. Everything else is setup: it
# still runs, in order, with no verdict.

_INTROSPECTION = frozenset({"callable", "isinstance", "issubclass", "hasattr", "id", "type", "str", "repr",
                            "print", "hash", "dir", "vars", "bool", "format", "getattr", "setattr", "len"})
_SWALLOWING_CM = frozenset({"suppress", "raises", "assertRaises", "catch_warnings"})


def _mentions(node: ast.AST, names: set[str]) -> bool:
    return any(isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in names for n in ast.walk(node))


def _exercises(node: ast.AST, cand: set[str], vals: set[str]) -> bool:
    """True when `node` calls the candidate or reads a value computed by calling it."""
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in vals:
            return True
        if isinstance(n, ast.Call):
            if _mentions(n.func, cand):
                return True
            callee = n.func.id if isinstance(n.func, ast.Name) else \
                (n.func.attr if isinstance(n.func, ast.Attribute) else None)
            if callee not in _INTROSPECTION and \
                    any(_mentions(a, cand) for a in list(n.args) + [k.value for k in n.keywords]):
                return True
    return False


def _catches_assertion(handler: ast.ExceptHandler) -> bool:
    import builtins
    if handler.type is None:
        return True
    for t in (handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]):
        name = t.id if isinstance(t, ast.Name) else (t.attr if isinstance(t, ast.Attribute) else None)
        cls = getattr(builtins, name, None) if name else None
        if not (isinstance(cls, type) and issubclass(cls, BaseException)) or issubclass(AssertionError, cls):
            return True   # AssertionError, Exception, BaseException, or a name we cannot tell
    return False


def _verdict_nodes(stmts: list[ast.stmt]):
    """The asserts and calls of `stmts` whose failure reaches the caller (not swallowed, not in nested defs)."""
    stack = list(stmts)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, (ast.Try, getattr(ast, "TryStar", ast.Try))):
            if not any(_catches_assertion(h) for h in node.handlers):
                stack.extend(node.body)
            for h in node.handlers:
                stack.extend(h.body)
            stack.extend(node.orelse + node.finalbody)
            continue
        if isinstance(node, (ast.With, ast.AsyncWith)) and any(
                isinstance(n, (ast.Name, ast.Attribute)) and (getattr(n, "id", None) or getattr(n, "attr", None))
                in _SWALLOWING_CM for item in node.items for n in ast.walk(item.context_expr)):
            continue
        if isinstance(node, (ast.Assert, ast.Call)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _bindings(stmts: list[ast.stmt]):
    """(value parts, names bound from them) of every statement that runs with `stmts` (nested defs excluded)."""
    for node in _region(stmts):
        if isinstance(node, ast.Assign):
            yield [node.value], {r for t in node.targets for r in _stored_roots(t)}
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and node.value is not None:
            yield [node.value] + ([node.target] if isinstance(node, ast.AugAssign) else []), _stored_roots(node.target)
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            yield [node.iter], _stored_roots(node.target)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                if item.optional_vars is not None:
                    yield [item.context_expr], _stored_roots(item.optional_vars)
        elif isinstance(node, ast.NamedExpr):
            yield [node.value], {node.target.id}
        elif isinstance(node, ast.comprehension):
            yield [node.iter], _stored_roots(node.target)
        elif isinstance(node, ast.Call):
            receivers = {r for a in list(node.args) + ([node.func.value] if isinstance(node.func, ast.Attribute)
                                                       else []) for r in [_root_name(a)] if r}
            if receivers:
                yield [node], receivers


def _stored_roots(target: ast.AST) -> set[str]:
    if isinstance(target, (ast.Tuple, ast.List)):
        return {r for t in target.elts for r in _stored_roots(t)}
    root = _root_name(target)
    return {root} if root else set()


def _spread(stmts: list[ast.stmt], cand: set[str], vals: set[str], asserting: set[str]) -> None:
    """Add to `cand`, `vals` and `asserting` what the statements bind (to a fixpoint: loops feed back)."""
    for _ in range(20):
        before = (len(cand), len(vals), len(asserting))
        for parts, bound in _bindings(stmts):
            if any(_exercises(p, cand, vals) for p in parts):
                vals |= bound - cand
            elif any(_mentions(p, cand) for p in parts):
                cand |= bound
        for node in _region(stmts):
            name = node.name if isinstance(node, _DEFS) else _lambda_binding(node)
            if name is None:
                continue
            fn = node if isinstance(node, _DEFS) else node.value
            if _mentions(fn, cand | vals):
                cand.add(name)
            if _unit_is_test(fn.body if isinstance(fn.body, list) else [ast.Expr(fn.body)], cand, vals, asserting):
                asserting.add(name)
        if (len(cand), len(vals), len(asserting)) == before:
            return


def _unit_is_test(stmts: list[ast.stmt], cand: set[str], vals: set[str], asserting: set[str]) -> bool:
    for node in _verdict_nodes(stmts):
        if isinstance(node, ast.Assert):
            test = _prune_expr(node.test)
            if const_truth(test) is None and _exercises(test, cand, vals):
                return True
        elif isinstance(node.func, ast.Name) and node.func.id in asserting:
            return True
    return False


def check_units(module: ast.Module, entry_point: str, context: Sequence[str] = ()
                ) -> tuple[str, list[tuple[str, ast.stmt]], list[ast.stmt]]:
    """Split a parsed test file into units: (the name the tests call the candidate by, [(kind, statement)] with
    kind 'test' or 'setup' (see above), the statements of the file that join the context).

    The units are the statements of `check(candidate)`, or, without a `check`, the file's top-level statements
    other than functions and classes (MBPP style, the entry point called by name). Docstrings are left out, and
    so is everything after a statement that always ends `check` (a `return`, a `raise`). The statements are
    returned as parsed; they are classified on a copy reduced to what can run."""
    import copy
    check = next((n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == "check"), None)
    if check is not None:
        body = check.body
        args = check.args.posonlyargs + check.args.args
        param = args[0].arg if args else "candidate"
        rest = [n for n in module.body if n is not check]
    else:
        body = [n for n in module.body if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
        param = entry_point
        rest = [n for n in module.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    cand, vals, asserting = {param, entry_point}, set(), set()
    outer = []
    for src in context:
        try:
            outer += parse_python(src).body
        except PARSE_ERRORS:
            pass
    outer = [n for n in copy.deepcopy(outer + rest)
             if not (isinstance(n, _DEFS) and n.name == entry_point)]   # the prompt's own stub of the entry point
    _spread(outer, cand, vals, asserting)
    vals.clear()   # values of the file's top level are computed before the candidate exists
    units = []
    for stmt in body:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue  # docstrings and bare strings
        if isinstance(stmt, ast.Return):
            break
        live = _prune_block([copy.deepcopy(stmt)])
        _spread(live, cand, vals, asserting)
        units.append(("test" if _unit_is_test(live, cand, vals, asserting) else "setup", stmt))
        if live and _ends(live[-1]) and not isinstance(live[-1], (ast.Continue, ast.Break)):
            break
    return param, units, rest
