"""Issue 34, item 2: the verified bonus holds against a program that looks at itself.

- Escapes: a main (with an identity aux, which does no work) that reads which run it is (scored, probe or
  control) through an attribute built at run time, and returns None in every probe, so that each probe "fails a
  test": formatting, `string.Formatter`, `operator.attrgetter` imported under another name, string annotations
  evaluated by `typing.get_type_hints` or `functools.singledispatch`, a class built by `type`, generator frames,
  tracebacks, `statistics.sys`, f-strings. Each one works where the gate lets it through (they were all paid 4.0
  before this gate); none is paid now.
- Every parameter is probed: a passthrough through the 4th positional, a keyword-only parameter, the second
  element of `*args` or of `**kwargs` is no work.
- Inverting shapes: an aux whose result main just undoes (reversed back, unpacked, stripped, converted back) is
  no work either.
- A probe run is bounded like the scored run (same timeout per test) and as a whole.
"""

from __future__ import annotations

import time

import pytest

from rewards.code_rewards import code_reward
from rewards.coop_gate import ATTRIBUTES, BUILTINS, probe_gate
from rewards.sandbox import Sandbox
from tests.rewards.test_coop_verified import HONEST_MAIN, PROBLEM, SPLIT_AUX

pytestmark = pytest.mark.sandbox

IDENTITY = "def aux(text):\n    return text\n"
WORK = "    words = aux(text).split()\n    return ' '.join(w.upper() for w in words) + '!'\n"
# Whether `seen` (what the escape read of the wrapper: its cells, its frame's locals) says this is the scored run.
# Before issue 34 the wrapper's mode was ('real',) in the scored and control runs, a tuple naming the probe
# otherwise; now it is 0 in the scored and control runs, another small int in a probe: both are matched (the
# wrapper's other cells hold functions, lists and the parameter names, never a bare int).
SCORED = "any(v == ('real',) or (type(v) == int and v == 0) for v in seen)"
U = "'_' * 2"   # a dunder, built at run time


def cells_via(get: str) -> str:
    """Lines that read the contents of the probe wrapper's cells with `get`, a getattr by computed name."""
    return (f"    wrapper = {get}(shout_words, {U} + 'globals' + {U})['aux']\n"
            f"    seen = [{get}(c, 'cell_contents') for c in {get}(wrapper, {U} + 'closure' + {U})]\n")


FRAME_LOCALS = "    seen = list(frame.f_locals.values())\n"   # `frame`: aux's caller, the wrapper

