"""Verified cooperation (`code_reward.cooperation: verified`): the bonus is paid for what runs, not for what the
text of main says.

The seed's rule (`rewards.cooperation.cooperation`) reads main's code: it pays an aux that does no work (an
identity, a constant `''` joined to the answer, an aux that always raises inside main's `try`, a call in a branch
that never runs, an aux whose result main just inverts). Here the pair is run again with aux changed, and every
verdict is a test verdict, decided in the sandbox's worker from plain data (`rewards.sandbox`), never a record
the program could write:

1. raise: aux raises at every call of main's (the wrapper in its raise mode). Some test that passed must now
   fail: aux is called while a passing test runs, and main cannot do without it (a `try` that falls back to
   main's own answer pays nothing).
2. derived: aux runs; each call's result is judged by a rule (`moves_content` in `rewards.coop_wrapper`): aux is
   called once more with the characters of its arguments' strings and the ints inside its containers renamed
   (`moves_only`: not where the problem's answers only move ints), and once more with its int arguments
   changed too; a result that comes back renamed the same way only moves, wraps, re-encodes or re-joins what aux
   was given, whatever the shape. Numbers are read back (`readings`, `recipes`: digit forms, ratios, quotients, divmod,
   small affine maps, with constants the same on every call), and the transforms of the earlier list still
   count. On such a call main gets aux's own result; on any other, the parts that are arguments kept and the
   rest changed (`keep`), or with no such part aux's first argument. Some test that passed must fail: aux's
   results are not its arguments in a form main just undoes (aux's side effects still happen, so a side channel
   from aux to main does not count as a result).
3. constant: aux's real results replaced by its first result, for every call of the run. Some test that passed
   must fail: aux's results are not one value for every call.
4. other values: each result replaced by another value of the same kind (`other` in `rewards.coop_wrapper`: a number
   scrambled, another string, the sequence reversed with each item changed, a bool negated). Some test that
   passed must fail: main needs what aux computes, not only that it was called.
5. control: the pair as it is, once more. Its verdicts must be those of the scored run: a program that fails
   tests by chance (a random bit, a clock) would otherwise fail the probes by chance.

A probe counts only tests that ran to completion (`failed_to_completion`): a timed-out or cut test never earns the
bonus. Where the constant or derived probe failed only by timing out, it is tried once more with another stand-in
of its kind (`SECOND_TRIES`). Main's "not a thin wrapper" credit needs one more run, the main bypass
(`bypass_main`: aux alone on main's arguments, held beside main in every run and picked by `scored_main`'s
line), to fail a test main passed. Every run is the scored program with small ints changed, so its objects sit
at the same addresses in all of them (docs/sandbox.md, "Object addresses").

Probes 2 and 3 behave exactly like the degenerate auxes they stand for (with an identity aux, the derived probe
returns the very object aux would), so no program can tell them apart by the values. Probes 2-4 wrap the real
aux: only the results main sees are replaced (aux's calls of itself get the real ones), and a wrapper that cannot
copy or change a value (a structure too deep, a type it does not know) returns it unchanged, which makes the check
fail, never pass. The scored run of verified mode runs aux behind the same wrapper (`scored_aux`), and every run
computes every mode's stand-in for every result before picking its own: the runs differ in one string of the
program, not in frames, names or work. What a program could read that string with (attributes by computed names,
introspection, frames, string evaluation, `is` between two computed values, clocks, imports outside a
plain-computation allow-list) is refused up front by the gate, `rewards.coop_gate.probe_gate`: no bonus. The
bonus is then scaled by the share of tests passed, so a main that passes 1 test of 8 while branching on aux
cannot outscore a correct main that does not call aux.
"""

from __future__ import annotations

import ast
import hashlib
import random
import re
from collections import Counter
from functools import lru_cache
from types import CodeType
from typing import Callable, Sequence

from rewards.cleaning import PARSE_ERRORS, parse_python
from rewards.coop_gate import SAFE_MODULES, probe_gate  # noqa: F401 - re-exported: the gate of the probes
from rewards.coop_wrapper import WRAPPER as _WRAPPER   # the probes' wrapper, run in the sandboxed child

MODES = ("seed", "verified")


# ------------------------------------------------------------------------------------------------ the probes


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
    # a decorated first statement (a nested `@singledispatch def f`) starts at its first decorator's line
    end = (first.decorator_list[0].lineno, 0) if getattr(first, "decorator_list", None) else (first.lineno,
                                                                                           first.col_offset)
    header = _text_between(lines, (node.lineno, node.col_offset), end)
    return header.rstrip() + "\n    " + body + "\n"


_LINE_END = re.compile(r"(?<=\n)|(?<=\r)(?!\n)")   # after the line ends `ast` counts (not str.splitlines's \f...)


