"""Generated asserts that the judge decides on plain data: which ones, and the suite that runs them.

A test a model wrote is untrusted code. Run next to the candidate (in the sandboxed child) it shares the process
with the program it judges, so the program decides its verdict: an object whose `__eq__` is always True, a
function that reads the expected value from its caller's frame, a program that patches the child's protocol
(`__main__.frame`) all pass. And the test sees the program's globals, so it can inspect the program instead of
calling it (`'aux' in globals()`, `f.__doc__ is None`).

So a generated assert counts only when it is a *judged test*: an expression over the values of candidate calls
that the judge (the sandbox worker) evaluates itself, every call of the candidate being a remote call whose value
comes back as plain data (exact builtin types; `rewards._sandbox_worker`), in a namespace that holds the
candidate, a few pure builtins and `math`, and nothing of the program. `judged_test` accepts an assert when its
expression is built only from
- literals and displays (list, tuple, set, dict), and constant arithmetic the compiler folds (`3 * 19`),
- calls of the entry point (positional and keyword arguments, themselves judged expressions),
- the pure builtins of `SAFE_CALLS` and the `math` functions of `SAFE_MATH`, and the type names of `SAFE_TYPES`
  (as arguments: `isinstance(f(x), int)`),
- comparisons, `and` / `or` / `not`, unary `-` / `+` / `~`, conditional expressions, subscripts and slices,
- `+ - / // & | ^` on computed values (not `*`, `**`, `%`, `<<`: a value of the program times a big number, or
  a format string of the program, is a memory or CPU bomb in the judge),
and calls the entry point at least once. Anything else (attributes other than `math.<name>`, other names,
lambdas, comprehensions, f-strings, walrus, `*args`) is refused: the judge runs in the worker, shared by every
program of its slot, and what it evaluates must stay small, fast and pure. The assert's message is dropped.

`stub_programs` are the junk the rewards hold tests against: a test that a function returning junk passes (for two
kinds of junk) holds whatever a code computes (`f(x) == f(x)`), so it is vacuous.
"""

from __future__ import annotations

import ast
import inspect
from typing import Sequence

from rewards.cleaning import PARSE_ERRORS, compile_tree, parse_python
from rewards.sandbox import TestSuite

MAX_TEST_CHARS = 4000   # a generated assert longer than this is not judged (the judge compiles and runs it)
SAFE_CALLS = frozenset({"abs", "len", "sorted", "round", "sum", "min", "max", "all", "any", "bool", "int", "float",
                        "str", "list", "tuple", "isinstance"})
SAFE_TYPES = frozenset({"int", "float", "str", "bool", "list", "tuple", "dict", "set", "frozenset", "bytes",
                        "complex"})
SAFE_MATH = frozenset({"isclose", "isnan", "isinf", "isfinite", "fabs", "floor", "ceil", "sqrt", "pi", "e", "inf",
                       "nan"})
# keyword arguments of the safe calls (none of the others takes any: no `key=`, which would take a function)
SAFE_KEYWORDS = {"sorted": {"reverse"}, "isclose": {"rel_tol", "abs_tol"}}
# operators on computed values; any operator is fine between literals the compiler folds to one constant
SAFE_BINOPS = (ast.Add, ast.Sub, ast.Div, ast.FloorDiv, ast.BitAnd, ast.BitOr, ast.BitXor)
SAFE_UNARY = (ast.Not, ast.USub, ast.UAdd, ast.Invert)
JUDGE_CONTEXT = ("import math",)
_ONE_CONSTANT = compile("0", "<c>", "eval").co_code   # the code of an expression folded to one constant


class _Refused(Exception):
    """The assert holds something the judge does not evaluate."""


def judged_test(entry_point: str, test: str) -> str | None:
    """Return the source of `test` (one `assert` statement) as the judge runs it, its message dropped, or None when
    the judge cannot decide it on plain data (module docstring: what is accepted)."""
    if len(test) > MAX_TEST_CHARS or entry_point in SAFE_CALLS | SAFE_TYPES | {"math"}:
        return None
    try:
        module = parse_python(test)
        if len(module.body) != 1 or not isinstance(module.body[0], ast.Assert):
            return None
        expr = module.body[0].test
        if not _Checker(entry_point).calls(expr):
            return None
        judged = ast.unparse(ast.Assert(test=expr, msg=None))
    except (_Refused, *PARSE_ERRORS):
        return None
    # the bound holds for the form the judge runs too: unparsing widens a compact assert (`[1,2]` -> `[1, 2]`),
    # and a judged test must be judged again as itself (a group's pools are merged by judging them once more)
    return judged if len(judged) <= MAX_TEST_CHARS else None


