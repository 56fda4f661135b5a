"""The cooperation checks of the reward, on the AST of main's code that can run (`rewards.liveness.live_code`; no
code is run here): `calls_aux`, `is_thin_wrapper`, `ignores_aux_return`, and `cooperation`, all three from one
parse. The last two rest on a small data-flow analysis (`_Flow`, at most `FLOW_STEPS` steps).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any

from rewards.cleaning import PARSE_ERRORS, find_def, parse_python
from rewards.liveness import DEFS, const_truth, lambda_binding, live_code, root_name


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
        elif isinstance(node, DEFS) and node is not fn:
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
                root = root_name(a)
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
            root = root_name(target)
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
        if isinstance(s, DEFS):
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
        elif lambda_binding(node) is not None:
            found.setdefault(lambda_binding(node), []).append(node.value)
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
    node = find_def(tree, name)
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
