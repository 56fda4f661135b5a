"""Verified cooperation (`code_reward.cooperation: verified`): the bonus is paid for what runs, not for what the
text of main says.

The seed's rule (`rewards.code_cleaning.cooperation`) reads main's code: it pays an aux that does no work (an
identity, a constant `''` joined to the answer, an aux that always raises inside main's `try`, a call in a branch
that never runs). Here the pair is run again with aux changed, and every verdict is a test verdict, decided in the
sandbox's worker from plain data (`rewards.sandbox`), never a record the program could write:

1. raise: aux replaced by a stub that raises. Some test that passed must now fail: aux is called while a
   passing test runs, and main cannot do without it (a `try` that falls back to main's own answer pays nothing).
2. passthrough: aux runs as it is, but main gets one of its arguments back instead of its result (each of its
   first `MAX_PARAMS` parameters, the first of `*args`, the first of `**kwargs`). Some test that passed must fail
   each time: aux's results are not a passthrough of one of its arguments (aux's side effects still happen, so a
   side channel from aux to main does not count as a result).
3. constant: aux's real results replaced by its first result, for every call of the run. Some test that passed
   must fail: aux's results are not one value for every call.
4. other values: each result replaced by another value of the same kind (`other` in `_WRAPPER`: a number
   scrambled, another string, the sequence reversed with each item changed, a bool negated). Some test that passed must fail: main needs
   what aux computes, not only that it was called.
5. control: the pair as it is, once more. Its verdicts must be those of the scored run: a program that fails
   tests by chance (a random bit, a clock) would otherwise fail the probes by chance.

Probes 2 and 3 behave exactly like the degenerate auxes they stand for (with an identity aux, the passthrough
probe returns the very object aux would), so no program can tell them apart. Probes 2-4 wrap the real aux: only
the results main sees are replaced (aux's calls of itself get the real ones), and a wrapper that cannot copy or
change a value (a structure too deep, a type it does not know) returns it unchanged, which makes the check fail,
never pass. The scored run of verified mode runs aux behind the same wrapper, passing every result through
(`scored_aux`), so that the probes and the scored run have the same frames and names. What a program could use to see the probes at all (reading aux as an
object rather than calling it, introspection, frames, dunders, `is` between two computed values, clocks, random
numbers, string hashes, imports outside a plain-computation allow-list) is refused up front by `probe_gate`: no
bonus. The bonus is then scaled by the
share of tests passed, so a main that passes 1 test of 8 while branching on aux cannot outscore a correct main
that does not call aux.
"""

from __future__ import annotations

import ast
import re
from typing import Callable, Sequence

from rewards.code_cleaning import PARSE_ERRORS, parse_python

MODES = ("seed", "verified")
MAX_PARAMS = 3          # passthrough probes tried: aux's first parameters

# Modules a main or aux may import and still be probed: plain computation only (no frames, no introspection,
# no process, file or clock access).
SAFE_MODULES = frozenset({
    "math", "cmath", "re", "string", "collections", "itertools", "functools", "heapq", "bisect", "typing",
    "statistics", "fractions", "decimal", "copy", "datetime", "calendar", "numbers", "unicodedata", "textwrap",
    "array", "hashlib", "enum", "dataclasses", "json", "difflib", "fnmatch", "operator"})
# Names that read or change the program from inside (namespaces, attributes by name, code, objects' identity), or
# that differ from run to run (clocks, hashes of strings), which would let a program fail a probe by chance.
_INTROSPECTIVE = frozenset({
    "hash", "now", "today", "utcnow", "random", "urandom", "SystemRandom",
    "globals", "locals", "vars", "dir", "eval", "exec", "compile", "open", "getattr", "setattr", "delattr",
    "hasattr", "breakpoint", "id", "memoryview", "input", "help", "attrgetter", "methodcaller", "sys", "os",
    "gc", "inspect", "builtins", "ctypes", "importlib", "traceback", "types", "time", "threading", "signal",
    "weakref", "marshal", "pickle", "dis", "resource", "subprocess", "io", "atexit", "faulthandler"})
_FRAME_PREFIXES = ("_", "f_", "tb_", "gi_", "cr_", "ag_", "co_")
_HIGHER_ORDER = frozenset({"map", "filter", "sorted", "min", "max"})   # builtins that may be handed aux


