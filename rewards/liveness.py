"""What can run in a parsed function, judged statically (no code is run here): `const_truth` (the truth value an
expression always has) and `live_code` (a function reduced to the code that can run), with the AST walks that the
cooperation checks (`rewards.cooperation`) and the split of a check into tests (`rewards.assert_units`) share.
"""

from __future__ import annotations

import ast


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


def ends(stmt: ast.stmt) -> bool:
    """True when control never goes on past `stmt` (return, raise, continue, break, or all branches do)."""
    if isinstance(stmt, (ast.Return, ast.Raise, ast.Continue, ast.Break)):
        return True
    if isinstance(stmt, ast.If):
        return bool(stmt.body and stmt.orelse and ends(stmt.body[-1]) and ends(stmt.orelse[-1]))
    if isinstance(stmt, ast.While):
        return const_truth(stmt.test) is True and not _own_break(stmt)
    return False


def prune_expr(e: ast.expr) -> ast.expr:
    """Return `e` without the parts that cannot run (the unused side of a constant `x if c else y`, the operands
    after a short-circuiting constant in `and` / `or`); mutates the nodes."""
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
                setattr(node, field, prune_block(value))
            else:
                for i, item in enumerate(value):
                    if isinstance(item, ast.expr):
                        value[i] = prune_expr(item)
                    elif isinstance(item, ast.AST):
                        _prune_children(item)
        elif isinstance(value, ast.expr):
            setattr(node, field, prune_expr(value))
        elif isinstance(value, ast.AST):
            _prune_children(value)


def _prune_stmt(s: ast.stmt) -> list[ast.stmt]:
    if isinstance(s, ast.If) and not isinstance(s.test, ast.NamedExpr):
        t = const_truth(s.test)
        if t is not None:
            return prune_block(s.body if t else s.orelse)
    elif isinstance(s, ast.While) and not isinstance(s.test, ast.NamedExpr):
        t = const_truth(s.test)
        if t is False:
            return prune_block(s.orelse)
        if t is True:
            s.orelse = []
    elif isinstance(s, (ast.For, ast.AsyncFor)) and _empty_iterable(s.iter):
        return prune_block(s.orelse)
    _prune_children(s)
    return [s]


def prune_block(stmts: list[ast.stmt]) -> list[ast.stmt]:
    """The statements of a block that can run, constant branches flattened into it (mutates the nodes)."""
    out = []
    for s in stmts:
        for n in _prune_stmt(s):
            out.append(n)
            if ends(n):
                return out
    return out


DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def lambda_binding(node: ast.AST) -> str | None:
    """Return the name `node` binds a lambda to (`f = lambda x: ...`), or None when it is no such statement."""
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) and \
            isinstance(node.value, ast.Lambda):
        return node.targets[0].id
    return None


def region(root: ast.AST):
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
        if isinstance(node, DEFS):
            parts = list(node.decorator_list)
            if isinstance(node, ast.ClassDef):
                parts += list(node.bases) + [k.value for k in node.keywords]
            else:
                parts += list(node.args.defaults) + [d for d in node.args.kw_defaults if d is not None]
            stack.extend(reversed(parts))
        elif isinstance(node, ast.Lambda):
            stack.extend(reversed(list(node.args.defaults) + [d for d in node.args.kw_defaults if d is not None]))
        elif lambda_binding(node) is not None:
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
        for node in region(queue.pop()):
            inner = node if isinstance(node, DEFS) else (node.value if lambda_binding(node) else None)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Lambda):
                bare.append(node)   # a lambda as a statement: never called
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in loads:
                loads.add(node.id)
                for d in waiting.pop(node.id, []):
                    live.add(id(d))
                    queue.append(d)
            elif inner is not None:
                name = node.name if isinstance(node, DEFS) else lambda_binding(node)
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
    fn.body = prune_block(fn.body) or [ast.Pass()]
    _drop_uncalled(fn)
    return fn


def root_name(e: ast.AST) -> str | None:
    """Return the name at the root of `e` (`x` of `x.a[0].b` or `*x`), or None when it is not a name."""
    while isinstance(e, (ast.Attribute, ast.Subscript, ast.Starred)):
        e = e.value
    return e.id if isinstance(e, ast.Name) else None
