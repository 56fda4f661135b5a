"""Verified cooperation (`code_reward.cooperation: verified`, rewards/coop_probes.py): the bonus is paid for what
runs. The hack shapes the seed's rule pays (an identity aux, a constant joined to the answer, an aux that always
raises inside main's try, a call in a branch that never runs, a main that passes 1 test of 8 while branching on
aux) earn nothing in verified mode; honest pairs keep 4.0, scaled by the share of tests passed; programs that
could tell the probes apart are not probed. Also: the data-flow analysis of the seed's rule is bounded."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from cooprl.config import ConfigError, Run, load_config  # noqa: E402
from rewards.code_rewards import code_reward, code_rewards_batch  # noqa: E402
from rewards.coop_probes import probe_gate  # noqa: E402
from rewards.sandbox import Sandbox  # noqa: E402
from tests.rewards.test_cooperation import degenerate_main  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PROMPT = ('def shout_words(text: str) -> str:\n    """Upper-case the words of text, join them with one space and '
          'end with "!"."""\n')
CASES_IO = [("hi there", "HI THERE!"), ("a  b", "A B!"), ("", "!"), ("one", "ONE!"), ("x y z", "X Y Z!"),
            ("Mixed Case", "MIXED CASE!"), ("  lead", "LEAD!"), ("tab\tsep", "TAB SEP!")]
TEST = "def check(candidate):\n" + "".join(f"    assert candidate({a!r}) == {b!r}\n" for a, b in CASES_IO)
PROBLEM = {"prompt": PROMPT, "test": TEST, "entry_point": "shout_words"}

SPLIT_AUX = "def aux(text):\n    return text.split()\n"
HONEST_MAIN = "def shout_words(text):\n    words = aux(text)\n    return ' '.join(w.upper() for w in words) + '!'\n"
OWN_WORK = "    return ' '.join(w.upper() for w in text.split()) + '!'\n"
NO_AUX_MAIN = "def shout_words(text):\n" + OWN_WORK

# name, aux, main, seed total, verified total
HACKS = [
    ("identity_aux", "def aux(text):\n    return text\n",
     "def shout_words(text):\n    words = aux(text).split()\n    return ' '.join(w.upper() for w in words) + '!'\n",
     4.0, 2.5),
    ("identity_by_copy", "def aux(text):\n    return str(text[:])\n",
     "def shout_words(text):\n    words = aux(text).split()\n    return ' '.join(w.upper() for w in words) + '!'\n",
     4.0, 2.5),
    ("passthrough_of_second_argument", "def aux(sep, text):\n    return text\n",
     "def shout_words(text):\n    words = aux(' ', text).split()\n    return ' '.join(w.upper() for w in words) + "
     "'!'\n",
     4.0, 2.5),
    ("empty_string_joined", "def aux(text):\n    return ''\n",
     "def shout_words(text):\n    out = ' '.join(w.upper() for w in text.split()) + '!'\n    return out + aux(text)\n",
     4.0, 2.5),
    ("zero_added", "def aux(text):\n    return len(text) * 0\n",
     "def shout_words(text):\n    n = aux(text)\n    words = text.split()[n:]\n    return ' '.join(w.upper() for w in "
     "words) + '!'\n",
     4.0, 2.5),
    ("always_raises_inside_try", "def aux(text):\n    if len(text) >= 0:\n        raise ValueError(text)\n    return "
                                 "text\n",
     "def shout_words(text):\n    try:\n        words = aux(text)\n    except ValueError:\n        words = "
     "text.split()\n"
     "    return ' '.join(w.upper() for w in words) + '!'\n",
     4.0, 2.5),
    ("dead_branch", SPLIT_AUX,
     "def shout_words(text):\n    if text != text:\n        return aux(text)\n" + OWN_WORK, 4.0, 2.5),
    ("called_but_result_unused_in_tests", SPLIT_AUX,
     "def shout_words(text):\n    words = aux(text)\n    if len(words) > 100:\n        return 'long'\n" + OWN_WORK,
     4.0, 2.5),
    ("identity_through_star_args", "def aux(*parts):\n    return parts[0]\n",
     "def shout_words(text):\n    words = aux(text).split()\n    return ' '.join(w.upper() for w in words) + '!'\n",
     4.0, 2.5),
    # aux tells main it ran through a list main hands it (a side channel), and passes the text through
    ("identity_with_side_channel", "def aux(text, box):\n    box.append(len(text))\n    return text\n",
     "def shout_words(text):\n    box = []\n    words = aux(text, box).split()\n    if box != [len(text)]:\n"
     "        return None\n    return ' '.join(w.upper() for w in words) + '!'\n", 4.0, 2.5),
    # a constant aux that calls itself with a marker, so that a naive wrapper would cache the marker
    ("constant_with_recursive_marker", "def aux(text, inner=False):\n    if inner:\n        return 'S'\n"
     "    if aux(text, True) != 'S':\n        return 'x'\n    return ''\n",
     "def shout_words(text):\n    out = ' '.join(w.upper() for w in text.split()) + '!'\n    return out + aux(text)\n",
     4.0, 2.5),
    # aux copies its argument; main mutates the copy and checks that the argument did not change (aliasing would
    # tell a probe that hands the argument object back apart from the real aux)
    ("copy_with_aliasing_check", "def aux(words):\n    return list(words)\n",
     "def shout_words(text):\n    ws = text.split()\n    r = aux(ws)\n    r.append('!')\n    if ws[-1:] == ['!']:\n"
     "        return None\n    return ' '.join(w.upper() for w in r[:-1]) + '!'\n", 4.0, 2.5),
    # a sentinel check: is aux the identity? it is, in the probe that passes the argument through, too
    ("identity_sentinel_check", "def aux(text):\n    return text\n",
     "def shout_words(text):\n    if aux('#') != '#':\n        return None\n    words = aux(text).split()\n"
     "    return ' '.join(w.upper() for w in words) + '!'\n", 4.0, 2.5),
]