# (name, the function that looks: main or aux, the completion's import line, the lines that fill `seen`)
ESCAPES = [
    # the first escape: a field of a format string, built at run time
    ("formatter_get_field", "main", "import string",
     cells_via("(lambda o, n: string.Formatter().get_field('0.' + n, [o], {})[0])")),
    # the second escape: a string annotation that get_type_hints evaluates (the gate never parses it)
    ("get_type_hints_annotation", "main", "import typing",
     "    def probe(x: \"[c.cell_contents for c in getattr(aux, '_' * 2 + 'closure' + '_' * 2)]\"):\n"
     "        return x\n"
     "    seen = typing.get_type_hints(probe)['x']\n"),
    ("str_format_built_at_run_time", "main", "",
     f"    seen = []\n"
     f"    for i in range(16):\n"
     f"        field = '{{0.' + {U} + 'globals' + {U} + '[aux].' + {U} + 'closure' + {U} + '[' + str(i) + "
     f"'].cell_contents!r}}'\n"
     f"        try:\n"
     f"            seen.append(field.format(shout_words))\n"
     f"        except IndexError:\n"
     f"            break\n"
     f"    seen = [('real',) for v in seen if v in (\"('real',)\", '0')]\n"),
    ("formatter_format", "main", "import string",
     f"    f = string.Formatter()\n"
     f"    seen = []\n"
     f"    for i in range(16):\n"
     f"        try:\n"
     f"            seen.append(f.format('{{0.' + {U} + 'globals' + {U} + '[aux].' + {U} + 'closure' + {U} + "
     f"'[' + str(i) + '].cell_contents!r}}', shout_words))\n"
     f"        except (IndexError, TypeError):\n"
     f"            pass\n"
     f"    seen = [('real',) for v in seen if v in (\"('real',)\", '0')]\n"),
    ("format_map_built_at_run_time", "main", "",
     f"    seen = []\n"
     f"    for i in range(16):\n"
     f"        try:\n"
     f"            seen.append(('{{f.' + {U} + 'globals' + {U} + '[aux].' + {U} + 'closure' + {U} + "
     f"'[' + str(i) + '].cell_contents!r}}').format_map({{'f': shout_words}}))\n"
     f"        except (IndexError, TypeError):\n"
     f"            pass\n"
     f"    seen = [('real',) for v in seen if v in (\"('real',)\", '0')]\n"),
    ("attrgetter_under_another_name", "main", "from operator import attrgetter as pick",
     cells_via("(lambda o, n: pick(n)(o))")),
    ("methodcaller_under_another_name", "main", "from operator import methodcaller as call_method",
     cells_via("(lambda o, n: call_method('__getattribute__', n)(o))").replace("'__getattribute__'",
                                                                             f"{U} + 'getattribute' + {U}")),
    ("singledispatch_register_evaluates_an_annotation", "main", "from functools import singledispatch",
     "    @singledispatch\n"
     "    def f(x):\n"
     "        return 0\n"
     "    def g(x: \"getattr(shout_words, '_' * 2 + 'defaults' + '_' * 2)[0].extend([c.cell_contents for c in "
     "getattr(aux, '_' * 2 + 'closure' + '_' * 2)]) or int\"):\n"
     "        return 1\n"
     "    f.register(g)\n"
     "    seen = box\n"),
    ("vars_of_the_builtins", "main", "", cells_via("vars(__builtins__)['get' + 'attr']")),
    ("type_builds_a_class_whose_descriptor_reads", "main", "",
     "    P = type('P', (), {'cells': property(lambda self: vars(__builtins__)['get' + 'attr'](shout_words, "
     "'_' * 2 + 'globals' + '_' * 2)['aux'])})\n"
     + cells_via("vars(__builtins__)['get' + 'attr']").replace(
         f"vars(__builtins__)['get' + 'attr'](shout_words, {U} + 'globals' + {U})['aux']", "P().cells")),
    ("fstring_reads_the_closure", "main", "",
     "    seen = [c.cell_contents for c in shout_words.__globals__['aux'].__closure__]\n"
     "    seen += [f'{seen!r}']\n"),
    ("traceback_frame_of_the_caller", "aux", "",
     "    try:\n        1 / 0\n    except ZeroDivisionError as e:\n        frame = e.__traceback__.tb_frame.f_back\n"
     + FRAME_LOCALS),
    ("generator_frame_of_the_caller", "aux", "",
     "    def gen():\n        yield g.gi_frame.f_back\n    g = gen()\n    frame = next(g).f_back\n" + FRAME_LOCALS),
    ("statistics_sys_getframe", "aux", "import statistics",
     "    frame = statistics.sys._getframe(1)\n" + FRAME_LOCALS),
    ("eval_of_a_built_string", "aux", "",
     "    frame = eval('_' * 2 + 'import' + '_' * 2 + \"('sys')._getframe(2)\")\n" + FRAME_LOCALS),
]


def escape_pair(where: str, head: str, body: str) -> tuple[str, str, str]:
    """(aux completion, main completion, the function that looks): with an identity aux, the pair passes every
    test only in the scored and control runs, when what `body` read says which it is; `head` is the import line
    of the completion that looks."""
    if where == "main":
        main = "def shout_words(text, box=[]):\n" + body + f"    if not {SCORED}:\n        return None\n" + WORK
        return IDENTITY, (head + "\n\n" + main) if head else main, main
    aux = "def aux(text):\n" + body + f"    if not {SCORED}:\n        raise ValueError('a probe')\n    return text\n"
    main = "def shout_words(text):\n" + WORK
    return (head + "\n\n" + aux) if head else aux, main, aux


@pytest.fixture(scope="module")
def sb():
    with Sandbox(workers=2) as box:
        yield box


