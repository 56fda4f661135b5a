"""Unit tests of rewards/coop_gate.py: which aux and main programs the cooperation probes may run."""

from rewards.coop_gate import probe_gate
from tests.rewards.test_coop_verified import HONEST_MAIN, SPLIT_AUX


def test_probe_gate_on_aux_and_imports():
    assert probe_gate(SPLIT_AUX, HONEST_MAIN, ()) == ""
    assert probe_gate(SPLIT_AUX, HONEST_MAIN, ("import inspect",)) == "imports inspect"
    assert probe_gate("def aux(t):\n    import gc\n    return t.split()\n", HONEST_MAIN, ()) == "aux imports gc"
    assert probe_gate("def aux(t):\n    class A:\n        pass\n    return t\n", HONEST_MAIN, ()).startswith("aux "
                                                                                                             "defines")
    assert probe_gate(SPLIT_AUX, "def f(xs):\n    return sorted(xs, key=aux) + list(map(aux, xs))\n", ()) == ""
    assert probe_gate(SPLIT_AUX, "def f(xs):\n    g = aux\n    return g(xs)\n", ()).startswith("main uses aux as an "
                                                                                               "object")
    assert probe_gate("def aux(t):\n    aux.seen = True\n    return t.split()\n", HONEST_MAIN, ()) == "aux reads .seen"
    assert probe_gate("def aux(t):\n    return t.split() if aux else []\n", HONEST_MAIN, ()).startswith(
        "aux uses aux as an object")
    assert probe_gate("def aux(n):\n    return 1 if n < 2 else n * aux(n - 1)\n", HONEST_MAIN, ()) == ""
    # a local `sorted` would receive the probe's wrapper and could look at it
    assert probe_gate(SPLIT_AUX, "def f(xs):\n    def sorted(g):\n        return repr(g)\n    return sorted(aux)\n",
                      ()) == "main binds the name sorted"


def test_entropy_and_object_addresses_are_refused():
    # issue 42: what a program can read must not differ between the scored run and its probes; statistics'
    # `samples` draws from the OS-seeded random state, and `object()`'s text is its address
    draws = "from statistics import NormalDist\ndef f(t):\n    NormalDist().samples(1)\n    return aux(t)\n"
    assert probe_gate(SPLIT_AUX, draws, ("from statistics import NormalDist",)) != ""
    sampled = "import statistics\ndef f(t):\n    statistics.NormalDist().samples(1)\n    return aux(t)\n"
    assert probe_gate(SPLIT_AUX, sampled, ("import statistics",)) == "main reads .samples"
    assert probe_gate(SPLIT_AUX, "def f(t):\n    return aux(t) if str(object()) else 0\n", ()) != ""