def judged_suite(problem_entry_point: str, tests: Sequence[str]) -> TestSuite:
    """Return judged tests (sources from `judged_test`) as a judged suite: the judge evaluates each one in a fork
    bounded as a program is (`rewards._sandbox_worker._Judge`), the candidate's calls being remote calls answered
    with plain data."""
    return TestSuite(problem_entry_point, tuple(("test", t, t) for t in tests), JUDGE_CONTEXT, "candidate",
                     trusted=True, judged=True)


# The bodies of the junk stubs: None for every call, and a string naming the call's arguments (a different value for
# different arguments, so a test comparing two different calls, `f(a, b) == f(b, a)`, is not vacuous).
STUB_BODIES = ("return None", "return 'junk' + repr((args, kwargs))")


def stub_programs(entry_point: str) -> list[str]:
    """Return the programs whose entry point answers junk whatever it is given (`STUB_BODIES`): a test that both
    pass holds whatever the code computes (`f(x) == f(x)`), so it proves nothing about a code."""
    return [f"def {entry_point}(*args, **kwargs):\n    {body}\n" for body in STUB_BODIES]


# Appended to a correct program: its entry point's results changed to other values of the same type, each by an
# amount that depends on the call's arguments (so that `f(1, 2) == f(2, 1)` still tells it apart), except on the
# calls in SHOWN (the prompt's examples, for the memoriser). Only the outermost call is changed: the reference's
# calls of itself get the real results.
_TYPED_JUNK = '''

def _junk_key(*args, **kwargs):
    return repr((args, sorted(kwargs.items())))


def _junk_wrap(real, shown, type=type, repr=repr, len=len, sorted=sorted, enumerate=enumerate, ord=ord,
               reversed=reversed, list=list, tuple=tuple, dict=dict, set=set, frozenset=frozenset, bool=bool,
               int=int, float=float, complex=complex, str=str, bytes=bytes):
    depth = [0]

    def changed(v, salt, d=0):
        t = type(v)
        if d > 30:
            return v
        if v is None:
            return "Zq" + str(salt)
        if t is bool:
            return not v
        if t is int or t is complex:
            return v + 1 + salt
        if t is float:   # a big float absorbs the shift: then its negation (and 0.0 for nan and inf)
            w = v + 1.5 + salt if v == v and v - v == 0 else 0.5
            return w if w != v else -v - 1.0
        if t is str:   # nothing of the value kept: `'a' in f(x)` tells it apart
            return "Zq" + str(salt)
        if t is bytes:
            return b"Zq" + str(salt).encode()
        if t is list or t is tuple:
            items = [changed(x, salt + i + 1, d + 1) for i, x in enumerate(reversed(v))]
            return t(items + items[:1] if items else [salt])
        if t is dict:
            return {k: changed(x, salt + 1, d + 1) for k, x in v.items()} if v else {salt: salt}
        if t is set or t is frozenset:
            return t([changed(x, salt + 1, d + 1) for x in v] + [salt])
        return v

    def entry(*args, **kwargs):
        depth[0] += 1
        try:
            value = real(*args, **kwargs)
        finally:
            depth[0] -= 1
        key = _junk_key(*args, **kwargs)
        if depth[0] or key in shown:
            return value
        return changed(value, 1 + sum([(i + 1) * ord(c) for i, c in enumerate(key)]) % 997)
    return entry


ENTRY = _junk_wrap(ENTRY, frozenset([SHOWN]))
'''


def typed_junk_program(correct_source: str, entry_point: str, shown_calls: Sequence[str] = ()) -> str | None:
    """Return a program whose entry point answers every call with a value of the type a correct code returns, but
    another value (`correct_source`: a correct program's source, the reference), except on `shown_calls` (sources
    of calls, `f('ab')`: the prompt's examples), where it answers right. None when a shown call is not a call of
    the entry point with plain arguments. A test it passes holds of a code that returns the right type and the
    wrong values (a type check, `f(x) is not None`, a guarded tautology); with the examples shown, a test it passes
    holds of a code that memorises them."""
    keys = []
    for call in shown_calls:
        try:
            node = parse_python(call).body[0].value
        except (*PARSE_ERRORS, IndexError, AttributeError):
            return None
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == entry_point):
            return None
        node.func.id = "_junk_key"
        keys.append(ast.unparse(node))
    return correct_source.rstrip("\n") + "\n" + _TYPED_JUNK.replace("ENTRY", entry_point).replace(
        "SHOWN", ", ".join(keys))


