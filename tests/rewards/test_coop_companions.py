"""Issue 34, a hostile pass after the gate: an aux that does no work, whose result main reads its argument back
out of, is paid nothing in verified mode, whatever it puts beside the argument.

The derived probe used to hand main aux's first argument whenever aux's result was not that argument under a
fitted transform whose constants are the same on every call. A companion that varies with the input (the text's
length beside the text, a computed prefix, the argument nested three deep, or twice) made the result "not
derived", the first argument then broke main's unpacking, and the pair was paid 4.0 for an aux that does
nothing. Now the derived probe keeps every part of the result that is an argument (under a free transform) and
changes the rest: main that only reads the argument back passes its tests as in the scored run, and is refused.
Re-encodings a main decodes (code points, another codec, numbered items, a separator between the characters) are
views of the argument too, and so are two transforms at once for a small argument (the reversal's characters).
Each shape here was paid 4.0 in verified mode before.
"""

from __future__ import annotations

import time

import pytest

from rewards.code_rewards import code_reward
from rewards.sandbox import Sandbox
from tests.rewards.test_coop_verified import PROBLEM

pytestmark = pytest.mark.sandbox

JOIN = "    return ' '.join(w.upper() for w in s.split()) + '!'\n"
# (name, aux, main's first line(s): `s` is the text main reads back out of aux's result)
COMPANIONS = [
    ("length_beside_the_text", "def aux(text):\n    return (text, len(text))\n", "    s = aux(text)[0]\n"),
    ("length_before_the_text", "def aux(text):\n    return (len(text), text)\n", "    s = aux(text)[1]\n"),
    ("dict_with_a_computed_value", "def aux(text):\n    return {'t': text, 'n': len(text)}\n",
     "    s = aux(text)['t']\n"),
    ("the_text_as_a_dict_key", "def aux(text):\n    return {text: len(text)}\n", "    s = next(iter(aux(text)))\n"),
    ("computed_prefix_with_a_separator", "def aux(text):\n    return str(len(text)) + ':' + text\n",
     "    s = aux(text).split(':', 1)[1]\n"),
    ("nested_three_deep", "def aux(text):\n    return [[[text]]]\n", "    s = aux(text)[0][0][0]\n"),
    ("the_text_twice", "def aux(text):\n    return (text, text)\n", "    s = aux(text)[1]\n"),
    ("text_and_its_reversal", "def aux(text):\n    return [text, text[::-1]]\n", "    s = aux(text)[0]\n"),
    ("reversed_beside_a_length", "def aux(text):\n    return (text[::-1], len(text))\n",
     "    s = aux(text)[0][::-1]\n"),
    ("characters_then_a_length", "def aux(text):\n    return list(text) + [len(text)]\n",
     "    s = ''.join(aux(text)[:-1])\n"),
    ("nested_beside_a_length", "def aux(text):\n    return [text, [len(text), text]]\n", "    s = aux(text)[1][1]\n"),
    ("code_points", "def aux(text):\n    return [ord(c) for c in text]\n", "    s = ''.join(map(chr, aux(text)))\n"),
    ("utf8_byte_list", "def aux(text):\n    return list(text.encode())\n", "    s = bytes(aux(text)).decode()\n"),
    ("utf16_bytes", "def aux(text):\n    return text.encode('utf-16')\n", "    s = aux(text).decode('utf-16')\n"),
    ("numbered_characters", "def aux(text):\n    return dict(enumerate(text))\n",
     "    s = ''.join(aux(text).values())\n"),
    ("interleaved_with_a_separator", "def aux(text):\n    return '#'.join(text)\n", "    s = aux(text)[::2]\n"),
    # two transforms at once
    ("characters_of_the_reversal", "def aux(text):\n    return tuple(text[::-1])\n",
     "    s = ''.join(aux(text))[::-1]\n"),
    ("code_points_reversed", "def aux(text):\n    return [ord(c) for c in text[::-1]]\n",
     "    s = ''.join(map(chr, aux(text)))[::-1]\n"),
    ("utf8_bytes_reversed", "def aux(text):\n    return list(text.encode())[::-1]\n",
     "    s = bytes(aux(text)[::-1]).decode()\n"),
]