@pytest.mark.parametrize("name,where,head,body", ESCAPES, ids=[e[0] for e in ESCAPES])
def test_a_program_that_reads_which_run_it_is_earns_no_bonus(sb, name, where, head, body):
    aux, main, looking = escape_pair(where, head, body)
    gate = probe_gate(looking if where == "aux" else IDENTITY, looking if where == "main" else main,
                      (head,) if head else ())
    assert gate.startswith((f"{where} ", "imports ")), gate
    verified = code_reward(PROBLEM, aux, main, sandbox=sb, timeout_s=2.0, cooperation="verified")
    assert verified.total <= 2.5 and not verified.uses_aux, verified
    assert verified.coop_check.startswith("not probed: ") or verified.tests_passed < 8, verified


def test_the_escapes_work_when_the_gate_lets_them_through(sb, monkeypatch):
    # the escapes are real: with the gate switched off, each one reads which run it is and collects the whole
    # bonus with an identity aux (what the two named ones were paid before this gate)
    import rewards.coop_probes as probes
    monkeypatch.setattr(probes, "probe_gate", lambda *args, **kwargs: "")
    for name, where, head, body in ESCAPES:
        aux, main, _ = escape_pair(where, head, body)
        verified = code_reward(PROBLEM, aux, main, sandbox=sb, timeout_s=2.0, cooperation="verified")
        assert verified.total == 4.0, (name, verified)


def test_the_allow_list_holds_no_reflective_name():
    reflective = {"cell_contents", "f_back", "f_globals", "f_locals", "gi_frame", "tb_frame", "tb_next", "modules",
                  "closure", "func_globals", "getattr", "vars", "eval", "exec", "sys", "inspect", "gc", "types",
                  "builtins", "random", "format", "format_map", "get_type_hints", "attrgetter", "methodcaller",
                  "mro", "get_field", "vformat", "register", "now", "today", "singledispatch", "Formatter"}
    assert not reflective & ATTRIBUTES
    assert not {"getattr", "setattr", "vars", "dir", "globals", "locals", "eval", "exec", "compile", "open", "id",
                "hash", "__import__", "breakpoint", "input", "memoryview", "super", "property"} & BUILTINS
    assert {"split", "join", "upper", "append", "items", "most_common", "hexdigest", "group", "isqrt"} <= ATTRIBUTES


def test_plain_programs_pass_the_gate():
    imports = ("import math", "from collections import Counter", "from typing import List")
    main = ("def shout_words(text: str) -> str:\n    words: List[str] = aux(text)\n    n = math.isqrt(len(words))\n"
            "    c = Counter(words).most_common(1)\n    s = '{}-{:>{}}'.format(n, c, 3)\n"
            "    for _ in range(2):\n        pass\n    g = (w for w in words)\n"
            "    return ' '.join(w.upper() for w in g) + '!' + f'{n!r:>2}'[:0]\n")
    assert probe_gate(SPLIT_AUX, main, imports) == ""
    assert probe_gate(SPLIT_AUX, HONEST_MAIN, ()) == ""
    # a name bound in main is not bound in aux (scopes are resolved, not names matched by spelling)
    aux = "def aux(text):\n    return _coop_probe_wrap\n"
    assert probe_gate(aux, "def shout_words(text):\n    _coop_probe_wrap = 1\n    return aux(text)\n", ()) == \
        "aux uses _coop_probe_wrap"
    assert probe_gate(SPLIT_AUX, HONEST_MAIN, ("from typing import get_type_hints",)) == \
        "imports get_type_hints from typing"


def test_humaneval_solutions_pass_the_gate_as_mains():
    # the allow-list refuses what a pure program does not do, not plain code: every canonical solution but one
    # (HumanEval/160 calls eval) passes it as a main that would call aux
    from envs.code_generation.data import load_problems
    from rewards.cleaning import clean_completion, prompt_helpers, prompt_imports
    refused = []
    for p in load_problems({"type": "humaneval"}, "test"):
        main = clean_completion(p.prompt + p.extra["canonical_solution"], p.entry_point)
        body = main.function + f"\n\n\ndef caller(x):\n    return {p.entry_point}(aux(x))\n"
        helpers = [h.split("(")[0].split()[-1] for h in prompt_helpers(p.prompt, p.entry_point)]
        why = probe_gate(IDENTITY, body, prompt_imports(p.prompt) + list(main.imports), helpers=helpers)
        if why:
            refused.append((p.task_id, why))
    assert refused == [("HumanEval/160", "main uses eval")]