def _text_between(lines: Sequence[str], start: tuple[int, int], end: tuple[int, int]) -> str:
    """The source between two AST positions ((1-based line, UTF-8 byte column), as `ast` gives them)."""
    def at(line: int, col: int) -> int:   # the position as a character index into "".join(lines)
        return sum(len(x) for x in lines[:line - 1]) + len(lines[line - 1].encode("utf-8")[:col].decode("utf-8"))
    return "".join(lines)[at(*start):at(*end)]


def _signature(aux_src: str, aux: str) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """The names of aux's positional and keyword-only parameters; None when aux has no top-level def."""
    node = next((n for n in parse_python(aux_src).body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and n.name == aux), None)
    if node is None:
        return None
    a = node.args
    return tuple(p.arg for p in a.posonlyargs + a.args), tuple(p.arg for p in a.kwonlyargs)


# The wrapper's modes. A small int: every run's program then differs from the scored one in one cached constant,
# not in a string whose size could shift the addresses of later objects (which `repr` shows).
WRAPPER_MODES = {"real": 0, "other": 1, "constant": 2, "derived": 3, "constant twin": 4, "derived other": 5,
                 "raise": 6}


# Bounds of the stand-ins' work in one run (every run does it, the scored one too): nodes of one result, and of
# all results together (about 0.2 s of the wrapper's time at most).
STAND_IN_CALL_LIMIT = 4096
STAND_IN_BUDGET = 100_000


_WRAPPER_TEXT = _WRAPPER.replace("STAND_IN_CALL_LIMIT", str(STAND_IN_CALL_LIMIT)).replace(
    "STAND_IN_BUDGET", str(STAND_IN_BUDGET)).replace("KEEP_LIMIT", str(STAND_IN_CALL_LIMIT))


def _wrapped(aux_src: str, mode: str, signature: tuple, rename_items: bool) -> str:
    arguments = ", ".join(repr(x) for x in (WRAPPER_MODES[mode], *signature, rename_items))
    return aux_src.rstrip("\n") + "\n\n" + _WRAPPER_TEXT.replace("MODE", arguments)


@lru_cache(maxsize=1)
def _wrapper_parts() -> tuple[str, str, CodeType, CodeType]:
    """(the wrapper's def as programs hold it, the same def with `pass` for its body, the code objects of both)."""
    full = _WRAPPER_TEXT[:_WRAPPER_TEXT.index("\n\naux = _coop_probe_wrap(")]
    header = full[:full.index("):\n") + 3]
    stub = header + "    pass\n"

    def code_of(text: str) -> CodeType:
        module = compile(text, "<coop-probe-wrapper>", "exec", dont_inherit=True)
        return next(c for c in module.co_consts if isinstance(c, CodeType) and c.co_name == "_coop_probe_wrap")
    return full, stub, code_of(full), code_of(stub)


def compile_program(source: str) -> CodeType:
    """Compile a program (SyntaxError, ValueError, ... as `compile` raises them). A program that holds the probes'
    wrapper (verified mode: the scored run and every probe) is compiled with the wrapper's body left out and the
    wrapper's code, compiled once, put back in: a program costs what it did before the wrapper grew (the
    wrapper is about 3/4 of a probe program's text). The function made is the same in every run."""
    full, stub, code, stub_code = _wrapper_parts()
    if source.count(full) != 1:
        return compile(source, "<program>", "exec", dont_inherit=True)
    program = compile(source.replace(full, stub), "<program>", "exec", dont_inherit=True)
    consts = tuple(code if isinstance(c, CodeType) and c.co_name == "_coop_probe_wrap" and c.co_code ==
                   stub_code.co_code and c.co_varnames == stub_code.co_varnames else c for c in program.co_consts)
    return program.replace(co_consts=consts)


def scored_aux(aux_src: str, aux: str = "aux", rename_items: bool = True) -> str:
    """aux's source as verified mode's scored run uses it: behind the probes' wrapper, passing every result
    through unchanged, so that the scored run and every probe have the same frames, names, call path and work (a
    program that measured them, say by its recursion depth, would see no difference). aux_src itself when it
    has no top-level `def aux` (nothing to wrap). `rename_items`: whether the derived probe's renaming reaches
    the ints inside containers (`moves_only`)."""
    signature = _signature(aux_src, aux) if _stub(aux_src, aux, "pass") is not None else None
    return aux_src if signature is None else _wrapped(aux_src, "real", signature, rename_items)