# A main that checks what aux hands it against its own computation, or against what aux tells it through a list
# main handed it (a side channel): 4.0 before issue 42; aux only moves its argument (the renaming rule of the
# derived probe: aux's result renamed with it), so the derived probe hands main aux's own result and main's check
# holds: 2.5 now
CHECKED = [
    ("companion_checked_by_main", "def aux(text):\n    return (text, len(text))\n",
     "def shout_words(text):\n    r = aux(text)\n    if r[1] != len(text):\n        return None\n    s = r[0]\n"
     + JOIN),
    ("companion_compared_with_a_side_channel",
     "def aux(text, box):\n    r = (text, len(text) % 3)\n    box.append(r)\n    return r\n",
     "def shout_words(text):\n    box = []\n    r = aux(text, box)\n    if r != box[0]:\n        return None\n"
     "    s = r[0]\n" + JOIN),
]
# the rows these shapes have in docs/rewards.md's table, after tests/rewards/test_coop_escapes.py's
DOC_LABELS = {
    "length_beside_the_text": "aux returns `(text, len(text))`, main takes the text",
    "dict_with_a_computed_value": "aux returns `{'t': text, 'n': len(text)}`, main takes the text",
    "the_text_as_a_dict_key": "aux returns `{text: len(text)}`, main takes the key",
    "computed_prefix_with_a_separator": "aux returns `str(len(text)) + ':' + text`, main splits the text off",
    "nested_three_deep": "aux returns `[[[text]]]`, main unpacks it",
    "characters_then_a_length": "aux returns `list(text) + [len(text)]`, main joins all but the last",
    "code_points": "aux returns `[ord(c) for c in text]`, main maps `chr` back",
    "utf16_bytes": "aux returns `text.encode('utf-16')`, main decodes it",
    "numbered_characters": "aux returns `dict(enumerate(text))`, main joins the values",
    "interleaved_with_a_separator": "aux returns `'#'.join(text)`, main takes every other character",
    "companion_checked_by_main": "aux returns `(text, len(text))`, main checks the length",
    "companion_compared_with_a_side_channel": "aux also appends its result to a list main hands it, main compares",
}


def doc_rows() -> list[tuple[str, str, str]]:
    """(label, aux, main) of the shapes above that docs/rewards.md's table lists."""
    rows = [(DOC_LABELS[n], aux, "def shout_words(text):\n" + head + JOIN) for n, aux, head in COMPANIONS
            if n in DOC_LABELS]
    return rows + [(DOC_LABELS[n], aux, main) for n, aux, main in CHECKED]


@pytest.fixture(scope="module")
def sb():
    with Sandbox(workers=2) as box:
        yield box


@pytest.mark.parametrize("name,aux,head", COMPANIONS, ids=[c[0] for c in COMPANIONS])
def test_an_argument_read_back_beside_a_companion_earns_no_bonus(sb, name, aux, head):
    main = "def shout_words(text):\n" + head + JOIN
    seed = code_reward(PROBLEM, aux, main, sandbox=sb, timeout_s=2.0)
    verified = code_reward(PROBLEM, aux, main, sandbox=sb, timeout_s=2.0, cooperation="verified")
    assert (seed.total, verified.tests_passed) == (4.0, 8), seed
    assert verified.total == 2.5, verified
    # refused by the probes (which one says so first depends on their drawn order: rewards.coop_probes)
    assert verified.coop_check and not verified.coop_check.startswith("not probed"), verified