# Appended to a wrong code: each top-level call of its entry point runs the reference too (in a namespace of its
# own), and a result of another kind than the reference's (None for a number, a string for a list, a list of
# strings for a list of numbers) raises instead of returning: such a result is caught by a type check, `is not
# None` or a guarded tautology, as a code that raises is caught by any call, so it is no catch on its values.
_TYPED_TWIN = '''

import builtins as _twin_builtins
import copy as _twin_copy
_twin_reference = {"__name__": "_twin_reference"}
_twin_builtins.exec(_twin_builtins.compile(REFERENCE, "<reference>", "exec"), _twin_reference)


def _twin_wrap(real, reference, B=_twin_builtins):
    # the builtins by their module (the wrong code's imports may rebind their names here)
    type, len, next, iter, BaseException = B.type, B.len, B.next, B.iter, B.BaseException
    bool, int, float, complex, str, bytes = B.bool, B.int, B.float, B.complex, B.str, B.bytes
    list, tuple, set, frozenset, dict = B.list, B.tuple, B.set, B.frozenset, B.dict
    KindError = B.type("KindError", (B.Exception,), {})
    depth = [0]
    kinds = {bool: "bool", int: "number", float: "number", complex: "number", str: "str", bytes: "bytes",
             list: "sequence", tuple: "sequence", set: "set", frozenset: "set", dict: "dict", type(None): "none"}

    def alike(a, b, d=0):
        # of one kind, and so are their first items (keys and values), three levels down
        ka, kb = kinds.get(type(a), "other"), kinds.get(type(b), "other")
        if ka != kb:
            return False
        if d > 2 or ka not in ("sequence", "set", "dict") or not len(a) or not len(b):
            return True
        if ka == "dict":
            (x, y), (u, v) = next(iter(a.items())), next(iter(b.items()))
            return alike(x, u, d + 1) and alike(y, v, d + 1)
        return alike(next(iter(a)), next(iter(b)), d + 1)

    def entry(*args, **kwargs):
        if depth[0]:
            return real(*args, **kwargs)
        try:
            want = reference(*_twin_copy.deepcopy(args), **_twin_copy.deepcopy(kwargs))
        except BaseException:
            want = ()   # the reference raises here: no kind to hold the result to
        depth[0] += 1
        try:
            value = real(*args, **kwargs)
        finally:
            depth[0] -= 1
        if want != () and not alike(value, want):
            raise KindError("a result of another kind than a correct code's")
        return value
    return entry


ENTRY = _twin_wrap(ENTRY, _twin_reference[ENTRY_NAME])
'''


def typed_twin_program(wrong_source: str, correct_source: str, entry_point: str) -> str:
    """Return `wrong_source` with its entry point raising where its result is of another kind than the correct
    program's on the same call (`_TYPED_TWIN`): a test then rejects it on its values only for a wrong value of the
    right kind (for None, a test that checks only `is not None` or a type rejects it as well: no catch)."""
    twin = _TYPED_TWIN.replace("ENTRY_NAME", repr(entry_point)).replace("ENTRY", entry_point)
    return wrong_source.rstrip("\n") + "\n" + twin.replace("REFERENCE", repr(correct_source))


def _spec_category(value, isinstance=isinstance):
    """The kind of an argument, as coarse as a spec is: numbers are one kind, lists and tuples another. Its source
    goes into the guard the sandbox runs too (`_SPEC_GUARD`), so that the spec and the guard judge alike."""
    for kinds, name in (((bool, int, float, complex), "number"), ((str,), "str"), ((bytes, bytearray), "bytes"),
                        ((list, tuple), "sequence"), ((dict,), "dict"), ((set, frozenset), "set")):
        if isinstance(value, kinds):
            return name
    return "none" if value is None else "other"


_SPEC_CATEGORY_SOURCE = inspect.getsource(_spec_category)


def parameters(prompt: str, entry_point: str) -> tuple[str, ...]:
    """The names of the entry point's positional parameters, as the prompt's `def` gives them (() without one)."""
    try:
        tree = parse_python(prompt)
    except PARSE_ERRORS:
        return ()
    node = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == entry_point), None)
    return () if node is None else tuple(p.arg for p in node.args.posonlyargs + node.args.args)


