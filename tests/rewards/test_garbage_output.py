"""Model output that is garbage never raises: cleaning, the reward, joint-answer parsing, feedback prompts.

A fixed-seed fuzz over hostile shapes (nesting the parser gives up on, NUL bytes, lone surrogates, huge
lines, unbalanced fences and tags, half functions) plus random mutations of good answers. Every text must
score (a `RewardBreakdown` with a total in [0, 4]), parse into a `JointAnswer` and give a feedback prompt.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from envs.code_generation.data import Problem  # noqa: E402
from envs.code_generation.prompts import completion_to_code, parse_joint_answer  # noqa: E402
from envs.code_generation.transitions import level_feedback, next_prompt  # noqa: E402
from rewards.code_cleaning import clean_completion, cooperation  # noqa: E402
from rewards.code_rewards import code_rewards_batch  # noqa: E402
from rewards.sandbox import Sandbox  # noqa: E402

PROBLEM = Problem("fuzz/0", 'def add_one(x: int) -> int:\n    """Return x + 1."""\n',
                  "def check(candidate):\n    assert candidate(1) == 2\n    assert candidate(-1) == 0\n", "add_one")
GOOD_AUX = "def aux(x):\n    return x + 1\n"
GOOD_MAIN = "def add_one(x):\n    y = aux(x)\n    if y is None:\n        return 0\n    return y\n"

HOSTILE = [
    "", " ", "\n" * 1000, "\x00", "def add_one(x):\n    return x\x00 + 1\n", "\ud800", "def aux(\ud800):\n    return 1",
    "def add_one(x):\n    return " + "-" * 100_000 + "x\n",            # MemoryError in the parser
    "def add_one(x):\n    return " + "not " * 100_000 + "x\n",          # RecursionError in the parser
    "def add_one(x):\n    return " + "(" * 300 + "x" + ")" * 300 + "\n",  # too many nested parentheses
    "def add_one(x):\n    return [" + "[" * 5000 + "\n",
    "x" * 2_000_000, "def add_one(x):\n    return '" + "a" * 1_000_000 + "'\n",
    "```", "```python\n", "```python\ndef add_one(x):\n    return x + 1", "```\n```\n```",
    "<auxiliary><auxiliary></main></main><main>", "</auxiliary>" * 50, "<main>def add_one(:\n</main>",
    "Auxiliary:\nMain:\nAuxiliary:", "def def def", "def add_one(x):", "def add_one(x):\n    return",
    "def aux(x):\n\treturn x\n        return 2\n", "async def add_one(x):\n    return await x\n",
    "class add_one:\n    def add_one(self):\n        return 1\n", "@" * 100 + "\ndef add_one(x):\n    return x\n",
    "def add_one(x):\n    return x\nif __name__ == '__main__':\n" + "    print(1)\n" * 1000,
    "lambda: 0", "import os; os._exit(0)", "\r\n".join(["def add_one(x):", "    return x + 1"]),
    "\ufeffdef add_one(x):\n    return x + 1\n", "def add_one(x):\n    return x + 1\n" * 200,
]


def _mutations(rng: random.Random, n: int) -> list[str]:
    pieces = ["def ", "aux(", "add_one(", "):", "\n", "    ", "return ", "x", "(", ")", "[", "]", "```",
              "<main>", "</main>", "<auxiliary>", "</auxiliary>", ":", "\t", "'", '"', "\\", "#", "\x00", "é"]
    out = []
    for _ in range(n):
        text = list(rng.choice([GOOD_AUX, GOOD_MAIN, GOOD_AUX + GOOD_MAIN]))
        for _ in range(rng.randint(1, 12)):
            i = rng.randrange(len(text) + 1)
            op = rng.random()
            if op < 0.4 and text:
                del text[min(i, len(text) - 1)]
            elif op < 0.8:
                text.insert(i, rng.choice(pieces))
            else:
                text[i:i] = text[:rng.randint(0, len(text))]
        out.append("".join(text))
    return out


TEXTS = HOSTILE + _mutations(random.Random(1234), 60)


@pytest.fixture(scope="module")
def sb():
    with Sandbox(workers=2) as box:
        yield box


@pytest.mark.slow
def test_cleaning_and_parsing_never_raise():
    for text in TEXTS:
        for name in ("aux", "add_one"):
            cleaned = clean_completion(text, name)
            assert isinstance(cleaned.returns_value, bool)
            cooperation(cleaned.function, name)
        joint = parse_joint_answer(text, PROBLEM)
        assert isinstance(joint.aux, str) and isinstance(joint.main, str)
        parse_joint_answer(text, PROBLEM, "bounded", "example")
        for role in ("aux", "main", "single"):
            assert isinstance(completion_to_code(role, PROBLEM, text), str)


@pytest.mark.slow
def test_reward_and_feedback_never_raise(sb):
    texts = TEXTS
    results = code_rewards_batch([PROBLEM] * (2 * len(texts)), [GOOD_AUX] * len(texts) + texts,
                                 texts + [GOOD_MAIN] * len(texts), timeout_s=2.0, sandbox=sb)
    for text, r in zip(texts + texts, results):
        assert 0.0 <= r.total <= 4.0, (text[:80], r)
    for text, r in zip(texts, results):
        feedback = level_feedback(PROBLEM, "main", r, text)
        assert feedback.endswith("no explanation.")
        prompt = next_prompt("level_feedback", PROBLEM, "main", [("prompt", text)], r)
        assert isinstance(prompt, str) and prompt
    # the good pair still scores full marks next to all that garbage
    assert code_rewards_batch([PROBLEM], [GOOD_AUX], [GOOD_MAIN], sandbox=sb)[0].total == 4.0


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