# aux does the work in one part of its result and hands the text back beside it: main uses the work, so the
# bonus stays (the kept text does not make main pass)
HONEST = [
    ("words_beside_the_text", "def aux(text):\n    return (text, text.split())\n", "    words = aux(text)[1]\n"),
    ("words_in_a_dict_beside_the_text", "def aux(text):\n    return {'text': text, 'words': text.split()}\n",
     "    words = aux(text)['words']\n"),
    ("words_after_the_text_in_a_list", "def aux(text):\n    return [text] + text.split()\n",
     "    words = aux(text)[1:]\n"),
]


@pytest.mark.parametrize("name,aux,head", HONEST, ids=[h[0] for h in HONEST])
def test_work_beside_the_argument_keeps_the_bonus(sb, name, aux, head):
    main = "def shout_words(text):\n" + head + "    return ' '.join(w.upper() for w in words) + '!'\n"
    verified = code_reward(PROBLEM, aux, main, sandbox=sb, timeout_s=2.0, cooperation="verified")
    assert verified.total == 4.0, verified


# numbers: an affine map with a small factor (both a shift and a scale at once), and the number read back out of a
# text or a pair that carries a computed companion (each paid 4.0 before)
@pytest.mark.parametrize("aux,undo", [
    ("def aux(n):\n    return 2 * n + 1\n", "(aux(n) - 1) // 2"),
    ("def aux(n):\n    return 7 - 3 * n\n", "(7 - aux(n)) // 3"),
    ("def aux(n):\n    return (n, n * n)\n", "aux(n)[0]"),
    ("def aux(n):\n    return str(n) + ':' + str(n * 3)\n", "int(aux(n).split(':')[0])"),
    ("def aux(n):\n    return n ^ 5\n", "aux(n) ^ 5"),
], ids=["affine", "affine_negative", "pair_with_its_square", "text_with_a_computed_suffix", "bits_flipped"])
def test_a_number_main_reads_back_earns_no_bonus(sb, aux, undo):
    from tests.rewards.test_coop_escapes import NUMERIC
    main = f"def count_up(n):\n    m = {undo}\n    return m * (m + 1) // 2\n"
    seed = code_reward(NUMERIC, aux, main, sandbox=sb, timeout_s=2.0)
    verified = code_reward(NUMERIC, aux, main, sandbox=sb, timeout_s=2.0, cooperation="verified")
    assert (seed.total, verified.total) == (4.0, 2.5), verified


# `copy.deepcopy`'s memo maps each object's id to its copy: `id` by another name, through which main can tell
# whether it got the very object aux returned (the probes hand it another) and fail every probe (paid 4.0 before)
DEEPCOPY_IDENTITY = ("def aux(text, box):\n    r = [text, len(text)]\n    box.append(r)\n    return r\n",
                     "import copy\ndef shout_words(text):\n    box = []\n    r = aux(text, box)\n    m = {}\n"
                     "    copy.deepcopy([r, box[0]], m)\n    if len(m) != 3:\n        return None\n"
                     "    s = r[0]\n" + JOIN)


def test_object_ids_through_deepcopy_are_not_probed(sb):
    verified = code_reward(PROBLEM, *DEEPCOPY_IDENTITY, sandbox=sb, timeout_s=2.0, cooperation="verified")
    assert verified.tests_passed == 8 and verified.total == 2.5, verified
    assert verified.coop_check == "not probed: main reads .deepcopy", verified


def test_a_program_with_the_wrapper_is_compiled_once_for_all_and_runs_as_its_source():
    # the wrapper (3/4 of a probe program) is compiled once and linked into each program (`compile_program`):
    # every mode gives what the program compiled from its source gives
    from rewards.coop_probes import compile_program, probe_programs, scored_aux
    aux = "def aux(text, k=2):\n    return (text, len(text) * k)\n"
    main = "\ndef main(text):\n    return [aux(text), aux(text + 'x'), aux('')]\n"
    for source in [scored_aux(aux)] + [replacement for _, replacement in probe_programs(aux)]:
        linked, plain = {}, {}
        exec(compile_program(source + main), linked)
        exec(compile(source + main, "<program>", "exec"), plain)
        try:
            want = plain["main"]("ab")
        except RuntimeError:   # the raise probe
            with pytest.raises(RuntimeError):
                linked["main"]("ab")
            continue
        assert linked["main"]("ab") == want
    plain_program = "def f():\n    return 1\n"   # no wrapper: compiled as it is
    assert compile_program(plain_program).co_code == compile(plain_program, "<program>", "exec").co_code


