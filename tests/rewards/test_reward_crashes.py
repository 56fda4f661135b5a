"""Completions that raised out of the reward (issue 34 items 1 and 4), fixed where they raised: each is scored like
any program of its kind, exactly, and the judged-test gate's cost is linear in the test's size."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from cooprl.config import Run, load_config
from envs.coder_tester.config import CoderTesterConfig
from envs.coder_tester.task import build_coder_tester_task
from rewards.cleaning import MAX_COMPLETION_CHARS
from rewards.code_rewards import code_reward, code_rewards_batch, scored_program
from rewards.judged_tests import MAX_TEST_CHARS, judged_test
from rewards.sandbox import Sandbox
from tests.rewards.test_coop_verified import HONEST_MAIN, PROBLEM as SHOUT

ROOT = Path(__file__).resolve().parents[2]
ADD = {"task_id": "A/0", "entry_point": "add", "prompt": 'def add(a, b):\n    """Return a + b."""\n',
       "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(-1, 1) == 0\n",
       "canonical_solution": "    return a + b\n"}
LAMBDAS = "def add(a, b):\n    f = " + "lambda: " * 1000 + "a\n    return a + b\n"   # 8 kB; marshal refuses it


@pytest.fixture(scope="module")
def sb():
    with Sandbox(workers=1) as box:
        yield box


@pytest.mark.parametrize("single_agent", [False, True])
def test_a_program_marshal_refuses_fails_to_load_like_any_program_that_does_not_load(sb, single_agent):
    assert len(LAMBDAS) > 8000
    aux = "def aux(a):\n    return a\n"
    b = code_rewards_batch([ADD], [aux], [LAMBDAS], single_agent=single_agent, sandbox=sb)[0]
    # levels 1-2 as for any program that parses, no test passes: what a program that raises on load gets
    assert b.total == (1.1 if single_agent else 1.5) and b.syntax_ok and (b.tests_passed, b.tests_total) == (0, 2)
    assert all("the program cannot be loaded: object too deeply nested to marshal" in f for f in b.failures)
    assert scored_program(ADD, "", LAMBDAS, single_agent=True) is not None   # it compiles: other judges run it too


def test_an_aux_with_a_deep_default_is_probed_and_keeps_its_bonus(sb):
    pad = "+".join(["1"] * 400)
    aux = f"def aux(text, pad={pad}):\n    return text.split()\n"
    for mode in ("seed", "verified"):
        b = code_reward(SHOUT, aux, HONEST_MAIN, sandbox=sb, timeout_s=2.0, cooperation=mode)
        assert b.total == 4.0 and b.coop_check == "", (mode, b)


def test_a_compact_assert_that_unparsing_widens_past_the_bound_is_not_judged(tmp_path):
    compact = "assert add([" + ",".join(["1"] * 1890) + "],0)==0"        # 3.8 kB; unparsed `1, 1, ...`: 5.7 kB
    assert len(compact) < MAX_TEST_CHARS and judged_test("add", compact) is None
    fits = "assert add([" + ",".join(["1"] * 1000) + "], 0) == 0"
    judged = judged_test("add", fits)
    assert judged is not None and judged_test("add", judged) == judged   # judging a judged test is the identity
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps(ADD) + "\n" + json.dumps({**ADD, "task_id": "A/1"}) + "\n")
    config = load_config(ROOT / "configs" / "coder_tester_cpu.yaml",
                         [f"dataset.path={path}", "dataset.train_split=train[:1]", "dataset.eval_split=train[1:]",
                          "code_prompt.open_body=false"], task_config=CoderTesterConfig)
    task = build_coder_tester_task(Run.of(config, "magrpo"))
    tests = compact[len("assert add("):] + "\nassert add(1, 2) == 3\n"
    scores = task.score.raw([task.train_items[0]] * 2, [["    return a + b\n", tests], ["    return a - b\n", tests]])
    assert [s.metrics["tests_written"] for s in scores] == [2.0, 2.0]
    assert [s.metrics["tests_judged"] for s in scores] == [0.5, 0.5]    # the compact one is no judged test
    assert [s.metrics["tester_reward"] for s in scores] == [0.5, 0.5]    # (0 + 1) / 2: add(1, 2) == 3 catches a - b


def test_a_completion_over_the_bound_is_refused_whole_and_quickly(sb):
    huge = "def add(a, b):\n" + "    x = 1\n" * (MAX_COMPLETION_CHARS // 10) + "    return a + b\n"
    start = time.process_time()
    b = code_rewards_batch([ADD], ["def aux(a):\n    return a\n" + "#" * MAX_COMPLETION_CHARS], [huge], sandbox=sb)[0]
    assert time.process_time() - start < 2.0      # 10 MB cost ~22 CPU s, mostly under the AST lock
    assert b.total == 0.0 and not b.aux_defined and b.reason.startswith("main completion too long (")