@pytest.fixture(scope="module")
def sb():
    with Sandbox(workers=2) as box:
        yield box


def both(sb, aux, main, problem=PROBLEM):
    seed = code_reward(problem, aux, main, sandbox=sb, timeout_s=2.0)
    verified = code_reward(problem, aux, main, sandbox=sb, timeout_s=2.0, cooperation="verified")
    return seed, verified


@pytest.mark.parametrize("name,aux,main,seed_total,verified_total", HACKS, ids=[h[0] for h in HACKS])
def test_hack_shapes_earn_no_bonus_in_verified_mode(sb, name, aux, main, seed_total, verified_total):
    seed, verified = both(sb, aux, main)
    assert seed.total == seed_total and seed.cooperation == "seed"
    assert verified.tests_passed == 8
    assert verified.total == verified_total, verified
    assert not verified.uses_aux and verified.coop_check and verified.cooperation == "verified"


def test_honest_pair_keeps_the_maximum_and_a_correct_main_without_aux_keeps_2_5(sb):
    seed, verified = both(sb, SPLIT_AUX, HONEST_MAIN)
    assert seed.total == verified.total == 4.0
    assert verified.uses_aux and verified.not_wrapper and verified.coop_check == ""
    assert [r.total for r in both(sb, SPLIT_AUX, NO_AUX_MAIN)] == [2.5, 2.5]


def test_bonus_is_scaled_by_the_share_of_tests_passed(sb):
    # 1 test of 8, branching on aux's result: the seed pays the whole bonus (3.125 > 2.5)
    branching = "def shout_words(text):\n    if aux(text) == ['one']:\n        return 'ONE!'\n    return 'no'\n"
    seed, verified = both(sb, SPLIT_AUX, branching)
    # on the one test that passes, aux's result is its argument in a list (['one']): the probes cannot tell aux
    # from `lambda t: [t]` there, so no bonus (1.8125 = 1.5 + 1/8 + 1.5/8 before structure-only transforms counted)
    assert (seed.total, verified.total) == (3.125, 1.625)
    assert verified.total < 2.5 and not verified.uses_aux
    # an honest main that fails the two tests with extra spaces: 6/8 of the bonus
    partial = "def shout_words(text):\n    words = aux(text)\n    return ' '.join(w.upper() for w in words) + '!'" \
              " if '  ' not in text else ''\n"
    seed, verified = both(sb, SPLIT_AUX, partial)
    assert verified.tests_passed == 6
    assert (seed.total, verified.total) == (3.75, 3.375)    # 1.5 + 6/8 + 1.5 * 6/8