@pytest.mark.parametrize("name,aux,main", CHECKED, ids=[u[0] for u in CHECKED])
def test_a_main_that_checks_what_aux_hands_it_earns_no_bonus_when_aux_only_moves_it(sb, name, aux, main):
    verified = code_reward(PROBLEM, aux, main, sandbox=sb, timeout_s=2.0, cooperation="verified")
    assert (verified.tests_passed, verified.total) == (8, 2.5), verified
    assert verified.coop_check.startswith("aux's results are its arguments"), verified


# Issue 42: the derived probe's rule. An aux whose result only moves, wraps, re-encodes or re-joins what it was given
# commutes with a renaming of its strings' characters (each occurrence its own letter), so aux(rename(args)) ==
# rename(aux(args)) marks the call structure-only, whatever the shape. Each was paid 4.0 before (the list
# first, then shapes beyond it); main reads the text back out of aux's result and does the work itself.
RENAMED = [
    ("unwrapped_from_a_list", "def aux(x):\n    return x[0]\n", "    s = aux([text, 0])\n"),
    ("unwrapped_from_a_dict", "def aux(d):\n    return d['t']\n", "    s = aux({'t': text})\n"),
    ("affix_main_added_stripped", "def aux(t):\n    return t[1:-1]\n", "    s = aux('<' + text + '>')\n"),
    ("pieces_joined", "def aux(a, b):\n    return a + b\n", "    s = aux(text[:1], text[1:])\n"),
    ("rotated", "def aux(t):\n    return t[1:] + t[:1]\n", "    r = aux(text)\n    s = r[-1:] + r[:-1]\n"),
    ("interleaved", "def aux(t):\n    return t[::2] + t[1::2]\n",
     "    r = aux(text)\n    h = (len(r) + 1) // 2\n"
     "    s = ''.join(a + b for a, b in zip(r[:h], r[h:] + ' '))[:len(r)]\n"),
    ("halves_swapped", "def aux(t):\n    h = len(t) // 2\n    return t[h:] + t[:h]\n",
     "    r = aux(text)\n    h = len(r) - len(r) // 2\n    s = r[h:] + r[:h]\n"),
    ("zero_filled", "def aux(t):\n    return t.zfill(40)\n", "    s = aux(text)[40 - len(text):]\n"),
    ("str_of_the_characters", "def aux(t):\n    return str(list(t))\n",
     "    s = ''.join(c[1:-1] for c in aux(text)[1:-1].split(', ')).replace(chr(92) + 't', chr(9))\n"),
    ("json_of_the_characters", "import json\ndef aux(t):\n    return json.dumps(list(t))\n",
     "    s = ''.join(json.loads(aux(text)))\n"),
    # beyond the list
    ("rotated_by_two", "def aux(t):\n    return t[2:] + t[:2]\n", "    r = aux(text)\n    s = r[-2:] + r[:-2]\n"),
    ("three_pieces_permuted", "def aux(a, b, c):\n    return c + a + b\n",
     "    k = len(text) // 3\n    r = aux(text[:k], text[k:2 * k], text[2 * k:])\n"
     "    s = r[len(text) - 2 * k:] + r[:len(text) - 2 * k]\n"),
    ("chunks_of_three", "def aux(t):\n    return [t[i:i + 3] for i in range(0, len(t), 3)]\n",
     "    s = ''.join(aux(text))\n"),
    ("centred", "def aux(t):\n    return t.center(40, '.')\n", "    s = aux(text).strip('.')\n"),
    ("repr_of_the_text", "def aux(t):\n    return repr(t)\n", "    s = aux(text)[1:-1].replace('\\\\t', chr(9))\n"),
    ("nested_in_a_dict_of_lists", "def aux(t):\n    return {'x': [t, [t]]}\n", "    s = aux(text)['x'][1][0]\n"),
    ("separator_reversed", "def aux(t):\n    return '-'.join(t[::-1])\n", "    s = aux(text)[::2][::-1]\n"),
]
# numbers (the rule's counterpart: a number read back out of a digit form, a ratio, a quotient or divmod)
RENAMED_NUMBERS = [
    ("halved", "def aux(n):\n    return n / 2\n", "int(aux(2 * n))"),
    ("doubled_as_text", "def aux(n):\n    return str(2 * n)\n", "int(aux(n)) // 2"),
    ("digit_list", "def aux(n):\n    return [int(d) for d in str(n)]\n", "int(''.join(map(str, aux(n))))"),
    ("divmod", "def aux(n):\n    return divmod(n, 7)\n", "aux(n)[0] * 7 + aux(n)[1]"),
    ("factor_main_added_divided_out", "def aux(n):\n    return n // 3\n", "aux(3 * n)"),
    ("zero_filled_number", "def aux(n):\n    return str(n).zfill(9)\n", "int(aux(n))"),
    # beyond the list
    ("three_quarters", "def aux(n):\n    return n * 3 / 4\n", "round(aux(n) * 4 / 3)"),
    ("tens_and_units", "def aux(n):\n    return [n // 10, n % 10]\n", "aux(n)[0] * 10 + aux(n)[1]"),
    ("formatted", "def aux(n):\n    return f'{n:08d}'\n", "int(aux(n))"),
    ("as_float", "def aux(n):\n    return float(n)\n", "int(aux(n))"),
]


