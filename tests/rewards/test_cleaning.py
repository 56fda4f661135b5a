"""rewards.cleaning: markdown fences and prose stripped, the function extracted (AST or text), level 1 judged on the
text, all linear on adversarial text, and every parse safe from many threads at once."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from rewards.cleaning import clean_completion, defines_with_return, prompt_imports, strip_fences  # noqa: E402
from rewards.cooperation import cooperation, ignores_aux_return, is_thin_wrapper  # noqa: E402


N = 100_000
ADVERSARIAL = {
    "fence_of_blank_lines": "```python\n" + "\n" * N + "```\n",
    "unterminated_fences": "```\n" * (N // 4),
    "fence_of_space_lines": "```\n" + " \n" * (N // 2) + "def add_one(x):\n  return (\n",
    "blank_lines_in_a_broken_def": "def add_one(x):\n" + "\n" * N + "    return (\n",
    "whitespace_lines_after_return": "def add_one(x):\n    return (\n" + " \t\n" * (N // 3),
    "import_then_spaces": "import" + " " * N + "!\n",
    "from_then_spaces": "from x" + " " * N + "!\n",
    "many_def_lines": "def add_one(\n" * (N // 12),
    "huge_indentation": " " * N + "def add_one(x): return 1\n",
    "tabs": "def add_one(x):\n" + "\t" * N + "return (\n",
    "decorators": "@d\n" * (N // 3) + "def add_one(x:\n",
    "fenced_def_with_blank_lines": "```\n" + "def add_one(x):\n" + "\n" * N + "  return (\n```\n",
}


@pytest.mark.parametrize("name", list(ADVERSARIAL))
def test_cleaning_is_fast_on_adversarial_text(name):
    text = ADVERSARIAL[name]
    start = time.perf_counter()
    cleaned = clean_completion(text, "add_one")
    defines_with_return(text, "add_one")
    defines_with_return(cleaned.function, "add_one")
    prompt_imports(text)
    strip_fences(text)
    cooperation(cleaned.function, "add_one")
    elapsed = time.perf_counter() - start
    # six passes over ~100 kB, three or four of them through the parser: ~0.1-0.35 s on a quiet machine, over 1 s
    # on a busy one; the quadratic code this guards against took 10 s and more on a fifth of this text
    # (fence_of_blank_lines, import_then_spaces), so 3 s separates the two without failing on a loaded CI machine
    assert elapsed < 3.0, f"{name}: {elapsed:.2f} s"


def test_cleaning_results_unchanged_on_ordinary_text():
    c = clean_completion("Here:\n```python\nimport math\nfrom a.b import c as d\n\ndef f(x):\n    return x\n```\n", "f")
    assert c.function == "def f(x):\n    return x" and c.returns_value
    assert prompt_imports("import os, sys\nfrom a.b import c as d\nimport  x  \n  import y\n") == [
        "import os, sys", "from a.b import c as d", "import  x"]
    assert strip_fences("```\nno def\n```\n```py\n  async  def g():\n    pass\n```") == "  async  def g():\n    pass"
    assert defines_with_return("def f(x):\n  return x +\n", "f")
    assert not defines_with_return("def f(x):\n  return ;\n  (\n", "f")


def test_cleaning_helpers():
    c = clean_completion("blah\n```python\ndef f(x):\n    return x\n```\nmore ```", "f")
    assert c.function == "def f(x):\n    return x"
    assert defines_with_return("def f(x):\n    return x +\n", "f")            # text fallback
    assert not defines_with_return("def f(x):\n    def g():\n        return 1\n    g()\n", "f")
    assert is_thin_wrapper("def f(x):\n    '''d'''\n    pass\n", "f")
    # a read earlier in an enclosing loop counts (the next iteration sees the value)
    assert not ignores_aux_return("def f(x):\n    out = 0\n    for i in x:\n        if i:\n            out = out + r\n"
                                  "        r = aux(i)\n    return out\n", "f")


def test_answers_are_parsed_safely_from_many_threads():
    # CPython 3.11: two threads building ASTs at once, one switched out mid-construction (here by a garbage-collection
    # callback that runs Python code), made ast.parse raise SystemError "AST constructor recursion depth mismatch"
    # (python/cpython#106905); it failed this suite once, in the reward's thread pool. The reward parses under a lock.
    import gc
    import threading

    errors: list[BaseException] = []
    source = "def add_one(x):\n    return x + 1\nif __name__ == '__main__':\n" + "    print(add_one(1))\n" * 300

    def clean_many():   # without the lock, some thread raised in its first 2 rounds in each of 17 tries: 20 suffice
        for _ in range(20):
            try:
                clean_completion(source, "add_one")
            except SystemError as error:
                errors.append(error)

    def python_during_gc(phase, info):
        sum(range(50))

    interval, thresholds = sys.getswitchinterval(), gc.get_threshold()
    gc.callbacks.append(python_during_gc)
    sys.setswitchinterval(1e-6)
    gc.set_threshold(50, 5, 5)
    try:
        threads = [threading.Thread(target=clean_many) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        gc.callbacks.remove(python_during_gc)
        sys.setswitchinterval(interval)
        gc.set_threshold(*thresholds)
    assert errors == []