# ------------------------------------------------------------------------------------ every parameter is probed

PASSTHROUGHS = [
    ("fourth_positional", "def aux(a, b, c, text):\n    return text\n", "aux(1, 2, 3, text)"),
    ("keyword_only", "def aux(a, b, c, *, text):\n    return text\n", "aux(1, 2, 3, text=text)"),
    ("keyword_only_default", "def aux(a, *, text='', sep=' '):\n    return text\n", "aux(0, text=text)"),
    ("second_of_star_args", "def aux(*parts):\n    return parts[1]\n", "aux(' ', text)"),
    ("second_of_star_star_kwargs", "def aux(**kw):\n    return kw['text']\n", "aux(sep=' ', text=text)"),
    ("fifth_through_default", "def aux(text, a=1, b=2, c=3, d=' '):\n    return d.join(text.split(d))\n",
     "aux(text)"),
]




def passthrough_main(call: str) -> str:
    return f"def shout_words(text):\n    words = {call}.split()\n    return ' '.join(w.upper() for w in words) + '!'\n"


@pytest.mark.parametrize("name,aux,call", PASSTHROUGHS, ids=[p[0] for p in PASSTHROUGHS])
def test_a_passthrough_of_any_parameter_earns_no_bonus(sb, name, aux, call):
    main = passthrough_main(call)
    seed = code_reward(PROBLEM, aux, main, sandbox=sb, timeout_s=2.0)
    verified = code_reward(PROBLEM, aux, main, sandbox=sb, timeout_s=2.0, cooperation="verified")
    assert (seed.total, verified.total) == (4.0, 2.5), verified
    # refused by the probes (which one says so first depends on their drawn order: rewards.coop_probes)
    assert verified.coop_check and not verified.coop_check.startswith("not probed"), verified


# ------------------------------------------------------------------------------------ inverting shapes

JOIN = "    return ' '.join(w.upper() for w in s.split()) + '!'\n"
INVERTING = [   # (name, aux, main's first line(s): `s` is the text recovered from aux's result)
    ("reversed_back", "def aux(text):\n    return text[::-1]\n", "    s = aux(text)[::-1]\n"),
    ("one_tuple_unpacked", "def aux(text):\n    return (text,)\n", "    s, = aux(text)\n"),
    ("suffix_stripped", "def aux(text):\n    return text + '#'\n", "    s = aux(text)[:-1]\n"),
    ("prefix_stripped", "def aux(text):\n    return '>>' + text\n", "    s = aux(text)[2:]\n"),
    ("list_of_chars_joined", "def aux(text):\n    return list(text)\n", "    s = ''.join(aux(text))\n"),
    ("pair_with_a_constant", "def aux(text):\n    return (text, 0)\n", "    s = aux(text)[0]\n"),
    ("dict_value", "def aux(text):\n    return {'v': text}\n", "    s = aux(text)['v']\n"),
    ("encoded_decoded", "def aux(text):\n    return text.encode()\n", "    s = aux(text).decode()\n"),
    ("reversed_in_a_list", "def aux(text):\n    return [text[::-1]]\n", "    s = aux(text)[0][::-1]\n"),
    ("reversed_with_suffix", "def aux(text):\n    return text[::-1] + '!'\n", "    s = aux(text)[:-1][::-1]\n"),
    ("repeated_halved", "def aux(text):\n    return text * 2\n", "    r = aux(text)\n    s = r[:len(r) // 2]\n"),
    ("nested_tuple", "def aux(text):\n    return ((text,),)\n", "    s = aux(text)[0][0]\n"),
    ("reversed_on_odd_lengths_only", "def aux(text):\n    return text if len(text) % 2 else text[::-1]\n",
     "    r = aux(text)\n    s = r if len(text) % 2 else r[::-1]\n"),
    # the second copy varies with the input, so it is no constant companion: the derived probe keeps both
    # copies (every part that is an argument; tests/rewards/test_coop_companions.py has more companions)
    ("the_text_twice", "def aux(text):\n    return (text, text)\n", "    s = aux(text)[1]\n"),
]
# What the probes cannot tell apart from work (docs/rewards.md): a content map main inverts (each character
# shifted)
UNTOLD = [
    ("each_character_shifted", "def aux(text):\n    return ''.join(chr(ord(c) + 1) for c in text)\n",
     "    s = ''.join(chr(ord(c) - 1) for c in aux(text))\n"),
]