# Programs that try to tell the probes apart from the real aux (as a hostile policy would) are not probed.
PROBE_DETECTORS = [
    ("reads_aux_code", "    if aux.__code__.co_argcount != 1:\n        return None\n"),
    ("aux_as_object", "    if not str(aux).startswith('<function aux '):\n        return None\n"),
    ("globals_lookup", "    if 'aux' not in globals():\n        return None\n"),
    ("identity_compare", "    t = aux(text)\n    if t is text:\n        return None\n"),
    ("frame_walk", "    import sys\n    if sys._getframe(0).f_back is None:\n        return None\n"),
    ("probe_name", "    try:\n        _coop_probe_wrap\n        return None\n    except NameError:\n        pass\n"),
    ("rebinds_a_builtin", "    global type\n    type = lambda v: list\n"),
    ("random_failures", "    import random\n    if random.random() < 0.0:\n        return None\n"),
    ("dunder_in_string", "    if 'str' not in '{0.__class__}'.format(text):\n        return None\n"),
]


@pytest.mark.parametrize("name,head", PROBE_DETECTORS, ids=[p[0] for p in PROBE_DETECTORS])
def test_programs_that_could_tell_the_probes_apart_are_not_probed(sb, name, head):
    main = "def shout_words(text):\n" + head + HONEST_MAIN.split("\n", 1)[1]
    assert probe_gate(SPLIT_AUX, main, ()).startswith("main ")
    verified = code_reward(PROBLEM, SPLIT_AUX, main, sandbox=sb, timeout_s=2.0, cooperation="verified")
    # the scored run of verified mode has aux behind the probes' wrapper too: a detector that looks at the wrapper
    # fails its own tests; one that does not is not probed
    assert verified.tests_passed < 8 or verified.coop_check.startswith("not probed: main "), verified
    assert not verified.uses_aux and verified.total <= 2.5


def test_probe_runs_are_bounded_when_a_probe_loops(sb):
    # aux's real result ends main's loop; the probes' values do not: each probe test gets a bounded time, and a
    # probe whose tests fail only by timing out says nothing (issue 42: time must not decide a probe)
    problem = {"prompt": "def steps(n: int) -> int:\n    '''Square roots until n < 2.'''\n",
               "test": "def check(candidate):\n    assert candidate(16) == 3\n    assert candidate(1) == 0\n",
               "entry_point": "steps"}
    aux = "def aux(n):\n    return int(n ** 0.5)\n"
    main = "def steps(n):\n    k = 0\n    while n >= 2:\n        n = aux(n)\n        k += 1\n    return k\n"
    t0 = time.monotonic()
    result = code_reward(problem, aux, main, sandbox=sb, timeout_s=10.0, cooperation="verified")
    assert result.tests_passed == 2 and result.total == 2.5, result
    assert "did not run to completion" in result.coop_check, result
    assert time.monotonic() - t0 < 15   # not 10 s per test of each probe


# main checks aux's result against its own computation and never finishes when they differ: every probe's tests
# time out, which counted as failed before issue 42 (4.0); a test that did not complete never earns the bonus
STALLS_ON_A_PROBE = ("def shout_words(text):\n    try:\n        words = aux(text)\n    except Exception:\n"
                     "        words = None\n    while words != text.split():\n        pass\n"
                     "    return ' '.join(w.upper() for w in words) + '!'\n")


def test_a_main_that_stalls_on_every_probe_earns_no_bonus(sb):
    result = code_reward(PROBLEM, SPLIT_AUX, STALLS_ON_A_PROBE, sandbox=sb, timeout_s=0.5, cooperation="verified")
    assert (result.tests_passed, result.total) == (8, 2.5), result
    assert "did not run to completion" in result.coop_check, result


