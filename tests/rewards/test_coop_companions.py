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


# What the probes cannot tell apart (docs/rewards.md): a main that checks what aux hands it against its own
# computation, or against what aux tells it through a list main handed it (a side channel): both still 4.0
UNTOLD = [
    (
        "companion_checked_by_main",
        "def aux(text):\n    return (text, len(text))\n",
        "def shout_words(text):\n    r = aux(text)\n    if r[1] != len(text):\n        return None\n    s = r[0]\n"
        + JOIN,
    ),
    (
        "companion_compared_with_a_side_channel",
        "def aux(text, box):\n    r = (text, len(text) % 3)\n    box.append(r)\n    return r\n",
        "def shout_words(text):\n    box = []\n    r = aux(text, box)\n    if r != box[0]:\n        return None\n"
        "    s = r[0]\n" + JOIN,
    ),
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
    "companion_checked_by_main": "aux returns `(text, len(text))`, main checks the length (not told apart)",
    "companion_compared_with_a_side_channel":
        "aux also appends its result to a list main hands it, main compares (not told apart)",
}


def doc_rows() -> list[tuple[str, str, str]]:
    """(label, aux, main) of the shapes above that docs/rewards.md's table lists."""
    rows = [(DOC_LABELS[n], aux, "def shout_words(text):\n" + head + JOIN) for n, aux, head in COMPANIONS
            if n in DOC_LABELS]
    return rows + [(DOC_LABELS[n], aux, main) for n, aux, main in UNTOLD]


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


@pytest.mark.parametrize("name,aux,main", UNTOLD, ids=[u[0] for u in UNTOLD])
def test_a_main_that_checks_what_aux_hands_it_is_not_told_apart(sb, name, aux, main):
    # docs/rewards.md, "What the bonus can and cannot tell apart": any probe changes what main gets, and a main
    # that checks it sees the change; these stay paid (a test that says so, so that the docs stay true)
    verified = code_reward(PROBLEM, aux, main, sandbox=sb, timeout_s=2.0, cooperation="verified")
    assert verified.total == 4.0, verified