def probe_gate(aux_src: str, main_src: str, imports: Sequence[str], aux: str = "aux") -> str:
    """Return why the probes cannot be trusted on this pair ('' when they can): either function, or an import
    line of the completions, uses something a program could tell the probes apart with (see the module doc)."""
    trees = []
    for src in (aux_src, main_src, "\n".join(imports)):
        try:
            trees.append(parse_python(src))
        except PARSE_ERRORS:
            return "the code does not parse"
    aux_tree, main_tree, import_tree = trees
    for label, tree in (("aux", aux_tree), ("main", main_tree), ("imports", import_tree)):
        why = _introspection(tree)
        if why:
            return f"{label} {why}"
    if not any(isinstance(n, ast.Name) and n.id == aux for n in ast.walk(main_tree)):
        return f"main never names {aux}"
    for label, tree in (("main", main_tree), ("aux", aux_tree)):   # aux may call itself, and only that
        rebound = _bound_names(tree) & (_HIGHER_ORDER | {aux})
        if rebound - ({aux} if label == "aux" else set()):
            return f"{label} binds the name {sorted(rebound)[0]}"
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id == aux and not _calls_only(node, parents):
                return f"{label} uses {aux} as an object (line {node.lineno}), not only by calling it"
    return ""


def _introspection(tree: ast.AST) -> str:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            bad = [m for m in modules if m.split(".")[0] not in SAFE_MODULES]
            if bad:
                return f"imports {bad[0]}"
        elif isinstance(node, ast.Name) and (node.id in _INTROSPECTIVE or node.id.startswith(("__", "_coop"))):
            return f"uses {node.id}"
        elif isinstance(node, ast.Attribute) and (node.attr.startswith(_FRAME_PREFIXES) or node.attr in _INTROSPECTIVE):
            return f"reads .{node.attr}"
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "__" in node.value:
            return "holds a dunder name in a string"
        elif isinstance(node, ast.ClassDef):
            return f"defines a class ({node.name})"
        elif isinstance(node, ast.Global):
            return f"declares global {', '.join(node.names)}"
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("__"):
            return f"defines {node.name}"
        elif isinstance(node, ast.Compare):
            sides = [node.left] + node.comparators
            for op, a, b in zip(node.ops, sides, sides[1:]):
                if isinstance(op, (ast.Is, ast.IsNot)) and not (isinstance(a, ast.Constant) or isinstance(b, ast.Constant)):
                    return "compares two values with `is`"
    return ""