def _arguments(call: ast.Call, params: Sequence[str]) -> list[tuple[int | str, ast.expr]]:
    """(where, value) of a call's arguments: a keyword argument that names a positional parameter (`params`) by
    its position, as a positional one is, so that `f(n=-1)` and `f(-1)` are the same argument."""
    return [*enumerate(call.args), *((params.index(k.arg) if k.arg in params else k.arg, k.value)
                                     for k in call.keywords)]


def _by_name_too(spec: dict, params: Sequence[str]) -> dict:
    """`spec` (by argument position or keyword) with each positional parameter's entry under its name too: a call
    that passes it by keyword is judged as one that passes it by position."""
    return {**spec, **{params[where]: value for where, value in spec.items()
                       if type(where) is int and where < len(params)}}


def spec_kinds(check: str, entry_point: str, params: Sequence[str] = ()) -> dict[int | str, frozenset[str]]:
    """Return, for each argument (its position, or its name when passed by keyword), the kinds of value the hidden
    check passes there (`_spec_category`), where every call of the candidate in `check` passes it a literal; an argument
    some call passes a computed value (or `*args`) is left out: any kind may be on the spec there. `params`: the
    entry point's positional parameters (`parameters`), whose kinds are given by position and by name."""
    try:
        tree = parse_python(check)
    except PARSE_ERRORS:
        return {}
    kinds: dict[int | str, set[str]] = {}
    free: set[int | str] = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("candidate", entry_point)):
            continue
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            return {}
        for where, arg in _arguments(node, params):
            try:
                kinds.setdefault(where, set()).add(_spec_category(ast.literal_eval(arg)))
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                free.add(where)
    return _by_name_too({where: frozenset(k) for where, k in kinds.items() if where not in free}, params)


def _numeric_literals(tree: ast.AST, entry_point: str, params: Sequence[str] = ()
                      ) -> dict[int | str, list[float]] | None:
    """The literal numbers (not bools) each argument of the calls of the entry point (or `candidate`) in `tree`
    gets, by position or keyword (`_arguments`); an argument some call passes another value is left out. None
    when a call passes `*args` or `**kwargs`."""
    values: dict[int | str, list[float]] = {}
    other: set[int | str] = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("candidate", entry_point)):
            continue
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            return None
        for where, arg in _arguments(node, params):
            try:
                value = ast.literal_eval(arg)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                value = None
            if type(value) in (int, float) and value == value:
                values.setdefault(where, []).append(value)
            else:
                other.add(where)
    return {where: v for where, v in values.items() if where not in other}


def spec_ranges(check: str, entry_point: str, params: Sequence[str] = ()) -> dict[int | str, tuple[float, float]]:
    """Return, for each argument that every call of the hidden check passes a literal number, the range of those
    numbers (min, max): the values the spec is known to take there. `params`: the entry point's positional
    parameters (`parameters`), whose ranges are given by position and by name (`f(n=-1)` is `f(-1)`)."""
    try:
        found = _numeric_literals(parse_python(check), entry_point, params)
    except PARSE_ERRORS:
        return {}
    return _by_name_too({where: (min(v), max(v)) for where, v in (found or {}).items()}, params)


def off_spec_range(test: str, entry_point: str, ranges: dict[int | str, tuple[float, float]]) -> bool:
    """Return whether `test` calls the entry point with a literal number outside the range the hidden check takes
    for that argument (`spec_ranges`): an input the prompt may exclude (`n <= 0` where it says n is at least 1),
    on which no code's answer is known to be right or wrong."""
    if not ranges:
        return False
    try:
        tree = parse_python(test)
    except PARSE_ERRORS:
        return False
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == entry_point):
            continue
        for where, arg in [*enumerate(node.args), *((k.arg, k.value) for k in node.keywords if k.arg)]:
            if where not in ranges or isinstance(arg, ast.Starred):
                continue
            try:
                value = ast.literal_eval(arg)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                continue
            low, high = ranges[where]
            if type(value) in (int, float) and not low <= value <= high:
                return True
    return False


_SPEC_GUARD = '''

CATEGORY

def _spec_wrap(real, kinds, kind=_spec_category, TypeError=TypeError):
    depth = [0]

    def entry(*args, **kwargs):
        if not depth[0]:
            for where, v in [*enumerate(args), *kwargs.items()]:
                if where in kinds and kind(v) not in kinds[where]:
                    raise TypeError("an argument off the spec")
        depth[0] += 1
        try:
            return real(*args, **kwargs)
        finally:
            depth[0] -= 1
    return entry


ENTRY = _spec_wrap(ENTRY, KINDS)
'''