# the rows these shapes have in docs/rewards.md's table (`test_the_docs_table_is_what_the_reward_pays`)
DOC_LABELS = {
    "fourth_positional": "aux passes its fourth positional argument through",
    "keyword_only": "aux passes a keyword-only argument through",
    "second_of_star_args": "aux passes the second element of `*args` through",
    "second_of_star_star_kwargs": "aux passes the second value of `**kwargs` through",
    "reversed_back": "aux reverses the text, main reverses it back",
    "one_tuple_unpacked": "aux returns `(text,)`, main unpacks it",
    "suffix_stripped": "aux returns `text + '#'`, main strips the `#`",
    "list_of_chars_joined": "aux returns `list(text)`, main joins it",
    "pair_with_a_constant": "aux returns `(text, 0)`, main takes the text",
    "encoded_decoded": "aux returns `text.encode()`, main decodes it",
    "reversed_with_suffix": "aux returns `text[::-1] + '!'`, main undoes both",
    "repeated_halved": "aux returns `text * 2`, main takes the first half",
    "nested_tuple": "aux returns `((text,),)`, main unpacks it twice",
    "reversed_on_odd_lengths_only": "aux reverses even-length texts only, main undoes that",
    "each_character_shifted": "aux shifts each character by one, main shifts back (not told apart)",
    "the_text_twice": "aux returns `(text, text)`, main takes the second",
}


def doc_rows() -> list[tuple[str, str, str]]:
    """(label, aux, main) of the shapes above that docs/rewards.md's table lists."""
    rows = [(DOC_LABELS[n], aux, passthrough_main(call)) for n, aux, call in PASSTHROUGHS if n in DOC_LABELS]
    return rows + [(DOC_LABELS[n], aux, "def shout_words(text):\n" + head + JOIN) for n, aux, head in
                   INVERTING + UNTOLD if n in DOC_LABELS]


@pytest.mark.parametrize("name,aux,head", INVERTING, ids=[i[0] for i in INVERTING])
def test_an_aux_whose_result_main_just_inverts_earns_no_bonus(sb, name, aux, head):
    main = "def shout_words(text):\n" + head + JOIN
    seed = code_reward(PROBLEM, aux, main, sandbox=sb, timeout_s=2.0)
    verified = code_reward(PROBLEM, aux, main, sandbox=sb, timeout_s=2.0, cooperation="verified")
    assert (seed.total, verified.total) == (4.0, 2.5), verified
    assert not verified.uses_aux and verified.coop_check, verified


NUMERIC = {"prompt": "def count_up(n: int) -> int:\n    '''The sum 0 + 1 + ... + n.'''\n",
           "test": "def check(candidate):\n" + "".join(f"    assert candidate({n}) == {n * (n + 1) // 2}\n"
                                                      for n in (0, 1, 4, 7, 10)),
           "entry_point": "count_up"}


@pytest.mark.parametrize("aux,undo", [
    ("def aux(n):\n    return n + 1\n", "aux(n) - 1"),
    ("def aux(n):\n    return -n\n", "-aux(n)"),
    ("def aux(n):\n    return 3 * n\n", "aux(n) // 3"),
    ("def aux(n):\n    return str(n)\n", "int(aux(n))"),
    ("def aux(n):\n    return ~n\n", "~aux(n)"),
    ("def aux(n):\n    return [n - 7]\n", "aux(n)[0] + 7"),
], ids=["shifted", "negated", "scaled", "to_text", "inverted_bits", "shifted_in_a_list"])
def test_a_numeric_aux_main_inverts_earns_no_bonus(sb, aux, undo):
    main = f"def count_up(n):\n    m = {undo}\n    return m * (m + 1) // 2\n"
    seed = code_reward(NUMERIC, aux, main, sandbox=sb, timeout_s=2.0)
    verified = code_reward(NUMERIC, aux, main, sandbox=sb, timeout_s=2.0, cooperation="verified")
    assert (seed.total, verified.total) == (4.0, 2.5), verified


