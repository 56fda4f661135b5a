"""rewards.cooperation: the seed's cooperation checks on the code of main that can run (dead or trivial code does not
fool them), and the data-flow analysis bounded by FLOW_STEPS."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from rewards.cooperation import FLOW_STEPS, Cooperation, cooperation  # noqa: E402


COOP = [
    # main source body (def add_all(xs):), uses_aux, thin_wrapper, ignores_return
    ("if False:\n        return aux(xs)\n    return sum(xs)", False, False, False),
    ("if 0:\n        return aux(xs)\n    return sum(xs)", False, False, False),
    ("if None:\n        t = aux(xs)\n    return sum(xs)", False, False, False),
    ("if '':\n        t = aux(xs)\n    return sum(xs)", False, False, False),
    ("while False:\n        t = aux(xs)\n    return sum(xs)", False, False, False),
    ("if True:\n        return sum(xs)\n    else:\n        return aux(xs)", False, False, False),
    ("return sum(xs)\n    return aux(xs)", False, False, False),
    ("for x in xs:\n        continue\n        aux(xs)\n    return sum(xs)", False, False, False),
    ("def g():\n        return aux(xs)\n    return sum(xs)", False, False, False),
    ("g = lambda: aux(xs)\n    return sum(xs)", False, False, False),
    ("lambda: aux(xs)\n    return sum(xs)", False, False, False),
    ("class C:\n        v = aux(xs)\n    return sum(xs)", False, False, False),
    ("return sum(xs) if True else aux(xs)", False, False, False),
    ("return xs and sum(xs) or 0 or False and aux(xs)", False, False, False),
    ("return sum(xs) or 1 or aux(xs)", False, False, False),
    ("aux = sum\n    return aux(xs) + 0 * len(xs)", False, False, False),   # not the helper
    ("r = aux(xs)\n    r = r\n    return r", True, True, False),
    ("r = aux(xs)\n    return (r)", True, True, False),
    ("x = aux(xs)\n    y = x\n    return y", True, True, False),
    ("'''doc'''\n    pass\n    r = aux(xs)\n    assert r is not None\n    return r", True, True, False),
    ("f = aux\n    return f(xs)", True, True, False),
    ("def g(v):\n        return aux(v)\n    return g(xs)", True, True, False),
    ("r = aux(xs)\n    return r + 0", True, True, False),
    ("r = aux(xs)\n    r *= 1\n    return r", True, True, False),
    ("r = aux(xs)\n    if xs:\n        return r\n    return r", True, True, False),
    ("r = aux(xs)\n    if False:\n        return len(xs)\n    return r", True, True, False),
    ("s = sorted(xs)\n    return aux(s)", True, True, False),
    ("return aux(xs) + 0", True, True, False),                                        # the one-liner rule
    ("r = aux(xs)\n    return r if xs else 0", True, False, False),
    ("total = aux(xs)\n    if not xs:\n        return 0\n    return total", True, False, False),
    ("r = aux(xs)\n    print(r)\n    return sum(xs)", True, False, True),
    ("r = aux(xs)\n    r = 0\n    return r + sum(xs)", True, False, True),
    ("tmp = [aux(xs)]\n    return sum(xs)", True, False, True),
    ("res = []\n    res.append(aux(xs))\n    return res[0] + 0 * len(xs)", True, False, False),
    ("if aux(xs) > 0:\n        return sum(xs)\n    return 0", True, False, False),
]


@pytest.mark.parametrize("body, uses, thin, ignores", COOP, ids=[c[0].split("\n")[0][:30] for c in COOP])
def test_cooperation_on_live_code(body, uses, thin, ignores):
    src = "def add_all(xs):\n    " + body + "\n"
    c = cooperation(src, "add_all")
    assert (c.uses_aux, c.thin_wrapper if uses else False, c.ignores_return) == (uses, thin, ignores), src


def degenerate_main(depth: int, chain: int = 11) -> str:
    """Nested loops; each body resets the next level's chain of assignments and then runs its own in reverse
    order, so that every loop takes all its fixpoint passes each time it is entered (x11 per level unbounded)."""
    out = ["def f(x):", "    v = aux(x)"]
    ind = "    "
    for d in range(depth):
        out.append(ind + f"for i{d} in x:")
        ind += "    "
        out += [ind + f"c{d + 1}_{k} = 0" for k in range(chain + 1)]
        out += [ind + f"c{d}_{k} = c{d}_{k - 1}" for k in range(chain, 0, -1)]
        out.append(ind + f"c{d}_0 = v")
    out.append(f"    return c0_{chain}")
    return "\n".join(out) + "\n"


class AnalysisTooSlow(Exception):
    pass


def _alarm(signum, frame):
    raise AnalysisTooSlow()


@pytest.mark.parametrize("depth", [6, 9])
def test_degenerate_nested_loops_give_the_conservative_verdict_quickly(depth):
    src = degenerate_main(depth)
    assert len(src) <= 8192
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, 10.0)   # unbounded, depth 6 would take minutes: fail instead of hanging
    try:
        t0 = time.process_time()
        verdict = cooperation(src, "f")
        spent = time.process_time() - t0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert spent < 1.0
    assert verdict == Cooperation(uses_aux=False, thin_wrapper=True, ignores_return=True)


def test_shallow_nesting_is_still_analysed():
    assert cooperation(degenerate_main(1), "f").uses_aux
    assert FLOW_STEPS >= 10_000   # HumanEval's and the coop set's mains take under 300 steps
