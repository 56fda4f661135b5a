"""Verified cooperation (`code_reward.cooperation: verified`): the bonus is paid for what runs, not for what the
text of main says.

The seed's rule (`rewards.cooperation.cooperation`) reads main's code: it pays an aux that does no work (an
identity, a constant `''` joined to the answer, an aux that always raises inside main's `try`, a call in a branch
that never runs, an aux whose result main just inverts). Here the pair is run again with aux changed, and every
verdict is a test verdict, decided in the sandbox's worker from plain data (`rewards.sandbox`), never a record
the program could write:

1. raise: aux replaced by a stub that raises. Some test that passed must now fail: aux is called while a
   passing test runs, and main cannot do without it (a `try` that falls back to main's own answer pays nothing).
2. derived: aux runs; each call's result is judged by a rule (`moves_content` in `_WRAPPER`): aux is called once
   more with the characters of its arguments' strings renamed (and once more with their ints changed too); a
   result that comes back renamed the same way only moves, wraps, re-encodes or re-joins what aux was given,
   whatever the shape. Numbers are read back (`readings`, `recipes`: digit forms, ratios, quotients, divmod,
   small affine maps, with constants the same on every call), and the transforms of the earlier list still
   count. On such a call main gets aux's own result; on any other, the parts that are arguments kept and the
   rest changed (`keep`), or with no such part aux's first argument. Some test that passed must fail: aux's
   results are not its arguments in a form main just undoes (aux's side effects still happen, so a side channel
   from aux to main does not count as a result).
3. constant: aux's real results replaced by its first result, for every call of the run. Some test that passed
   must fail: aux's results are not one value for every call.
4. other values: each result replaced by another value of the same kind (`other` in `_WRAPPER`: a number
   scrambled, another string, the sequence reversed with each item changed, a bool negated). Some test that
   passed must fail: main needs what aux computes, not only that it was called.
5. control: the pair as it is, once more. Its verdicts must be those of the scored run: a program that fails
   tests by chance (a random bit, a clock) would otherwise fail the probes by chance.

A probe counts only tests that ran to completion (`failed_to_completion`): a timed-out or cut test never earns the
bonus. Where the constant or derived probe failed only by timing out, it is tried once more with another stand-in
of its kind (`SECOND_TRIES`). Main's "not a thin wrapper" credit needs one more run, the main bypass
(`bypass_main`: aux alone on main's arguments), to fail a test main passed.

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
from functools import lru_cache
from types import CodeType
from typing import Callable, Sequence

from rewards.cleaning import PARSE_ERRORS, parse_python
from rewards.coop_gate import SAFE_MODULES, probe_gate  # noqa: F401 - re-exported: the gate of the probes

MODES = ("seed", "verified")


# ------------------------------------------------------------------------------------------------ the probes

# Defined in the program after aux (so it rebinds the name `aux` that main and aux itself call). Plain Python run
# inside the sandboxed child; it decides nothing: the verdicts of the tests do.
_WRAPPER = '''
def _coop_probe_wrap(real, mode, positional, keyword_only, type=type, len=len, reversed=reversed, tuple=tuple,
                     list=list, all=all, any=any, zip=zip, next=next, iter=iter, float=float, bool=bool, int=int,
                     str=str, bytes=bytes, dict=dict, set=set, frozenset=frozenset, complex=complex,
                     enumerate=enumerate, range=range, ord=ord, chr=chr, getattr=getattr, ValueError=ValueError,
                     BaseException=BaseException):
    # the builtins it uses are bound here, when the program loads
    first = []        # aux's first result, copied (the constant probe's stand-in), and its twin's
    twins = []        # the result of the last renamed call (`moves_content`)
    fitted = []       # the fitted recipes every derived call so far shares (`derived`)
    PLAIN = (bool, int, float, complex, str, bytes, list, tuple, dict, set, frozenset, type(None))
    AFFINE = [k for k in range(-16, 17) if k not in (0, 1)]   # the factors of an affine recipe (1 is a shift)
    SEQ = (str, bytes, list, tuple)
    NUM = (int, float)

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
        if a is b:
            return True
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

    def key(v, depth=0):
        # a hashable form of plain data (types included: 1, 1.0 and True differ)
        t = type(v)
        if depth > 20:
            raise ValueError
        if t is list or t is tuple:
            return (t, tuple(key(x, depth + 1) for x in v))
        if t is dict:
            return (t, tuple((key(k, depth + 1), key(x, depth + 1)) for k, x in v.items()))
        if t is set or t is frozenset:
            return (t, frozenset(key(x, depth + 1) for x in v))
        if t in PLAIN:
            return (t, v)
        raise ValueError

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
        if t is int:   # the sign kept (a loop that counts down by it still ends), the size scrambled
            w = (abs(v) * 7 + 3) % 11 + 1
            w = w if v >= 0 else -w
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

    def arguments(args, kwargs):
        # every value aux received: positional arguments (*args included), keyword arguments (**kwargs
        # included), and the defaults of the parameters the call left out
        values = list(args) + list(kwargs.values())
        inner = getattr(real, "__wrapped__", real)
        defaults = getattr(inner, "__defaults__", None) or ()
        for i in range(len(args), len(positional)):
            k = i - (len(positional) - len(defaults))
            if k >= 0 and positional[i] not in kwargs:
                values.append(defaults[k])
        kwdefaults = getattr(inner, "__kwdefaults__", None) or {}
        for name in keyword_only:
            if name not in kwargs and name in kwdefaults:
                values.append(kwdefaults[name])
        return values

    def views(a, inner=False):
        # the value itself and what structure-only transforms make of it: reversed, re-typed, negated (`inner`:
        # of a view, where the other codecs and the numbering are left out, for their cost)
        out = [("id", a)]
        t = type(a)
        if t in SEQ and len(a) <= 4096:
            out.append(("reversed", a[::-1]))
            if t is str:
                out += [("list", list(a)), ("tuple", tuple(a)), ("encoded", a.encode("utf-8", "surrogatepass"))]
                if 0 < len(a) <= 40 and a.strip().lstrip("+-").isdigit():
                    out.append(("int", int(a)))
                if len(a) <= 1024:   # re-encodings a main decodes back: code points, another codec's bytes
                    out += [("code points", [ord(c) for c in a]),
                            ("utf-8 bytes", list(a.encode("utf-8", "surrogatepass")))]
                    if not inner:
                        out += [("utf-16", a.encode("utf-16", "surrogatepass")),
                                ("utf-32", a.encode("utf-32", "surrogatepass"))]
            elif t is bytes:
                out += [("decoded", a.decode("latin-1")), ("list", list(a))]
            else:
                out += [("list", list(a)), ("tuple", tuple(a))]
                if all(type(x) is str for x in a):
                    out.append(("joined", "".join(a)))
            if len(a) <= 1024 and not inner:   # numbered: (index, item) pairs, or a dict by index
                out += [("enumerated", list(enumerate(a))), ("indexed", dict(enumerate(a)))]
        elif t in NUM:
            out += [("str", str(a)), ("negated", -a)]
        return out

    def all_views(a):
        # `views`, and for a small argument the views of those: two transforms at once (`str(n)[::-1]`, the
        # code points reversed, `list(text.encode())` reversed)
        out = views(a)
        t = type(a)
        if t in NUM or (t in SEQ and len(a) <= 32):
            out = out + [(name + "/" + inner, w) for name, v in out[1:] for inner, w in views(v, True)[1:]]
        return out

    def recipes(r, vs, depth=0):
        # how r is built from an argument by structure only (`vs`: its `all_views`): (free recipes, fitted
        # recipes); a fitted recipe holds constants (an affix, a shift, a factor, the other items of a container)
        free, fit = set(), set()
        tr = type(r)
        for name, v in vs:
            tv = type(v)
            if same(r, v):
                free.add((name,))
            elif tr is tv and tr in SEQ and 0 < len(v) < len(r):
                if not len(r) % len(v) and same(r, v * (len(r) // len(v))):
                    fit.add((name, "repeated", len(r) // len(v)))
                if tr is str or tr is bytes:
                    i = r.find(v)
                    if i >= 0:
                        fit.add((name, "affix", r[:i], r[i + len(v):]))
                    n = len(v) - 1   # v's items joined by a separator (`'#'.join(text)`)
                    if n and not (len(r) - len(v)) % n:
                        sep = r[1:1 + (len(r) - len(v)) // n]
                        if sep.join(v[i:i + 1] for i in range(len(v))) == r:
                            fit.add((name, "joined", sep))
                elif same(r[:len(v)], v):
                    fit.add((name, "affix", (), key(r[len(v):])))
                elif same(r[len(r) - len(v):], v):
                    fit.add((name, "affix", key(r[:len(r) - len(v)]), ()))
            if tr is dict and 0 < len(r) <= 8:
                for k, x in r.items():
                    if same(x, v):
                        fit.add((name, "value", key(k), key({j: y for j, y in r.items() if j != k})))
                    if same(k, v):
                        fit.add((name, "key", key(x), key({j: y for j, y in r.items() if j != k})))
            elif (tr is set or tr is frozenset) and len(r) == 1 and same(next(iter(r)), v):
                free.add((name, "set"))
        if (tr is list or tr is tuple) and 0 < len(r) <= 8 and depth < 2:
            # an item built from a (nested up to twice), the other items constant
            for i, x in enumerate(r):
                inner_free, inner_fit = recipes(x, vs, depth + 1)
                rest = key(r[:i] + r[i + 1:])
                for inner in inner_free:
                    (free if len(r) == 1 else fit).add(("item", tr, len(r), i, inner, rest))
                for inner in inner_fit:
                    fit.add(("item", tr, len(r), i, inner, rest))
        for form, x in readings(r):
            for name, v in vs:   # a number read out of r, shifted, scaled, divided or mapped by a small affine map
                if type(v) not in NUM:
                    continue
                if form == "value" and tr is type(v) and x == v:
                    continue
                if x == v:
                    fit.add((name, form))
                    if not v:   # 0 is any multiple, any quotient of 0
                        fit |= {(name, form, "scale", k) for k in AFFINE}
                        fit |= {(name, form, "quotient", k) for k in range(2, 17)}
                    continue
                if type(v) is int and type(x) is int:
                    if v and not x % v and x // v not in (0, 1):
                        fit.add((name, form, "scale", x // v))
                    if form != "value":   # a digit form, ratio or divmod: read back, or scaled (`str(2 * n)`)
                        continue
                    fit.add((name, form, "xor", x ^ v))   # both at once, a small factor (2 * n + 1), bits flipped
                    for k in AFFINE:
                        fit.add((name, form, "affine", k, x - k * v))
                    fit |= {(name, form, "quotient", k) for k in range(2, 17) if x == v // k}
                if form == "value":
                    fit.add((name, form, "shift", key(x - v)))
        return free, fit

    def readings(r):
        # the numbers a main reads back out of r (its digit forms; a quotient and remainder; a float times a small
        # denominator): (form, number)
        t = type(r)
        out = []
        if t is int or t is float:
            out.append(("value", r))
            if t is float and r == r and r not in (float("inf"), float("-inf")):
                out += [(("ratio", q), int(r * q)) for q in range(2, 17) if r * q == int(r * q)]
        elif t is str and 0 < len(r) <= 40 and r.strip().lstrip("+-").isdigit():
            out.append(("digits", int(r)))
        elif (t is list or t is tuple) and 0 < len(r) <= 40:
            if all(type(d) is int and 0 <= d <= 9 or type(d) is str and len(d) == 1 and d.isdigit() for d in r):
                out.append(("digits", int("".join(str(d) for d in r))))
            if len(r) == 2 and type(r[0]) is int and type(r[1]) is int:   # divmod(n, k): n is q * k + m
                out += [(("divmod", k), r[0] * k + r[1]) for k in range(2, 17) if 0 <= r[1] < k]
        return out

    def derived(value, vlists):
        # True when aux's result is one of its arguments under a structure-only transform (free), or under a
        # fitted one that every derived call so far shares (the same affix, shift, factor, other items);
        # `vlists`: each argument's `all_views`
        free, fit = set(), set()
        for j, vs in enumerate(vlists):   # a fitted recipe is one of argument j: the same argument on every call
            f, g = recipes(value, vs)
            free |= f
            fit |= {(j,) + recipe for recipe in g}
        if free:
            return True
        if not fit:
            return False
        if not fitted:
            fitted.append(fit)
            return True
        common = fitted[0] & fit
        if common:
            fitted[0] = common
            return True
        return False

    def by_type(vlists):
        # the views of every argument (`vlists`: their `all_views`), by their type
        out = {}
        for vs in vlists:
            for _, v in vs:
                t = type(v)
                if t in PLAIN:
                    out.setdefault(t, []).append(v)
        return out

    def swap(c):
        # a letter or digit (its code) changed, anything else kept
        if 48 <= c <= 57:
            return 48 + (c - 43) % 10
        if 65 <= c <= 90 or 97 <= c <= 122:
            return c + 13 if (c & 31) <= 13 else c - 13
        return c

    def scramble(s):
        # a string's (or bytes') letters and digits changed one by one: the separators a main parses stay
        if type(s) is bytes:
            return bytes([swap(c) for c in s])
        return "".join([chr(swap(ord(c))) for c in s])

    def keep(r, vs, left, depth=0):
        # r with every part that is one of aux's arguments under a free transform (`vs`, by type) kept, and every
        # other part changed (`other`; the text around an argument inside a string `scramble`d): (the stand-in,
        # whether some part was kept). A main that reads its argument back out of aux's result (an item of a
        # tuple beside a companion, a string with a computed prefix) then still passes its tests
        left[0] -= 1
        if left[0] < 0 or depth > 50:
            raise ValueError
        t = type(r)
        for v in vs.get(t, ()):
            if same(r, v):
                return r, True
        if t is str or t is bytes:
            for v in vs.get(t, ()):   # a single character only at either end: inside, it is a coincidence
                i = r.find(v) if len(v) > 1 else (0 if r[:1] == v else len(r) - 1 if r[-1:] == v else -1)
                if i >= 0 and len(v):
                    return scramble(r[:i]) + v + scramble(r[i + len(v):]), True
            if not all(vs.get(t, (1,))):   # an empty argument: what aux made of nothing, scrambled
                return scramble(r), True
            return other(r), False
        if t is list or t is tuple:
            for v in vs.get(t, ()):   # the argument's items as a run at either end
                n = len(v)
                if 0 < n < len(r) and same(r[:n], v):
                    return v + t([other(x) for x in r[n:]]), True
                if 0 < n < len(r) and same(r[len(r) - n:], v):
                    return t([other(x) for x in r[:len(r) - n]]) + v, True
            parts = [keep(x, vs, left, depth + 1) for x in r]
            if any([k for _, k in parts]):
                return t([x for x, _ in parts]), True
            return other(r), False
        if t is dict:   # keys stay (a key that is an argument counts as kept), values are kept or changed
            parts = {k: keep(x, vs, left, depth + 1) for k, x in r.items()}
            if any([k for _, k in parts.values()]) or len(r) <= 64 and any(
                    [any([same(k, v) for v in vs.get(type(k), ())]) for k in r]):
                return {k: x for k, (x, _) in parts.items()}, True
            return other(r), False
        if t is set or t is frozenset:
            parts = [keep(x, vs, left, depth + 1) for x in r]
            if any([k for _, k in parts]):
                return t([x for x, _ in parts]), True
            return other(r), False
        return other(r), False

    def size(v, limit):
        # the nodes of plain data v (a string counts one per 64 characters), counted up to limit + 1
        n, todo = 0, [v]
        while todo and n <= limit:
            x = todo.pop()
            t = type(x)
            n += 1
            if t is str or t is bytes:
                n += len(x) // 64
            elif t is list or t is tuple or t is set or t is frozenset:
                todo.extend(x)
            elif t is dict:
                todo.extend(x.keys())
                todo.extend(x.values())
        return n

    budget = [STAND_IN_BUDGET]   # nodes of results and arguments the stand-ins may look at in one run
    VIEW_COST = 8

    FRESH = "ZYXWVTSQPOMLKJIHGFEDCAzywvsqpomlkjihgedca"   # (no letter of an escape: \\t, \\u00e9, \\x, \\N)
    QUOTES = chr(34) + chr(39) + chr(92)   # the quotes and the backslash

    def texts(v, out, left, depth=0):
        # the strings in v (a call's arguments; dict values, not keys), in order, counted against `left`
        left[0] -= 1
        t = type(v)
        if left[0] < 0 or depth > 20:
            raise ValueError
        if t is str:
            out.append(v)
        elif t is list or t is tuple or t is set or t is frozenset:
            for x in v:
                texts(x, out, left, depth + 1)
        elif t is dict:
            for x in v.values():
                texts(x, out, left, depth + 1)
        elif t is int:
            out.append(None)   # an int: its place, for `renamed` (which changes it when asked to)
        elif t not in PLAIN:
            raise ValueError

    def renamed(v, names, change_numbers, depth=0):
        # v with the characters of its strings renamed (`names` gives each string, in `texts` order, its new
        # characters) and its ints changed when `change_numbers` (floats stay: a ratio past 1 may never end a
        # loop); the structure (containers, dict keys) kept
        t = type(v)
        if depth > 50:
            raise ValueError
        if t is str:
            return next(names)
        if t is int:   # to one of 1..11 (-1..-11 when negative): a loop it bounds stays short
            next(names)
            return other(v) if change_numbers else v
        if t is list:
            return [renamed(x, names, change_numbers, depth + 1) for x in v]
        if t is tuple:
            return tuple(renamed(x, names, change_numbers, depth + 1) for x in v)
        if t is set or t is frozenset:
            return t(renamed(x, names, change_numbers, depth + 1) for x in v)
        if t is dict:
            return {k: renamed(x, names, change_numbers, depth + 1) for k, x in v.items()}
        return v

    def restored(v, table, depth=0):
        # v (a result) with the renamed characters put back (`table`: the inverse renaming, for str.translate)
        t = type(v)
        if depth > 50:
            raise ValueError
        if t is str:
            return v.translate(table)
        if t is list:
            return [restored(x, table, depth + 1) for x in v]
        if t is tuple:
            return tuple(restored(x, table, depth + 1) for x in v)
        if t is set or t is frozenset:
            return t(restored(x, table, depth + 1) for x in v)
        if t is dict:
            return {restored(k, table, depth + 1): restored(x, table, depth + 1) for k, x in v.items()}
        return v

    def moves_content(value, args, kwargs):
        # The rule of the derived probe: True when aux, called again with the characters of its strings renamed
        # (every character, separators too, each occurrence to its own letter while they last, else each
        # distinct character), returns its result renamed the same way, and the renaming reaches the result:
        # aux only moves, wraps, re-encodes or re-joins what it was given, whatever the shape. Work commutes
        # with no such renaming (a split on a separator, a case change, a comparison, a count). False when the
        # second call raises, or the strings are too many to rename
        found = []
        for a in list(args) + list(kwargs.values()):
            texts(a, found, [STAND_IN_CALL_LIMIT])
        numbers = len([x for x in found if x is None])
        chars = "".join([x for x in found if x is not None])
        if not chars and not numbers:   # nothing to rename: only a result with no content moved
            return hollow(value)
        fresh, table = "", {}
        if chars:
            # printable ASCII is renamed, separators too; a character that a repr or JSON escapes (a tab, a quote,
            # a backslash, anything past ASCII) stays, so that an escaped form renames as its source does
            movable = [c for c in chars if " " <= c <= "~" and c not in QUOTES]
            if len(movable) <= len(FRESH):
                names_of = iter(FRESH)
                fresh = "".join([next(names_of) if " " <= c <= "~" and c not in QUOTES else c for c in chars])
            else:
                distinct = dict.fromkeys(movable)
                if len(distinct) > len(FRESH):
                    return False
                names_of = dict(zip(distinct, FRESH))
                fresh = "".join([names_of.get(c, c) for c in chars])
            table = {ord(f): ord(c) for f, c in zip(fresh, chars) if f != c}
        pieces, at = [], 0
        for x in found:
            pieces.append(None if x is None else fresh[at:at + len(x)])
            at += 0 if x is None else len(x)
        # the strings renamed; then, where there are numbers, the numbers changed too: a move that a number
        # decides (which pieces, how many) is work done on that number. Numbers alone are judged by their
        # readings (`recipes`); their twin is kept for the constant probe's second try (`twins`)
        moved = bool(chars) or hollow(value)
        for change_numbers in ([False] if chars else []) + ([True] if numbers else []):
            new_args, new_kwargs = twin_arguments(args, kwargs, iter(pieces), change_numbers)
            depth[0] += 1
            try:
                twin = real(*new_args, **new_kwargs)
            finally:
                depth[0] -= 1
            twins[:] = [twin]
            if not chars:
                continue
            if size(twin, STAND_IN_CALL_LIMIT) > STAND_IN_CALL_LIMIT:
                return False
            if same(twin, value):   # the renaming did not reach the result: only a result with no content moved
                moved = moved and hollow(value)
            elif not same(restored(twin, table), value):
                moved = False
        return moved

    def twin_arguments(args, kwargs, names, change_numbers):
        # the arguments with their strings renamed (`names`, in `texts` order: the positional arguments, then
        # the keyword ones), and their numbers changed (`other`) when `change_numbers`
        def each(a):
            return renamed(a, names, change_numbers)
        return [each(a) for a in args], {k: each(a) for k, a in kwargs.items()}

    def hollow(v, depth=0):
        # True for a result with no content: None, and strings, bytes and containers without a letter, digit or
        # number (`''`, `[]`, `'!'`); a bool or a number is content (a palindrome check's verdict)
        t = type(v)
        if depth > 20:
            raise ValueError
        if v is None:
            return True
        if t is str or t is bytes:
            return not any([c.isalnum() for c in (v.decode("latin-1") if t is bytes else v)])
        if t is list or t is tuple or t is set or t is frozenset:
            return all([hollow(x, depth + 1) for x in v])
        if t is dict:
            return all([hollow(k, depth + 1) and hollow(x, depth + 1) for k, x in v.items()])
        return False

    def stand_ins(value, args, kwargs):
        # what each mode hands main for this result; every mode computes all of them (the same work, so that no
        # run is slower than another for the wrapper's sake), each falling back to aux's own result. Past the
        # run's budget (a big result, many calls) every mode hands main aux's own result: the same in every run,
        # and no probe then fails a test for it (the conservative side)
        out = [value] * 6   # by the mode: real, other values, constant, derived, constant twin, derived other
        cost = size(value, min(budget[0], STAND_IN_CALL_LIMIT))
        budget[0] -= cost
        if budget[0] < 0 or cost > STAND_IN_CALL_LIMIT:
            return out
        # the arguments' views and the renamed second call cost about VIEW_COST x the arguments' items each
        for a in list(args) + list(kwargs.values()):
            budget[0] -= VIEW_COST * (size(a, min(budget[0], STAND_IN_CALL_LIMIT)) +
                                      (len(a) if type(a) in SEQ else 0))
        if budget[0] < 0:
            return out
        try:
            out[1] = other(value)
        except BaseException:
            pass
        try:
            twins[:] = []
            moved = moves_content(value, args, kwargs)
        except BaseException:
            moved = False
        try:
            if not first:
                first.append(plain_copy(value))
                # the constant probe's second try (`verify`): aux's result on its first call's arguments renamed,
                # which is aux's first result itself when aux is constant
                first.append(plain_copy(twins[0]) if twins else first[0])
            out[2] = value if same(value, first[0]) else plain_copy(first[0])
            out[4] = value if same(value, first[1]) else plain_copy(first[1])
        except BaseException:
            pass
        try:
            values = arguments(args, kwargs)
            vlists = [all_views(a) for a in values]
            if not (moved or derived(value, vlists)):
                # the parts of the result that are arguments (under a free transform) kept, the rest changed;
                # with no such part, aux's first argument
                stand_in, kept = keep(value, by_type(vlists), [KEEP_LIMIT])
                # with no part kept: aux's first argument (what an aux that does nothing gives back); the second
                # try (`verify`, when that sends main into a loop) another value of the result's kind
                changed = stand_in if kept else other(value)
                if not kept:
                    stand_in = values[0] if values else changed
                # where the stand-in equals aux's own result, main gets aux's own object
                out[3] = value if same(value, stand_in) else stand_in
                out[5] = value if same(value, changed) else changed
        except BaseException:
            pass
        return out

    depth = [0]

    def aux(*args, **kwargs):
        # only what main sees is replaced: aux's calls of itself get the real results
        depth[0] += 1
        try:
            value = real(*args, **kwargs)
        finally:
            depth[0] -= 1
        if depth[0]:
            return value
        return stand_ins(value, args, kwargs)[mode]
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
WRAPPER_MODES = {"real": 0, "other": 1, "constant": 2, "derived": 3, "constant twin": 4, "derived other": 5}


# Bounds of the stand-ins' work in one run (every run does it, the scored one too): nodes of one result, and of
# all results together (about 0.2 s of the wrapper's time at most).
STAND_IN_CALL_LIMIT = 4096
STAND_IN_BUDGET = 100_000


_WRAPPER_TEXT = _WRAPPER.replace("STAND_IN_CALL_LIMIT", str(STAND_IN_CALL_LIMIT)).replace(
    "STAND_IN_BUDGET", str(STAND_IN_BUDGET)).replace("KEEP_LIMIT", str(STAND_IN_CALL_LIMIT))


def _wrapped(aux_src: str, mode: str, signature: tuple) -> str:
    arguments = ", ".join(repr(x) for x in (WRAPPER_MODES[mode], *signature))
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


def scored_aux(aux_src: str, aux: str = "aux") -> str:
    """aux's source as verified mode's scored run uses it: behind the probes' wrapper, passing every result
    through unchanged, so that the scored run and every probe have the same frames, names, call path and work (a
    program that measured them, say by its recursion depth, would see no difference). aux_src itself when it
    has no top-level `def aux` (nothing to wrap)."""
    signature = _signature(aux_src, aux) if _stub(aux_src, aux, "pass") is not None else None
    return aux_src if signature is None else _wrapped(aux_src, "real", signature)


def probe_programs(aux_src: str, aux: str = "aux") -> list[tuple[str, str]]:
    """The probes of one aux with the control run last: (name, what replaces aux's source in the program).
    `verify` runs them in an order drawn from the pair (`in_drawn_order`)."""
    raising = _stub(aux_src, aux, "raise RuntimeError('aux failed')")
    if raising is None:
        return []
    signature = _signature(aux_src, aux)
    return [("raise", _wrapped(raising, "real", signature)),
            ("derived", _wrapped(aux_src, "derived", signature)),
            ("constant", _wrapped(aux_src, "constant", signature)),
            ("other values", _wrapped(aux_src, "other", signature)),
            # run only when the failures of the constant or derived probe did not complete (`verify`)
            ("constant twin", _wrapped(aux_src, "constant twin", signature)),
            ("derived other", _wrapped(aux_src, "derived other", signature)),
            # the pair as scored, once more: its verdicts must not change from run to run
            ("control", scored_aux(aux_src, aux))]


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
           run: Callable[[str], Sequence[Verdict]], aux: str = "aux", helpers: Sequence[str] = ()) -> str:
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
    probes = probe_programs(aux_src, aux)
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