@pytest.mark.parametrize("name,aux,head", RENAMED, ids=[r[0] for r in RENAMED])
def test_an_aux_that_only_moves_its_text_earns_no_bonus(sb, name, aux, head):
    imports = "import json\n" if "json" in aux else ""
    main = imports + "def shout_words(text):\n" + head + JOIN
    seed = code_reward(PROBLEM, aux, main, sandbox=sb, timeout_s=2.0)
    verified = code_reward(PROBLEM, aux, main, sandbox=sb, timeout_s=2.0, cooperation="verified")
    assert (seed.total, seed.tests_passed) == (4.0, 8), seed
    assert verified.total == 2.5, verified
    assert verified.coop_check and not verified.coop_check.startswith("not probed"), verified


@pytest.mark.parametrize("name,aux,undo", RENAMED_NUMBERS, ids=[r[0] for r in RENAMED_NUMBERS])
def test_an_aux_that_only_moves_its_number_earns_no_bonus(sb, name, aux, undo):
    from tests.rewards.test_coop_escapes import NUMERIC
    main = f"def count_up(n):\n    m = {undo}\n    return m * (m + 1) // 2\n"
    seed = code_reward(NUMERIC, aux, main, sandbox=sb, timeout_s=2.0)
    verified = code_reward(NUMERIC, aux, main, sandbox=sb, timeout_s=2.0, cooperation="verified")
    assert (seed.total, verified.total) == (4.0, 2.5), verified


# the renaming tells work apart: a split on a separator, a case change, a comparison, a count
WORK = [
    ("split_on_whitespace", "def aux(text):\n    return text.split()\n",
     "    words = aux(text)\n    return ' '.join(w.upper() for w in words) + '!'\n"),
    ("upper_cased", "def aux(text):\n    return text.upper()\n",
     "    s = aux(text)\n    return ' '.join(s.split()) + '!'\n"),
    ("words_and_their_count", "def aux(text):\n    return (len(text.split()), text.split())\n",
     "    n, words = aux(text)\n    return ' '.join(w.upper() for w in words[:n]) + '!'\n"),
]