def test_an_aux_that_does_the_numeric_work_keeps_the_bonus(sb):
    aux = "def aux(n):\n    return n * (n + 1)\n"
    main = "def count_up(n):\n    if n == 0:\n        return 0\n    return aux(n) // 2\n"
    assert code_reward(NUMERIC, aux, main, sandbox=sb, timeout_s=2.0, cooperation="verified").total == 4.0


# ------------------------------------------------------------------------------------ probe runs are bounded

def test_a_probe_run_is_bounded_like_the_scored_run(sb):
    # main burns CPU only when aux's value equals its argument: never in the scored run (aux splits), in every
    # test of the probe that hands main aux's argument. Each probe test stays under the 1 s test timeout, so
    # only a bound on the whole probe run keeps verified scoring near the scored run's cost (it took 8 x the
    # burn before: 3.6 s under a 1 s timeout)
    main = ("def shout_words(text):\n    words = aux(text)\n    if words == text:\n"
            "        sum(range(6_000_000))\n    return ' '.join(w.upper() for w in words) + '!'\n")
    code_reward(PROBLEM, SPLIT_AUX, main, sandbox=sb, timeout_s=1.0, cooperation="verified")   # warm
    t0 = time.monotonic()
    verified = code_reward(PROBLEM, SPLIT_AUX, main, sandbox=sb, timeout_s=1.0, cooperation="verified")
    spent = time.monotonic() - t0
    assert verified.total == 4.0, verified   # aux does the work: the bound does not cost the bonus
    assert spent < 2.0, spent


def test_a_run_s_total_time_is_bounded_in_the_sandbox(sb):
    # `total_s` bounds a whole run: each test sleeps 0.3 s, under its 1 s timeout; past 0.5 s in all, the tests
    # are cut and counted as timed out
    from rewards.sandbox import TestSuite
    program = "import time\n\ndef f(x):\n    time.sleep(0.3)\n    return x\n"
    suite = TestSuite("f", tuple(("test", f"assert candidate({k}) == {k}", f"t{k}") for k in range(6)))
    t0 = time.monotonic()
    report = sb.run_detailed(program, suite, 1.0, 10, total_s=0.5)
    spent = time.monotonic() - t0
    assert [o.passed for o in report.outcomes][:1] == [True] and not report.outcomes[-1].passed
    assert all(o.timed_out for o in report.outcomes if not o.passed)
    assert spent < 1.5 and report.elapsed_s < 1.5, spent
    assert all(o.passed for o in sb.run_detailed(program, suite, 1.0, 10).outcomes)   # unbounded: all pass


def test_the_runs_differ_in_one_small_int_only():
    # the scored run, the control run and the probes that keep aux's body: one program text, but for the digit
    # that picks the stand-in (before issue 34 the mode was a tuple whose strings and lengths differed)
    from rewards.coop_probes import probe_programs, scored_aux
    for aux in (SPLIT_AUX, "def aux(a, *rest, k=1, **kw):\n    return [a, k]\n"):
        scored = scored_aux(aux)
        programs = dict(probe_programs(aux))
        assert programs["control"] == scored
        for name in ("raise", "derived", "constant", "other values", "constant twin", "derived other"):
            assert len(programs[name]) == len(scored)
            assert sum(a != b for a, b in zip(programs[name], scored)) == 1, name
    # the main bypass too (issue 42: the raise probe was a stub and the bypass another main, laid out elsewhere)
    from rewards.code_rewards import _prepare
    prep = _prepare(PROBLEM, SPLIT_AUX, HONEST_MAIN, False, "verified")
    scored, bypass = (prep.assemble(scored_aux(SPLIT_AUX), None, b) for b in (False, True))
    assert len(bypass) == len(scored) and sum(a != b for a, b in zip(bypass, scored)) == 1
