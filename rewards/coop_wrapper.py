"""The wrapper of verified cooperation's probes (`rewards.coop_probes`): plain Python, as text, that each probe
program (and verified mode's scored run) defines after aux, so that main's calls of aux go through it. It runs
inside the sandboxed child and decides nothing: the test verdicts do. Every run computes every probe's stand-in
for every result and picks one by the small int `MODE` (`rewards.coop_probes.WRAPPER_MODES`)."""

# Defined in the program after aux (so it rebinds the name `aux` that main and aux itself call). Plain Python run
# inside the sandboxed child; it decides nothing: the verdicts of the tests do.
WRAPPER = '''
def _coop_probe_wrap(real, mode, positional, keyword_only, rename_items, type=type, len=len, reversed=reversed,
                     tuple=tuple, list=list, all=all, any=any, zip=zip, next=next, iter=iter, float=float, bool=bool,
                     int=int, str=str, bytes=bytes, dict=dict, set=set, frozenset=frozenset, complex=complex,
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
        # the strings in v (a call's arguments; dict values, not keys), in order, counted against `left`; an int
        # inside a container as itself (content, renamed as characters are, unless the problem's answers only move
        # ints: `rename_items`), any other int as None
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
            out.append(v if depth and rename_items else None)   # its place, for `renamed`
        elif t not in PLAIN:
            raise ValueError

    def renamed(v, names, change_numbers, depth=0):
        # v with the characters of its strings renamed (`names` gives each string, in `texts` order, its new
        # characters, and each int inside a container its new int) and the ints that are arguments changed when
        # `change_numbers` (floats stay: a ratio past 1 may never end a loop); the structure (containers, dict
        # keys) kept
        t = type(v)
        if depth > 50:
            raise ValueError
        if t is str:
            return next(names)
        if t is int:
            fresh = next(names)
            if fresh is not None:   # an item of a container: renamed (`fresh_ints`), as a character is
                return fresh
            # an argument: changed when asked, to one of 1..11 (-1..-11 when negative): a loop it bounds stays short
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

    def restored(v, table, ints, depth=0):
        # v (a result) with the renamed characters and ints put back (`table`: the inverse renaming, for
        # str.translate; `ints`: each fresh int's own)
        t = type(v)
        if depth > 50:
            raise ValueError
        if t is str:
            return v.translate(table)
        if t is int:
            return ints.get(v, v)
        if t is list:
            return [restored(x, table, ints, depth + 1) for x in v]
        if t is tuple:
            return tuple(restored(x, table, ints, depth + 1) for x in v)
        if t is set or t is frozenset:
            return t(restored(x, table, ints, depth + 1) for x in v)
        if t is dict:
            return {restored(k, table, ints, depth + 1): restored(x, table, ints, depth + 1) for k, x in v.items()}
        return v

    def fresh_ints(n):
        # n distinct ints for the n ints inside containers, in `texts` order: above every length and index of
        # them (n + 2 to 2n + 1), and in an order that is not their places' (a sort, a max, a filter by size
        # does not commute with it), small enough that a loop they bound stays short
        step = next(q for q in (7, 11, 13, 17) if n % q)
        return [n + 2 + (i * step + 1) % n for i in range(n)]

    def moves_content(value, args, kwargs):
        # The rule of the derived probe: True when aux, called again with the characters of its strings renamed
        # (every character, separators too, each occurrence to its own letter while they last, else each
        # distinct character) and the ints inside its containers too (`fresh_ints`, unless `rename_items` is
        # off), returns its result renamed the same way, and the renaming reaches the result:
        # aux only moves, wraps, re-encodes or re-joins what it was given, whatever the shape. Work commutes
        # with no such renaming (a split on a separator, a case change, a comparison, a count). False when the
        # second call raises, or the strings are too many to rename
        found = []
        for a in list(args) + list(kwargs.values()):
            texts(a, found, [STAND_IN_CALL_LIMIT])
        numbers = len([x for x in found if x is None])
        chars = "".join([x for x in found if type(x) is str])
        items = [x for x in found if type(x) is int]
        if not chars and not items and not numbers:   # nothing to rename: only a result with no content moved
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
        fresh_items = fresh_ints(len(items)) if items else []
        ints = dict(zip(fresh_items, items))
        pieces, at, next_item = [], 0, iter(fresh_items)
        for x in found:
            if type(x) is str:
                pieces.append(fresh[at:at + len(x)])
                at += len(x)
            else:
                pieces.append(None if x is None else next(next_item))
        # the content (the strings' characters, the ints inside containers) renamed; then, where arguments are
        # numbers, those changed too: a move that a number decides (which pieces, how many) is work done on that
        # number. Numbers alone are judged by their readings (`recipes`); their twin is kept for the constant
        # probe's second try (`twins`)
        content = bool(chars) or bool(items)
        moved = content or hollow(value)
        for change_numbers in ([False] if content else []) + ([True] if numbers else []):
            new_args, new_kwargs = twin_arguments(args, kwargs, iter(pieces), change_numbers)
            depth[0] += 1
            try:
                twin = real(*new_args, **new_kwargs)
            finally:
                depth[0] -= 1
            twins[:] = [twin]
            if not content:
                continue
            if size(twin, STAND_IN_CALL_LIMIT) > STAND_IN_CALL_LIMIT:
                return False
            if same(twin, value):   # the renaming did not reach the result: only a result with no content moved
                moved = moved and hollow(value)
            elif not same(restored(twin, table, ints), value):
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
        if mode == 6 and not depth[0]:   # the raise probe: aux fails, in a program laid out as the scored one
            raise RuntimeError("aux failed")
        depth[0] += 1
        try:
            value = real(*args, **kwargs)
        finally:
            depth[0] -= 1
        if depth[0]:
            return value
        return stand_ins(value, args, kwargs)[mode if mode < 6 else 0]
    return aux


aux = _coop_probe_wrap(aux, MODE)


def _coop_probe_main(main, bypass, use_bypass):
    # the entry point of the run: main, or in the main-bypass probe aux alone on main's arguments (`bypass`)
    return bypass if use_bypass else main
'''
