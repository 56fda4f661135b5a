"""The gate of verified cooperation: which pairs may be probed at all (`probe_gate`).

The probes (`rewards.coop_probes`) run the pair again with aux's results replaced, and the scored run, every probe
and the control run differ only in data inside the program's own process (the probe wrapper's mode). A program
that can read that data (aux's closure, the wrapper's frames or locals, the program's globals) can fail the
probes on purpose and collect the bonus with an aux that does no work. Searching the text for what is forbidden
does not hold: the text can build any name at run time (`getattr(f, '_' * 2 + 'globals' + '_' * 2)`,
`'{0.__globals__}'.format(f)`, `string.Formatter().get_field(...)`, `operator.attrgetter(...)`, a string
annotation evaluated by `typing.get_type_hints`).

So the gate is an allow-list of what a pure program may do, as the judged tests' is (`rewards.judged_tests`):

- every attribute is read by a name written in the code, and that name is a public attribute of a plain type
  (str, list, dict, ...) or of a class or function of an allowed module (`ATTRIBUTES`), minus those that read
  attributes, evaluate strings or read a clock (`DENIED`: `format` except on a literal format string whose fields
  name no attribute or item, `format_map`, `get_type_hints`, `attrgetter`, `now`, ...). No name starting with `_`;
  no frame, code, traceback or generator attribute can be named at all;
- every name that is not bound by the pair's own functions is a pure builtin (`BUILTINS`: no getattr, vars, dir,
  globals, eval, exec, compile, open, id, hash, __import__, ...), aux, the entry point, a helper of the prompt,
  or a name an allowed import binds (scopes resolved by the compiler's own `symtable`, so a name bound in main
  does not make the same name in aux safe);
- imports come from `SAFE_MODULES` only (plain computation: no frames, no introspection, no clock, no files),
  and `from m import name` takes only an allowed member;
- no class, no `global`, no `async`, no `match` (a class pattern reads attributes by name), `type(...)` with one
  argument only (three build a class), `is` only against a constant;
- main uses aux only by calling it (or by handing it to the builtin `map`, `filter`, `sorted`, `min`, `max`,
  which it may not rebind), and calls it somewhere.

With no attribute read by a computed name and no reflective builtin or module, nothing the program can reach says
which run it is: the wrapper, its mode and the frames above the program are out of reach.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import importlib
import re
import string
import symtable
import types
from typing import Iterable, Sequence

from rewards.cleaning import PARSE_ERRORS, _AST_LOCK, parse_python

# Modules a main or aux may import and still be probed: plain computation only.
SAFE_MODULES = frozenset({
    "math", "cmath", "re", "string", "collections", "itertools", "functools", "heapq", "bisect", "typing",
    "statistics", "fractions", "decimal", "copy", "datetime", "calendar", "numbers", "unicodedata", "textwrap",
    "array", "hashlib", "json", "difflib", "fnmatch", "operator"})
# Names that read attributes by a computed name, evaluate strings, build classes or dispatch on annotations, or
# read a clock: refused as attributes and as imported members, whatever holds them.
DENIED = frozenset({
    "format", "format_map", "Formatter", "get_field", "vformat", "get_value", "attrgetter", "methodcaller",
    "get_type_hints", "ForwardRef", "singledispatch", "singledispatchmethod", "register", "mro", "now", "today",
    "utcnow", "with_traceback", "NamedTuple", "TypedDict", "cast", "call", "update_wrapper", "wraps",
    # its memo maps each object's id to its copy: `id` by another name, which tells whether main got the very object
    # aux returned (the probes hand main another)
    "deepcopy",
    # draws from the process's random state (seeded from the OS): a verdict that differs from run to run, which a
    # main could make slow or wrong in some runs only
    "samples"})
# Builtins of plain computation (exceptions are added below).
_PURE_BUILTINS = {
    "abs", "all", "any", "ascii", "bin", "bool", "bytearray", "bytes", "callable", "chr", "complex", "dict",
    "divmod", "enumerate", "filter", "float", "format", "frozenset", "hex", "int", "isinstance", "issubclass",
    "iter", "len", "list", "map", "max", "min", "next", "oct", "ord", "pow", "print", "range", "repr",
    "reversed", "round", "set", "slice", "sorted", "str", "sum", "tuple", "type", "zip", "True", "False", "None",
    "NotImplemented", "Ellipsis"}
BUILTINS = frozenset(_PURE_BUILTINS | {
    name for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, BaseException) and not name.startswith("_")})
_PLAIN_TYPES = (str, bytes, bytearray, list, tuple, dict, set, frozenset, int, float, complex, bool, range, slice,
                type({}.keys()), type({}.values()), type({}.items()), type(re.compile("")), type(re.match("", "")),
                type(hashlib.md5()), BaseException)
_HIGHER_ORDER = frozenset({"map", "filter", "sorted", "min", "max"})   # builtins that may be handed aux
_ANY_MODULE = object()   # in `_module_members`: a member that is an allowed module itself


def _public(names: Iterable[str]) -> set[str]:
    return {n for n in names if not n.startswith("_")}


def _module_members(name: str) -> dict[str, object]:
    """The public members of an allowed module that a program may use: not DENIED, and no module outside the
    allow-list (statistics.sys, say)."""
    module = importlib.import_module(name)
    out = {}
    for member in _public(dir(module)) - DENIED:
        value = getattr(module, member, None)
        if isinstance(value, types.ModuleType):
            if value.__name__.split(".")[0] not in SAFE_MODULES:
                continue
            value = _ANY_MODULE
        out[member] = value
    return out


MEMBERS = {name: _module_members(name) for name in sorted(SAFE_MODULES)}


def _attributes() -> frozenset[str]:
    names = set()
    for t in _PLAIN_TYPES:
        names |= _public(dir(t))
    for module, members in MEMBERS.items():
        names |= set(members)
        if module == "typing":   # type hints only: their own attributes are not needed
            continue
        for value in members.values():
            if isinstance(value, type):
                names |= _public(dir(value))
    return frozenset(n for n in names - DENIED if not n.startswith(("f_", "tb_", "gi_", "cr_", "ag_", "co_")))


ATTRIBUTES = _attributes()


def probe_gate(aux_src: str, main_src: str, imports: Sequence[str], aux: str = "aux",
               helpers: Sequence[str] = ()) -> str:
    """Return why the probes cannot be trusted on this pair ('' when they can): either function, or an import line,
    does something a pure program does not (module doc). `imports` are the program's import lines (the prompt's
    and the completions'); `helpers` the names of the functions the prompt defines."""
    trees = []
    for src in (aux_src, main_src, "\n".join(imports)):
        try:
            trees.append(parse_python(src))
        except PARSE_ERRORS:
            return "the code does not parse"
    aux_tree, main_tree, import_tree = trees
    bound = {aux, *helpers}
    for node in import_tree.body:
        why, names = _import(node)
        if why:
            return f"imports {why}"
        bound |= names
    for label, tree, src in (("aux", aux_tree, aux_src), ("main", main_tree, main_src)):
        why = _refused_node(tree) or _free_names(src, bound | _top_level_defs(aux_tree, main_tree))
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