def test_cooperation_mode_is_checked():
    with pytest.raises(ValueError, match="cooperation 'trusted'"):
        code_rewards_batch([PROBLEM], [SPLIT_AUX], [HONEST_MAIN], cooperation="trusted")


def test_config_key_reaches_the_reward(monkeypatch):
    config = load_config(ROOT / "configs" / "magrpo_che_cpu.yaml", ["code_reward.cooperation=verified"])
    assert config.task.code_reward.cooperation == "verified"
    assert load_config(ROOT / "configs" / "magrpo_che_cpu.yaml").task.code_reward.cooperation == "seed"
    with pytest.raises(ConfigError, match="code_reward.cooperation"):
        load_config(ROOT / "configs" / "magrpo_che_cpu.yaml", ["code_reward.cooperation=trusting"])
    import envs.code_generation.scoring as scoring_module
    import envs.code_generation.task as task_module
    seen = {}

    def fake_batch(items, aux, main, **kw):
        seen.update(kw)
        return code_rewards_batch(items, aux, main, **kw)

    monkeypatch.setattr(scoring_module, "code_rewards_batch", fake_batch)
    task = task_module.build_code_task(Run.of(config, "magrpo"))
    problem = task.train_items[0]
    task.score([problem], [["def aux(x):\n    return x\n", "return 1\n"]])
    assert seen["cooperation"] == "verified"


# ------------------------------------------------------------------------------ the data-flow analysis is bounded

def test_degenerate_main_earns_no_bonus_in_either_mode(sb):
    problem = {"prompt": "def f(x: list) -> int:\n    '''Zero.'''\n",
               "test": "def check(candidate):\n    assert candidate([]) == 0\n", "entry_point": "f"}
    main = degenerate_main(6).replace("    return c0_11\n", "    return 0 if not x else c0_11\n")
    aux = "def aux(x):\n    return len(x)\n"
    t0 = time.process_time()
    for mode in ("seed", "verified"):
        result = code_reward(problem, aux, main, sandbox=sb, timeout_s=2.0, cooperation=mode)
        assert result.tests_passed == 1 and result.total == 2.5
    assert time.process_time() - t0 < 2.0


# ------------------------------------------------------------------------------ docs/rewards.md says what runs

BRANCHING_MAIN = "def shout_words(text):\n    if aux(text) == ['one']:\n        return 'ONE!'\n    return 'no'\n"
HACK = {h[0]: (h[1], h[2]) for h in HACKS}
DOC_ROWS = [   # the table of docs/rewards.md, row by row: (the row's first cell, aux, main)
    ("honest: aux splits the text, main upper-cases and joins", SPLIT_AUX, HONEST_MAIN),
    ("a correct main that does not call aux", SPLIT_AUX, NO_AUX_MAIN),
    ("identity aux (`def aux(text): return text`), main does everything", *HACK["identity_aux"]),
    ("identity by copy (`return str(text[:])`)", *HACK["identity_by_copy"]),
    ("aux passes its second argument through", *HACK["passthrough_of_second_argument"]),
    ("identity through `*args`", *HACK["identity_through_star_args"]),
    ("identity, and aux appends to a list main hands it (a side channel main checks)",
     *HACK["identity_with_side_channel"]),
    ("a constant `''` from an aux that first calls itself with a marker", *HACK["constant_with_recursive_marker"]),
    ("aux returns a copy of its argument; main mutates it and checks that the argument did not change",
     *HACK["copy_with_aliasing_check"]),
    ("identity with a sentinel check in main (`if aux('#') != '#': return None`)", *HACK["identity_sentinel_check"]),
    ("a constant joined to the answer (`out + aux(text)`, aux returns `''`)", *HACK["empty_string_joined"]),
    ("a constant zero added (`text.split()[aux(text):]`, aux returns 0)", *HACK["zero_added"]),
    ("aux always raises inside main's `try`, main falls back to its own answer", *HACK["always_raises_inside_try"]),
    ("aux called only in a branch that never runs (`if text != text: return aux(text)`)", *HACK["dead_branch"]),
    ("aux's result read only in a branch the tests never take", *HACK["called_but_result_unused_in_tests"]),
    ("main passes 1 test of 8, branching on aux's result", SPLIT_AUX, BRANCHING_MAIN),
]