@pytest.mark.parametrize("name,aux,body", WORK, ids=[w[0] for w in WORK])
def test_an_aux_whose_result_does_not_commute_with_the_renaming_keeps_the_bonus(sb, name, aux, body):
    verified = code_reward(PROBLEM, aux, "def shout_words(text):\n" + body, sandbox=sb, timeout_s=2.0,
                           cooperation="verified")
    assert verified.total == 4.0, verified


# Main's "not a thin wrapper" credit: aux solves the whole problem and main hands back what aux returned, in a
# form equal to it (4.0 for 3 characters before issue 42). The main-bypass probe runs aux alone on main's
# arguments; it passes main's tests, so the credit (1.0) is refused: 3.0, what a thin wrapper gets
WHOLE = "def aux(text):\n    return ' '.join(w.upper() for w in text.split()) + '!'\n"


@pytest.mark.parametrize("tail", ["r[:]", "str(r)", "''.join(r)", "'%s' % r"])
def test_a_main_that_only_hands_back_what_aux_solved_is_a_thin_wrapper(sb, tail):
    main = f"def shout_words(text):\n    r = aux(text)\n    return {tail}\n"
    seed = code_reward(PROBLEM, WHOLE, main, sandbox=sb, timeout_s=2.0)
    verified = code_reward(PROBLEM, WHOLE, main, sandbox=sb, timeout_s=2.0, cooperation="verified")
    assert seed.total == 4.0, seed
    assert (verified.total, verified.not_wrapper) == (3.0, False), verified
    assert verified.coop_check.startswith("main adds nothing aux does not do"), verified


def test_a_main_that_adds_work_to_aux_keeps_the_credit(sb):
    aux = "def aux(text):\n    return [w.upper() for w in text.split()]\n"
    main = "def shout_words(text):\n    words = aux(text)\n    return ' '.join(words) + '!'\n"
    verified = code_reward(PROBLEM, aux, main, sandbox=sb, timeout_s=2.0, cooperation="verified")
    assert (verified.total, verified.not_wrapper) == (4.0, True), verified


def test_many_aux_calls_with_a_long_argument_stay_within_the_stand_in_budget(sb):
    # issue 42: the wrapper built its argument views on every call without charging them (16,000 calls with a
    # 1,000-character argument: 2.7-6.3 s); they count against the run's stand-in budget now
    problem = {"prompt": "def count_a(text: str) -> int:\n    '''How often 'a' occurs, 16,000 times over.'''\n",
               "test": "def check(candidate):\n    assert candidate('a' * 1000) == 16000000\n"
                       "    assert candidate('b' * 1000) == 0\n",
               "entry_point": "count_a"}
    aux = "def aux(text):\n    return text.count('a')\n"
    main = ("def count_a(text):\n    total = 0\n    for _ in range(16000):\n        total += aux(text)\n"
            "    return total\n")
    t0 = time.monotonic()
    verified = code_reward(problem, aux, main, sandbox=sb, timeout_s=10.0, cooperation="verified")
    assert (verified.tests_passed, verified.timeouts) == (2, 0), verified
    assert time.monotonic() - t0 < 8, verified


# The cheapest non-work shapes verified mode still pays after issue 42 (docs/rewards.md, "What a policy reaches
# most cheaply"): (name, aux, main's first lines, characters beyond a lone correct main)
STILL_PAID = [
    ("hex_of_the_utf8_bytes", "def aux(t):\n    return t.encode().hex()\n",
     "    s = bytes.fromhex(aux(text)).decode()\n", 79),
    ("rotation_behind_a_flag", "def aux(t, f):\n    return t[1:] + t[:1] if f == 'r' else t\n",
     "    r = aux(text, 'r')\n    s = r[-1:] + r[:-1]\n", 103),
    ("character_shift", "def aux(t):\n    return ''.join(chr(ord(c) + 1) for c in t)\n",
     "    s = ''.join(chr(ord(c) - 1) for c in aux(text))\n", 108),
    ("rotation_when_the_text_holds_a_space", "def aux(t):\n    return t[1:] + t[:1] if ' ' in t else t\n",
     "    r = aux(text)\n    s = r[-1:] + r[:-1] if ' ' in text else r\n", 117),
]