def probe_programs(aux_src: str, aux: str = "aux", rename_items: bool = True) -> list[tuple[str, str]]:
    """The probes of one aux with the control run last: (name, what replaces aux's source in the program).
    `verify` runs them in an order drawn from the pair (`in_drawn_order`)."""
    if _stub(aux_src, aux, "pass") is None:
        return []
    signature = _signature(aux_src, aux)
    # every probe is aux's own text behind the wrapper, in its mode (the raise probe's wrapper raises at main's
    # calls): the programs differ in one small int, so that they lay out their objects at the same addresses
    def wrapped(mode: str) -> str:
        return _wrapped(aux_src, mode, signature, rename_items)
    return [("raise", wrapped("raise")), ("derived", wrapped("derived")), ("constant", wrapped("constant")),
            ("other values", wrapped("other")),
            # run only when the failures of the constant or derived probe did not complete (`verify`)
            ("constant twin", wrapped("constant twin")), ("derived other", wrapped("derived other")),
            # the pair as scored, once more: its verdicts must not change from run to run
            ("control", scored_aux(aux_src, aux, rename_items))]


REASONS = {
    "raise": "aux is not needed: the tests that pass still pass when aux raises",
    "derived": "aux's results are its arguments moved, wrapped, re-encoded or re-joined (they come back renamed "
               "with them), or a number read back, or what main's own work makes moot, as far as the tests tell",
    "constant": "aux's results are one value for every call, as far as the tests tell",
    "other": "main does not need what aux computes: the tests that pass still pass with other values",
}


# The largest pair (aux's and main's cleaned source together, in characters) the probes run: past it the probes'
# compiles and transfers would cost the trainer seconds per batch (a 640 kB aux: 11 CPU s), and the bonus is refused.
MAX_PROBED_CHARS = 20_000

@lru_cache(maxsize=2048)
def moves_only(units: tuple[tuple[str, str, str], ...], param: str = "candidate") -> bool:
    """True when the problem's answers only move ints: every test `assert <param>(<literals>) == <literal>` of
    `units` (a `TestSuite`'s) expects ints that its arguments hold (as many times or fewer), and some test
    expects an int (a matrix turned a quarter, the coop set's Coop/64). There, moving ints is the work, and the
    derived probe's renaming leaves the ints inside containers as they are (`scored_aux`'s `rename_items`)."""
    expects_ints = False
    for kind, src, _ in units:
        if kind != "test" or param not in src:
            continue
        try:
            stmt = parse_python(src).body[0]
            test = stmt.test if isinstance(stmt, ast.Assert) else None
            if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)
                    and isinstance(test.left, ast.Call) and isinstance(test.left.func, ast.Name)
                    and test.left.func.id == param and not test.left.keywords):
                continue
            given = Counter(_ints([ast.literal_eval(a) for a in test.left.args]))
            expected = Counter(_ints(ast.literal_eval(test.comparators[0])))
        except (*PARSE_ERRORS, IndexError, ValueError, TypeError, MemoryError):
            continue
        if expected - given:
            return False
        expects_ints = expects_ints or bool(expected)
    return expects_ints


def _ints(value, depth: int = 0) -> list[int]:
    """The ints (not bools) in plain data `value`, dict keys included (at most 20 levels deep)."""
    if type(value) is int:
        return [value]
    if depth > 20 or not isinstance(value, (list, tuple, set, frozenset, dict)):
        return []
    items = [*value.keys(), *value.values()] if isinstance(value, dict) else value
    return [n for item in items for n in _ints(item, depth + 1)]


# A probe whose failures did not complete, and the probe that tries once more in its place
SECOND_TRIES = {"constant": "constant twin", "derived": "derived other"}


def in_drawn_order(probes: list[tuple[str, str]], pair: str) -> list[tuple[str, str]]:
    """Return `probes` (the control run among them) in an order drawn from the pair's text `pair`: the same pair is
    probed in the same order (a reward is reproducible), another pair in another. Why: consecutive programs on one
    slot share a short-lived timing channel (CPU caches; docs/sandbox.md), so a program may tell how many runs of
    its pair came before it; with the control at a drawn place, that count does not tell a probe from the control
    (a main that failed every run after the first but the last one was paid before)."""
    seed = int.from_bytes(hashlib.sha256(pair.encode("utf-8", "surrogatepass")).digest()[:8], "big")
    drawn = list(probes)
    random.Random(seed).shuffle(drawn)
    return drawn


# A probe run's verdict on one test: (passed, ran to completion). A test cut by its timeout or by the run's budget,
# or skipped after too many timeouts, did not run to completion: it says nothing about what aux does.
Verdict = tuple[bool, bool]


def failed_to_completion(passed: Sequence[bool], verdicts: Sequence[Verdict]) -> bool:
    """True when some test that passed in the scored run failed in `verdicts` having run to completion (its
    assert was false, or the program raised): the only failure a probe counts."""
    return any(was and not now and ran for was, (now, ran) in zip(passed, verdicts))