def extra_chars(aux: str, main: str) -> int:
    """What a pair writes beyond a correct main that does not call aux (characters): how far a policy that already
    solves the problem alone has to go to reach the shape."""
    return len(aux) + len(main) - len(NO_AUX_MAIN)


def test_the_docs_table_is_what_the_reward_pays(sb):
    from tests.rewards.test_coop_escapes import doc_rows   # issue 34's shapes (that file imports this one)
    from tests.rewards.test_coop_companions import doc_rows as companion_rows   # the hostile pass after it
    rows = DOC_ROWS + doc_rows() + companion_rows()
    table = [line for line in (ROOT / "docs" / "rewards.md").read_text(encoding="utf-8").splitlines()
             if line.startswith("| ") and not line.startswith(("| pair", "|---"))]
    assert len(table) == len(rows)
    assert set(HACK.values()) <= {(aux, main) for _, aux, main in rows}   # every hack shape is in the table
    for line, (label, aux, main) in zip(table, rows):
        seed, verified = both(sb, aux, main)
        row = (f"| {label} | {seed.tests_passed}/{seed.tests_total} | {seed.total:g} | {verified.total:g} | "
               f"{extra_chars(aux, main)} |")
        assert line.replace(".0 |", " |").startswith(row), (line, row)


def test_a_pair_past_the_probed_size_is_not_probed(sb):
    # issue 42: a 640 kB honest aux cost 11.4 trainer CPU s per batch (compiled and sent again for every probe);
    # past MAX_PROBED_CHARS the probes do not run and the bonus is refused, in one line of why
    from rewards.coop_probes import MAX_PROBED_CHARS
    table = "    table = [" + ", ".join(repr("w%05d" % i) for i in range(MAX_PROBED_CHARS // 9)) + "]\n"
    aux = "def aux(text):\n" + table + "    return text.split()\n"
    seed, verified = both(sb, aux, HONEST_MAIN)
    assert (seed.total, verified.total, verified.tests_passed) == (4.0, 2.5, 8), verified
    assert verified.coop_check.startswith("not probed: aux and main are "), verified
    assert verified.coop_check.endswith(f"(the probes run pairs of at most {MAX_PROBED_CHARS:,})"), verified


# A pair that reads object addresses: the text of a function, a lambda, an iterator, a bound method and a map
# object, an f-string of a lambda, and the order of a set of functions (their hashes are their addresses).
# main reads them first thing (aux only in a branch the tests never take), and in the main-bypass probe aux does.
READ_ADDRESSES = ("    f = lambda: 0\n"
                  "    seen = [repr(f), str(iter([])), f'{(lambda: 1)}', repr(aux), repr('a'.upper),\n"
                  "            str(map(str, [])), str(reversed([1]))]\n"
                  "    seen += [repr(g) for g in {f, (lambda: 2), aux}]\n")
ADDRESS_AUX = "def aux(text):\n" + READ_ADDRESSES + "    raise ValueError(seen)\n"
ADDRESS_MAIN = ("def shout_words(text):\n" + READ_ADDRESSES + "    if text == '?':\n        return aux(text)\n"
                "    raise ValueError(seen)\n")


def run_addresses(box, programs) -> list[str]:
    """The addresses each program's first test reads (the text of the ValueError it raises)."""
    from rewards.sandbox import TestSuite
    suite = TestSuite.from_check("def check(candidate):\n    assert candidate('x') == 'X!'\n", "shout_words")
    errors = [box.run_detailed(program, suite, 2.0).outcomes[0].error for program in programs]
    assert all(e.startswith("ValueError: ['<function ") for e in errors), errors
    return errors


def test_every_run_of_a_pair_reads_the_same_addresses_on_every_worker():
    # issue 42: an object's address (`repr(f)`, a set's order of functions) differed between workers (address
    # randomization), so a main that fails on some address bit failed the probes that landed on another worker
    # than its scored run: paid 4.0 by chance. Workers now run without address randomization (and fork once before
    # their first program, whose layout differed from the later ones'), and every run of a pair (scored, each
    # probe, its second tries, the control, the main bypass) is the scored program with one small int changed:
    # the same addresses in all of them, on every worker, after a restart too
    from rewards.code_rewards import _prepare
    from rewards.coop_probes import probe_programs, scored_aux
    prep = _prepare(PROBLEM, ADDRESS_AUX, ADDRESS_MAIN, False, "verified")
    aux_src = prep.aux_src
    mains = [prep.assemble(scored_aux(aux_src))] + [prep.assemble(p) for _, p in probe_programs(aux_src)]
    bypass = prep.assemble(scored_aux(aux_src), None, True)
    results = []
    for _ in range(2):   # two pools: two workers started apart
        with Sandbox(workers=1) as box:
            results.append(run_addresses(box, mains + [bypass]))
            box._slots[0].proc.kill()   # the worker is replaced at the next run
            results.append(run_addresses(box, mains + [bypass]))
    scored = results[0][0]
    assert "0x" in scored and all(run[:-1] == [scored] * len(mains) for run in results), results
    assert all(run[-1] == results[0][-1] for run in results), [run[-1] for run in results]


@pytest.mark.parametrize("shape", ["id(text) % 7", "hash(object())", "object.__repr__(text)", "hash(aux)",
                                   "hash(shout_words)", "vars(text)", "dir(text)[0]"])
def test_reads_of_an_id_or_a_hash_are_not_probed(shape):
    # an id, a hash of an object and the default repr stay off the gate (they are the object's address), and a
    # class (whose default repr is its instances' address) is refused
    main = f"def shout_words(text):\n    k = {shape}\n    return aux(text) + str(k)\n"
    assert probe_gate(SPLIT_AUX, main, ()), shape
    assert probe_gate(SPLIT_AUX, "class K:\n    pass\n\n\ndef shout_words(text):\n    return str(K()) + "
                                 "aux(text)\n", ())


ADDRESS_BITS = {   # a bit of an address above the page offset (where the workers differed), in four readings
    "repr_of_a_lambda": "int(repr(lambda: 0)[-9:-6], 16) % 2",
    "an_iterator": "int(str(iter([]))[-9:-6], 16) % 2",
    "an_f_string": "int(f'{(lambda: 0)}'[-9:-6], 16) % 2",
    "a_set_of_functions": "int(repr(list({(lambda: 0), (lambda: 1), shout_words})[0])[-9:-6], 16) % 2",
}


@pytest.mark.parametrize("reading", ADDRESS_BITS.values(), ids=list(ADDRESS_BITS))
def test_an_identity_aux_behind_an_address_bit_earns_no_bonus(sb, reading):
    # issue 42's open channel: main fails its tests on one value of an address bit, aux is the identity. With the
    # same addresses in every run, the probes see what the scored run saw: whichever way the bit falls, no 4.0
    totals = []
    for bit in (0, 1):
        main = (f"def shout_words(text):\n    if {reading} == {bit}:\n        return None\n"
                "    words = aux(text).split()\n    return ' '.join(w.upper() for w in words) + '!'\n")
        assert not probe_gate("def aux(text):\n    return text\n", main, ()), main
        verified = code_reward(PROBLEM, "def aux(text):\n    return text\n", main, sandbox=sb, timeout_s=2.0,
                               cooperation="verified")
        assert verified.total == pytest.approx(1.5 + verified.tests_passed / 8), verified   # no bonus
        totals.append(verified.total)
    assert 2.5 in totals, totals   # one of the two bits lets the scored run pass: the probes refuse it


def test_a_main_that_opens_with_a_decorated_function_keeps_its_score(sb):
    # every verified run holds the main-bypass probe's entry point beside main, spliced from main's own header: a
    # first statement with a decorator starts at the decorator (the splice broke the whole program before)
    main = ("def shout_words(text):\n    @lru_cache(None)\n    def words(t):\n        return tuple(aux(t))\n"
            "    return ' '.join(w.upper() for w in words(text)) + '!'\n")
    problem = {**PROBLEM, "prompt": "from functools import lru_cache\n\n\n" + PROMPT}
    seed, verified = both(sb, SPLIT_AUX, main, problem)
    assert (seed.total, verified.total) == (4.0, 4.0), verified
