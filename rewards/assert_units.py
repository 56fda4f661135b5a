"""Which units of a test file are tests (`check_units`): an assert that can run and exercises the candidate is a
test, every other statement setup (the rules are below). No code is run here; `rewards.sandbox.TestSuite.from_check`
makes a suite of the units.
"""

from __future__ import annotations

import ast
import builtins
import copy
from typing import Sequence

from rewards.cleaning import PARSE_ERRORS, parse_python
from rewards.liveness import DEFS, const_truth, ends, lambda_binding, prune_block, prune_expr, region, root_name


# --------------------------------------------------------------------------------------- tests of a check
#
# A test is an assert, or a statement holding asserts (a loop, an if, a with, ...), that exercises the
# candidate: it can run (`rewards.liveness`; an assert inside a nested function counts only through a call of
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
    for node in region(stmts):
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
                                                       else []) for r in [root_name(a)] if r}
            if receivers:
                yield [node], receivers


def _stored_roots(target: ast.AST) -> set[str]:
    if isinstance(target, (ast.Tuple, ast.List)):
        return {r for t in target.elts for r in _stored_roots(t)}
    root = root_name(target)
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
        for node in region(stmts):
            name = node.name if isinstance(node, DEFS) else lambda_binding(node)
            if name is None:
                continue
            fn = node if isinstance(node, DEFS) else node.value
            if _mentions(fn, cand | vals):
                cand.add(name)
            if _unit_is_test(fn.body if isinstance(fn.body, list) else [ast.Expr(fn.body)], cand, vals, asserting):
                asserting.add(name)
        if (len(cand), len(vals), len(asserting)) == before:
            return


def _unit_is_test(stmts: list[ast.stmt], cand: set[str], vals: set[str], asserting: set[str]) -> bool:
    for node in _verdict_nodes(stmts):
        if isinstance(node, ast.Assert):
            test = prune_expr(node.test)
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
             if not (isinstance(n, DEFS) and n.name == entry_point)]   # the prompt's own stub of the entry point
    _spread(outer, cand, vals, asserting)
    vals.clear()   # values of the file's top level are computed before the candidate exists
    units = []
    for stmt in body:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue  # docstrings and bare strings
        if isinstance(stmt, ast.Return):
            break
        live = prune_block([copy.deepcopy(stmt)])
        _spread(live, cand, vals, asserting)
        units.append(("test" if _unit_is_test(live, cand, vals, asserting) else "setup", stmt))
        if live and ends(live[-1]) and not isinstance(live[-1], (ast.Continue, ast.Break)):
            break
    return param, units, rest