def _bound_names(tree: ast.AST) -> set[str]:
    """Every name `tree` binds: assignments, parameters, definitions, imports, handlers."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
    return names


def _calls_only(name: ast.Name, parents: dict) -> bool:
    """True when this occurrence of aux is a call of it, or an argument of the builtin map/filter/sorted/min/max
    (main does not rebind them: `probe_gate`)."""
    parent = parents.get(name)
    if isinstance(parent, ast.Call) and parent.func is name:
        return True
    if isinstance(parent, ast.keyword):
        parent = parents.get(parent)
    return isinstance(parent, ast.Call) and name is not parent.func and isinstance(parent.func, ast.Name) and \
        parent.func.id in _HIGHER_ORDER


# ------------------------------------------------------------------------------------------------ the probes

# Defined in the program after aux (so it rebinds the name `aux` that main and aux itself call). Plain Python run
# inside the sandboxed child; it decides nothing: the verdicts of the tests do.
_WRAPPER = '''
def _coop_probe_wrap(real, mode, type=type, len=len, reversed=reversed, tuple=tuple, list=list, all=all, zip=zip,
                     next=next, float=float, bool=bool, int=int, str=str, bytes=bytes, dict=dict, set=set,
                     frozenset=frozenset, complex=complex, ValueError=ValueError, BaseException=BaseException):
    # the builtins it uses are bound here, when the program loads: a main that rebinds a global `type` later
    # cannot change what the wrapper does
    first = []
    PLAIN = (bool, int, float, complex, str, bytes, list, tuple, dict, set, frozenset, type(None))

    def plain_copy(v, depth=0):
        t = type(v)
        if depth > 50:
            raise ValueError
        if t is list:
            return [plain_copy(x, depth + 1) for x in v]
        if t is dict:
            return {k: plain_copy(x, depth + 1) for k, x in v.items()}
        if t is set:
            return {plain_copy(x, depth + 1) for x in v}
        if t is tuple:
            return tuple(plain_copy(x, depth + 1) for x in v)
        return v

    def same(a, b, depth=0):
        # equal plain data of the same types (exact builtin types: no program-defined __eq__ runs); anything
        # else counts as the same, so that the probe keeps aux's own result (the conservative side)
        t = type(a)
        if depth > 50:
            raise ValueError
        if t is not type(b):
            return t not in PLAIN or type(b) not in PLAIN
        if t is list or t is tuple:
            return len(a) == len(b) and all(same(x, y, depth + 1) for x, y in zip(a, b))
        if t is dict:
            return a.keys() == b.keys() and all(same(a[k], b[k], depth + 1) for k in a)
        if t in PLAIN:
            return a == b
        return True

    def other(v, depth=0):
        # another value of the same kind that no shift, reordering or renaming undoes: numbers are scrambled
        # (not monotone, not one-to-one), a string becomes one of three short strings, containers change item
        # by item; None stays None (a marker inside a sequence)
        t = type(v)
        if depth > 50:
            raise ValueError
        if v is None:
            return None
        if t is bool:
            return not v
        if t is int:
            w = (v * 7 + 3) % 11 - 5
            return w if w != v else v + 1
        if t is float:
            if v != v or v in (float("inf"), float("-inf")):
                return 0.0
            w = (v * 7.0 + 3.0) % 11.0 - 5.0
            return w if w != v else v + 1.0
        if t is complex:
            return v + 1
        if t is str:
            return "Zq" + "xyz"[len(v) % 3]
        if t is bytes:
            return b"Zq" + b"xyz"[len(v) % 3:len(v) % 3 + 1]
        if t is list:
            return [other(x, depth + 1) for x in reversed(v)] or [0]
        if t is tuple:
            return tuple(other(x, depth + 1) for x in reversed(v)) or (0,)
        if t is set or t is frozenset:
            return t(other(x, depth + 1) for x in v) or t((0,))
        if t is dict:
            return {k: other(x, depth + 1) for k, x in v.items()} or {0: 0}
        raise ValueError

    def argument(args, kwargs):
        # the argument `mode` names, as the real aux received it (defaults included)
        kind = mode[1]
        if kind == "positional":
            index, name, npos = mode[2:]
            if index < len(args):
                return args[index]
            if name in kwargs:
                return kwargs[name]
            defaults = real.__defaults__ or ()
            return defaults[index - (npos - len(defaults))]
        if kind == "keyword":
            return kwargs[mode[2]] if mode[2] in kwargs else (real.__kwdefaults__ or {})[mode[2]]
        if kind == "star":
            return args[mode[2]] if len(args) > mode[2] else None
        return next((v for k, v in kwargs.items() if k not in mode[2]), None)

    depth = [0]

    def aux(*args, **kwargs):
        # only what main sees is replaced: aux's calls of itself get the real results
        depth[0] += 1
        try:
            value = real(*args, **kwargs)
        finally:
            depth[0] -= 1
        if depth[0] or mode[0] == "real":
            return value
        try:
            if mode[0] == "other":
                return other(value)
            if mode[0] == "constant":
                if not first:
                    first.append(plain_copy(value))
                stand_in = first[0]
            else:
                stand_in = argument(args, kwargs)
            # where the stand-in equals aux's own result, main gets aux's own object: the probe then differs from
            # the real run only in the calls where aux's result differs, and aliasing cannot tell them apart
            if same(value, stand_in):
                return value
            return plain_copy(stand_in) if mode[0] == "constant" else stand_in
        except BaseException:
            return value
    return aux


aux = _coop_probe_wrap(aux, MODE)
'''


def _stub(aux_src: str, aux: str, body: str) -> str | None:
    """aux's definition with the same parameters and `body` as its only statement; None when aux has no def."""
    try:
        tree = parse_python(aux_src)
    except PARSE_ERRORS:
        return None
    node = next((n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and n.name == aux), None)
    if node is None:
        return None
    # aux's own text from `def` to its first statement, then `body`: a splice, not `ast.unparse`, which recurses
    # once per level of an expression and raises on a deep default (`pad=1+1+...+1`, 400 terms); decorators
    # (above `def`) are left out
    lines = _LINE_END.split(aux_src)
    first = node.body[0]
    header = _text_between(lines, (node.lineno, node.col_offset), (first.lineno, first.col_offset))
    return header.rstrip() + "\n    " + body + "\n"


_LINE_END = re.compile(r"(?<=\n)|(?<=\r)(?!\n)")   # after the line ends `ast` counts (not str.splitlines's \f...)