def verify(aux_src: str, main_src: str, imports: Sequence[str], passed: Sequence[bool],
           run: Callable[[str], Sequence[Verdict]], aux: str = "aux", helpers: Sequence[str] = (),
           rename_items: bool = True) -> str:
    """Run the probes of one pair whose normal run passed the tests marked in `passed`; return '' when the
    cooperation is verified, else why not. `imports` are the program's import lines and `helpers` the names of
    the prompt's functions (`probe_gate`). `run(aux_source)` runs the program with aux's source replaced and
    returns its `Verdict`s (from the worker); probes stop at the first one that denies the bonus. A probe counts
    only tests that ran to completion: one whose tests fail only by timing out, or that are cut, refuses the
    bonus (time and chance can then decide it), and so does a control run with a test that did not complete."""
    size = len(aux_src) + len(main_src)
    if size > MAX_PROBED_CHARS:   # each probe compiles and sends the whole program again
        return f"not probed: aux and main are {size:,} characters (the probes run pairs of at most " \
               f"{MAX_PROBED_CHARS:,})"
    why = probe_gate(aux_src, main_src, imports, aux, helpers)
    if why:
        return f"not probed: {why}"
    probes = probe_programs(aux_src, aux, rename_items)
    if not probes:
        return "not probed: aux has no def"
    second_tries = {name: program for name, program in probes if name in SECOND_TRIES.values()}
    for name, replacement in in_drawn_order([p for p in probes if p[0] not in second_tries],
                                            aux_src + "\n" + main_src):
        verdicts = run(replacement)
        if name in SECOND_TRIES and len(verdicts) == len(passed) and not failed_to_completion(passed, verdicts) \
                and any(was and not ran for was, (_, ran) in zip(passed, verdicts)):
            # a constant that sends main into a loop (`n = aux(n)` while n >= 10): once more with aux's result on
            # its first call's arguments renamed, which a constant aux gives as well
            verdicts = run(second_tries[SECOND_TRIES[name]])
        if len(verdicts) != len(passed):
            return f"probe {name}: the run did not finish"
        if name == "control":
            if [now for now, _ in verdicts] != list(passed) or not all(ran for _, ran in verdicts):
                return "the pair's verdicts change from run to run: the probes cannot tell what aux does"
        elif not failed_to_completion(passed, verdicts):
            if any(was and not ran for was, (_, ran) in zip(passed, verdicts)):
                return (f"probe {name}: the tests it failed did not run to completion (timed out or cut); a "
                        "probe counts only tests that did")
            return REASONS.get(name.split()[0], f"aux's results are a {name}, as far as the tests tell")
    return ""


def scored_main(main_src: str, entry_point: str, aux: str = "aux", bypass: bool = False) -> str:
    """main's source as every run of verified mode uses it (with aux behind the wrapper, `scored_aux`): main, then
    the main-bypass probe's entry point (`bypass_main`, as `_coop_bypass`) and a line that picks it in that probe
    only (`bypass`). So the bypass run differs from the scored one in one small int too, and every run of a pair
    lays out its objects at the same addresses (an object's address is readable: `repr(f)`). main_src itself
    when main has no top-level def."""
    stub = bypass_main(main_src, entry_point, aux)
    if stub is None or not stub.startswith(f"def {entry_point}"):
        return stub if bypass and stub is not None else main_src
    bypass_def = "def _coop_bypass" + stub[len(f"def {entry_point}"):]
    try:   # (a header the splice cannot take: the bypass alone, as before, and no tail)
        parse_python(bypass_def)
    except PARSE_ERRORS:
        return stub if bypass else main_src
    return (main_src.rstrip("\n") + "\n\n\n" + bypass_def +
            f"\n\n{entry_point} = _coop_probe_main({entry_point}, _coop_bypass, {int(bypass)})\n")


def bypass_main(main_src: str, entry_point: str, aux: str = "aux") -> str | None:
    """main with its body replaced by a call of aux on main's own arguments (the main-bypass probe: aux alone);
    None when main has no top-level def."""
    try:
        tree = parse_python(main_src)
    except PARSE_ERRORS:
        return None
    node = next((n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and n.name == entry_point), None)
    if node is None:
        return None
    a = node.args
    forwarded = [p.arg for p in a.posonlyargs + a.args]
    forwarded += [f"*{a.vararg.arg}"] if a.vararg else []
    forwarded += [f"{p.arg}={p.arg}" for p in a.kwonlyargs]
    forwarded += [f"**{a.kwarg.arg}"] if a.kwarg else []
    return _stub(main_src, entry_point, f"return {aux}({', '.join(forwarded)})")