def _import(node: ast.stmt) -> tuple[str, set[str]]:
    """(why the import line is refused or '', the names it binds)."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name.split(".")[0] not in SAFE_MODULES:
                return alias.name, set()
        return "", {(a.asname or a.name).split(".")[0] for a in node.names}
    if isinstance(node, ast.ImportFrom):
        module = node.module or ""
        if module == "__future__":
            return "", set()
        if node.level or module.split(".")[0] not in SAFE_MODULES:
            return module or ".", set()
        members = MEMBERS.get(module)
        for alias in node.names:
            if members is None or alias.name not in members:
                return f"{alias.name} from {module}", set()
        return "", {a.asname or a.name for a in node.names}
    return "a statement that is not an import", set()


def _top_level_defs(*trees: ast.Module) -> set[str]:
    return {n.name for tree in trees for n in tree.body if isinstance(n, ast.FunctionDef)}


def _refused_node(tree: ast.AST) -> str:
    """The first construct of `tree` a pure program does not use, described; '' when there is none."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            why, _ = _import(node)
            if why:
                return f"imports {why}"
        elif isinstance(node, ast.Attribute):
            if node.attr not in ATTRIBUTES and not _literal_format(node):
                return f"reads .{node.attr}"
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "__" in node.value:
            return "holds a dunder name in a string"
        elif isinstance(node, ast.ClassDef):
            return f"defines a class ({node.name})"
        elif isinstance(node, (ast.AsyncFunctionDef, ast.Await, ast.AsyncFor, ast.AsyncWith)):
            return "uses async code"
        elif isinstance(node, ast.Global):
            return f"declares global {', '.join(node.names)}"
        elif isinstance(node, ast.Match):
            return "uses a match statement"
        elif isinstance(node, ast.FunctionDef) and node.name.startswith("__"):
            return f"defines {node.name}"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "type" and \
                (len(node.args) != 1 or node.keywords):
            return "calls type with other than one argument"
        elif isinstance(node, ast.Compare):
            sides = [node.left] + node.comparators
            for op, a, b in zip(node.ops, sides, sides[1:]):
                if isinstance(op, (ast.Is, ast.IsNot)) and not (
                    isinstance(a, ast.Constant) or isinstance(b, ast.Constant)
                ):
                    return "compares two values with `is`"
    return ""


def _literal_format(node: ast.Attribute) -> bool:
    """True for `'<literal>'.format`, where no replacement field (format specs included) names an attribute or an
    item: `'{}-{:.2f}'.format(a, b)` is plain formatting, `'{0.x}'.format(f)` reads an attribute."""
    if node.attr != "format" or not isinstance(node.value, ast.Constant) or not isinstance(node.value.value, str):
        return False

    def plain(text: str, depth: int = 0) -> bool:
        try:
            fields = list(string.Formatter().parse(text))
        except (ValueError, TypeError):
            return False
        for _, field, spec, _ in fields:
            if field is not None and not re.fullmatch(r"\w*", field):
                return False
            if spec and (depth > 2 or not plain(spec, depth + 1)):
                return False
        return True

    return plain(node.value.value)


def _free_names(source: str, bound: set[str]) -> str:
    """The first name the code reads from the program's globals or the builtins that is neither bound (`bound`:
    aux, the entry point, helpers, imports) nor a pure builtin, described; scopes resolved by `symtable`."""
    try:
        with _AST_LOCK:
            table = symtable.symtable(source, "<pair>", "exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return "cannot be resolved into scopes"
    allowed = bound | BUILTINS
    todo = [table]
    while todo:
        scope = todo.pop()
        todo.extend(scope.get_children())
        top = scope.get_type() == "module"
        for symbol in scope.get_symbols():
            name = symbol.get_name()
            if symbol.is_declared_global():
                return f"declares global {name}"
            if top and (symbol.is_assigned() or symbol.is_imported() or symbol.is_namespace()):
                continue   # the function itself, or an import line checked by `_import`
            if symbol.is_referenced() and (top or symbol.is_global()) and name not in allowed:
                return f"uses {name}"
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