def _text_between(lines: Sequence[str], start: tuple[int, int], end: tuple[int, int]) -> str:
    """The source between two AST positions ((1-based line, UTF-8 byte column), as `ast` gives them)."""
    def at(line: int, col: int) -> int:   # the position as a character index into "".join(lines)
        return sum(len(x) for x in lines[:line - 1]) + len(lines[line - 1].encode("utf-8")[:col].decode("utf-8"))
    return "".join(lines)[at(*start):at(*end)]


def _passthroughs(aux_src: str, aux: str) -> list[tuple[str, tuple]]:
    """(label, wrapper mode) of each argument aux could pass through: its first `MAX_PARAMS` parameters, the
    first of its `*args` and the first of its `**kwargs`."""
    node = next((n for n in parse_python(aux_src).body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and n.name == aux), None)
    if node is None:
        return []
    a = node.args
    positional = a.posonlyargs + a.args
    named = [p.arg for p in positional + a.kwonlyargs]
    out = [(f"argument {k + 1} ({p.arg})", ("pass", "positional", k, p.arg, len(positional)))
           for k, p in enumerate(positional)]
    out += [(f"argument {p.arg}", ("pass", "keyword", p.arg)) for p in a.kwonlyargs]
    out = out[:MAX_PARAMS]
    if a.vararg is not None:
        out.append((f"*{a.vararg.arg}", ("pass", "star", len(positional))))
    if a.kwarg is not None:
        out.append((f"**{a.kwarg.arg}", ("pass", "double star", tuple(named))))
    return out


def _wrapped(aux_src: str, mode: tuple) -> str:
    return aux_src.rstrip("\n") + "\n\n" + _WRAPPER.replace("MODE", repr(mode))


def scored_aux(aux_src: str, aux: str = "aux") -> str:
    """aux's source as verified mode's scored run uses it: behind the probes' wrapper, passing every result
    through unchanged, so that the scored run and every probe have the same frames, names and call path (a
    program that measured them, say by its recursion depth, would see no difference). aux_src itself when it
    has no top-level `def aux` (nothing to wrap)."""
    return _wrapped(aux_src, ("real",)) if _stub(aux_src, aux, "pass") is not None else aux_src


def probe_programs(aux_src: str, aux: str = "aux") -> list[tuple[str, str]]:
    """The probes of one aux, in the order they run: (name, what replaces aux's source in the program)."""
    probes: list[tuple[str, str]] = []
    raising = _stub(aux_src, aux, "raise RuntimeError('aux failed')")
    if raising is None:
        return []
    probes.append(("raise", _wrapped(raising, ("real",))))
    for label, mode in _passthroughs(aux_src, aux):
        probes.append((f"passthrough of {label}", _wrapped(aux_src, mode)))
    probes.append(("constant", _wrapped(aux_src, ("constant",))))
    probes.append(("other values", _wrapped(aux_src, ("other",))))
    # the pair as scored, once more: its verdicts must not change from run to run
    probes.append(("control", scored_aux(aux_src, aux)))
    return probes


REASONS = {
    "raise": "aux is not needed: the tests that pass still pass when aux raises",
    "constant": "aux's results are one value for every call, as far as the tests tell",
    "other": "main does not need what aux computes: the tests that pass still pass with other values",
}


def verify(aux_src: str, main_src: str, imports: Sequence[str], passed: Sequence[bool],
           run: Callable[[str], Sequence[bool]], aux: str = "aux") -> str:
    """Run the probes of one pair whose normal run passed the tests marked in `passed`; return '' when the
    cooperation is verified, else why not. `run(aux_source)` runs the program with aux's source replaced and
    returns the test verdicts (from the worker); probes stop at the first one that denies the bonus."""
    why = probe_gate(aux_src, main_src, imports, aux)
    if why:
        return f"not probed: {why}"
    probes = probe_programs(aux_src, aux)
    if not probes:
        return "not probed: aux has no def"
    for name, replacement in probes:
        verdicts = run(replacement)
        if len(verdicts) != len(passed):
            return f"probe {name}: the run did not finish"
        if name == "control":
            if list(verdicts) != list(passed):
                return "the pair's verdicts change from run to run: the probes cannot tell what aux does"
        elif not any(was and not now for was, now in zip(passed, verdicts)):
            return REASONS.get(name.split()[0], f"aux's results are a {name}, as far as the tests tell")
    return ""