@pytest.mark.parametrize("name,aux,head,chars", STILL_PAID, ids=[p[0] for p in STILL_PAID])
def test_the_cheapest_shapes_still_paid(sb, name, aux, head, chars):
    from tests.rewards.test_coop_verified import extra_chars
    main = "def shout_words(text):\n" + head + JOIN
    verified = code_reward(PROBLEM, aux, main, sandbox=sb, timeout_s=2.0, cooperation="verified")
    assert (verified.total, extra_chars(aux, main)) == (4.0, chars), verified


# Issue 42, part 1b: the ints inside containers are renamed too. An order-dependent problem over a list of ints,
# where main undoes aux's move (with aux's argument instead, main's undoing breaks the order: paid 4.0 before)
INT_CASES = [([1, 2, 3], 2), ([], 0), ([5], 5), ([2, 4], -2), ([7, 1, 2], 8), ([3, 3], 0), ([-1, 4, -3], -8),
             ([10, 9, 8, 7], 2)]
INT_PROBLEM = {"prompt": "def alternating_sum(xs: list) -> int:\n    '''xs[0] - xs[1] + xs[2] - xs[3] + ...'''\n",
               "test": "def check(candidate):\n" + "".join(f"    assert candidate({a!r}) == {b!r}\n"
                                                        for a, b in INT_CASES),
               "entry_point": "alternating_sum"}
INT_ALONE = "def alternating_sum(xs):\n    return sum(x if i % 2 == 0 else -x for i, x in enumerate(xs))\n"
INT_WORK = "    return sum(x if i % 2 == 0 else -x for i, x in enumerate(s))\n"
# (name, aux, main's first lines: `s` is the list main reads back out of aux's result)
INT_MOVES = [
    ("rotation", "def aux(xs):\n    return xs[1:] + xs[:1]\n", "    r = aux(xs)\n    s = r[-1:] + r[:-1]\n"),
    ("interleave", "def aux(xs):\n    return xs[::2] + xs[1::2]\n",
     "    r = aux(xs)\n    h = (len(r) + 1) // 2\n    s = list(r)\n    s[::2], s[1::2] = r[:h], r[h:]\n"),
    ("swapped_halves", "def aux(xs):\n    h = len(xs) // 2\n    return xs[h:] + xs[:h]\n",
     "    r = aux(xs)\n    h = len(r) - len(r) // 2\n    s = r[h:] + r[:h]\n"),
    ("a_tuple_rotated", "def aux(xs):\n    return tuple(xs[1:] + xs[:1])\n",
     "    r = list(aux(xs))\n    s = r[-1:] + r[:-1]\n"),
    ("a_dicts_values", "def aux(xs):\n    return {'a': xs[1:], 'b': xs[:1]}\n",
     "    d = aux(xs)\n    s = d['b'] + d['a']\n"),
    ("nested_and_reversed", "def aux(xs):\n    return [[x] for x in xs[::-1]]\n",
     "    s = [y[0] for y in aux(xs)][::-1]\n"),
    ("zipped_with_its_rotation", "def aux(xs):\n    return list(zip(xs[1:] + xs[:1], xs))\n",
     "    s = [p[1] for p in aux(xs)]\n"),
    ("the_reversal_numbered", "def aux(xs):\n    return list(enumerate(xs[::-1]))\n",
     "    s = [p[1] for p in aux(xs)][::-1]\n"),
]
INT_HONEST = [
    ("signs_by_position", "def aux(xs):\n    return [x if i % 2 == 0 else -x for i, x in enumerate(xs)]\n",
     "    t = aux(xs)\n    return sum(t)\n"),
    ("differences_of_pairs", "def aux(xs):\n    return [xs[i] - xs[i + 1] for i in range(0, len(xs) - 1, 2)]\n",
     "    t = aux(xs)\n    return sum(t) + (xs[-1] if len(xs) % 2 else 0)\n"),
]
# content maps main inverts: computed, like work (docs/rewards.md); the cheapest int shapes still paid
INT_STILL_PAID = [
    ("items_negated", "def aux(xs):\n    return [-x for x in xs]\n", "    s = [-x for x in aux(xs)]\n", 70),
    ("items_shifted", "def aux(xs):\n    return [x + 1 for x in xs]\n", "    s = [x - 1 for x in aux(xs)]\n", 76),
]