def spec_guarded_program(correct_source: str, entry_point: str, kinds: dict[int | str, frozenset[str]]
                         ) -> str | None:
    """Return a correct program that raises TypeError on a call passing an argument of a kind the hidden check
    never passes there (`spec_kinds`), or None when the check constrains no argument. It passes every hidden test,
    so it is correct: a test that pins what the reference does off the spec (`f(['x', 'x']) == 'x2'` for a
    function of a string) rejects it, and is wrong."""
    if not kinds:
        return None
    spec = "{" + ", ".join(f"{where!r}: frozenset({sorted(k)!r})" for where, k in sorted(
        kinds.items(), key=lambda item: str(item[0]))) + "}"
    guard = _SPEC_GUARD.replace("ENTRY", entry_point).replace("KINDS", spec).replace("CATEGORY", _SPEC_CATEGORY_SOURCE)
    return correct_source.rstrip("\n") + "\n" + guard


class _Checker:
    """Walks an assert's expression; raises _Refused at the first node the judge does not take."""

    def __init__(self, entry_point: str):
        self.entry_point = entry_point
        self.n_calls = 0

    def calls(self, expr: ast.expr) -> int:
        """Return how many calls of the entry point `expr` makes (raise _Refused when it is not judged)."""
        self.check(expr)
        return self.n_calls

    def check(self, node: ast.AST) -> None:
        if isinstance(node, ast.Constant):
            return
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            return self.each(node.elts)
        if isinstance(node, ast.Dict):
            if any(k is None for k in node.keys):
                raise _Refused("** in a dict")
            return self.each(node.keys + node.values)
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, ast.Name):
            if node.id not in SAFE_TYPES:    # the candidate and the safe functions are only called
                raise _Refused(node.id)
            return
        if isinstance(node, ast.Attribute):
            return self.math_name(node)
        if isinstance(node, ast.BinOp):
            if isinstance(node.op, SAFE_BINOPS):
                return self.each([node.left, node.right])
            if _folds(node):   # one constant, nothing in it to check: its operands are never compiled again,
                return         # so the gate compiles each part of a test at most once (it is linear in the size)
            raise _Refused("operator")
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, SAFE_UNARY):
            return self.check(node.operand)
        if isinstance(node, ast.BoolOp):
            return self.each(node.values)
        if isinstance(node, ast.Compare):
            return self.each([node.left, *node.comparators])
        if isinstance(node, ast.IfExp):
            return self.each([node.test, node.body, node.orelse])
        if isinstance(node, ast.Subscript):
            return self.each([node.value, node.slice])
        if isinstance(node, ast.Slice):
            return self.each([part for part in (node.lower, node.upper, node.step) if part is not None])
        raise _Refused(type(node).__name__)

    def each(self, nodes: Sequence[ast.AST]) -> None:
        for node in nodes:
            self.check(node)

    def math_name(self, node: ast.Attribute) -> str:
        if not (isinstance(node.value, ast.Name) and node.value.id == "math" and node.attr in SAFE_MATH):
            raise _Refused("attribute")
        return node.attr

    def call(self, node: ast.Call) -> None:
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            raise _Refused("*args")
        func = node.func
        if isinstance(func, ast.Name) and func.id == self.entry_point:
            self.n_calls += 1
        else:
            name = self.math_name(func) if isinstance(func, ast.Attribute) else (
                func.id if isinstance(func, ast.Name) and func.id in SAFE_CALLS else None)
            if name is None:
                raise _Refused("call")
            if any(k.arg not in SAFE_KEYWORDS.get(name, ()) for k in node.keywords):
                raise _Refused("keyword")
            if name == "round" and len(node.args) > 1 and not _small_int(node.args[1]):
                raise _Refused("round's digits")   # round(x, -10**9) computes 10**(10**9)
            if name in ("int", "float", "str", "list", "tuple", "bool", "sum") and len(node.args) > 1:
                raise _Refused("two arguments")    # sum(lists, []) is quadratic; int(s, base) is not needed
        self.each([*node.args, *(k.value for k in node.keywords)])


def _folds(node: ast.expr) -> bool:
    """Return True when the compiler folds `node` to one constant (it does so only within its size limits)."""
    try:
        code = compile_tree(ast.fix_missing_locations(ast.Expression(node)), "<c>", "eval")
    except PARSE_ERRORS:
        return False
    return code.co_code == _ONE_CONSTANT and not code.co_names


def _small_int(node: ast.expr) -> bool:
    try:
        value = ast.literal_eval(node)
    except PARSE_ERRORS + (TypeError,):
        return False
    return type(value) is int and abs(value) <= 64