def int_pair(aux: str, head: str) -> tuple[str, str]:
    return aux, "def alternating_sum(xs):\n" + head + ("" if "return" in head else INT_WORK)


@pytest.mark.parametrize("name,aux,head", INT_MOVES, ids=[s[0] for s in INT_MOVES])
def test_a_move_of_the_ints_of_a_list_earns_no_bonus(sb, name, aux, head):
    aux, main = int_pair(aux, head)
    seed = code_reward(INT_PROBLEM, aux, main, sandbox=sb, timeout_s=2.0)
    verified = code_reward(INT_PROBLEM, aux, main, sandbox=sb, timeout_s=2.0, cooperation="verified")
    assert (seed.total, verified.total, verified.tests_passed) == (4.0, 2.5, 8), verified
    assert verified.coop_check.startswith("aux's results are its arguments moved"), verified


@pytest.mark.parametrize("name,aux,head", INT_HONEST, ids=[s[0] for s in INT_HONEST])
def test_work_on_the_ints_of_a_list_keeps_the_bonus(sb, name, aux, head):
    aux, main = int_pair(aux, head)
    verified = code_reward(INT_PROBLEM, aux, main, sandbox=sb, timeout_s=2.0, cooperation="verified")
    assert verified.total == 4.0, verified


@pytest.mark.parametrize("name,aux,head,chars", INT_STILL_PAID, ids=[s[0] for s in INT_STILL_PAID])
def test_the_cheapest_int_shapes_still_paid(sb, name, aux, head, chars):
    aux, main = int_pair(aux, head)
    verified = code_reward(INT_PROBLEM, aux, main, sandbox=sb, timeout_s=2.0, cooperation="verified")
    assert (verified.total, len(aux) + len(main) - len(INT_ALONE)) == (4.0, chars), verified


def test_a_sort_is_work_unless_the_tests_inputs_are_sorted_already(sb):
    # sorting moves the items by what they are: the renamed items come back in another order, so an aux that sorts
    # keeps the bonus; on inputs the tests give sorted already, the same aux hands main its argument: 2.5
    def problem(cases):
        return {"prompt": "def top_two(xs: list) -> int:\n    '''The sum of the two largest items.'''\n",
                "test": "def check(candidate):\n" + "".join(f"    assert candidate({a!r}) == {b!r}\n"
                                                         for a, b in cases),
                "entry_point": "top_two"}
    aux = "def aux(xs):\n    return sorted(xs, reverse=True)\n"
    main = "def top_two(xs):\n    t = aux(xs)\n    return t[0] + t[1]\n"
    unsorted = problem([([1, 5, 3], 8), ([2, 2], 4), ([10, -1, 7, 3], 17), ([4, 9, 8, 1, 0], 17)])
    presorted = problem([([5, 3, 1], 8), ([2, 2], 4), ([10, 7, 3, -1], 17), ([9, 8, 4, 1, 0], 17)])
    for case, expected in ((unsorted, 4.0), (presorted, 2.5)):
        verified = code_reward(case, aux, main, sandbox=sb, timeout_s=2.0, cooperation="verified")
        assert (verified.tests_passed, verified.total) == (4, expected), verified
