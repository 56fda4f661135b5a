"""No completion can end a run (issue 34, item 1): generated pathological completions go through every team's full
scoring path (`Task.score` as the trainers call it) in every reward mode, and none may raise, need the reward's
guard (`cooprl.task.SafeScore`: a sample whose scoring raised), leave the reward's range or cost more than a bound.

The generator (seeded, so a failure names its seed) nests every construct (parentheses, lists, dicts, sets, lambdas,
calls, subscripts, attributes, unary and binary operators, comparisons, conditional expressions, f-strings, `if` /
`for` / `try` blocks, nested functions) 50 to 2,500 deep, and writes huge literals, long lines, NUL bytes and lone
surrogates; each payload is put in the shape of every role (a body, an aux's default, a tester's assert, a joint
answer) and handed to every agent. Each team also gets one 10 MB completion.

Bounds, per scoring batch of a pathological joint action and a sane one (a node group of two): 5 CPU s of the
trainer's own (cleaning, the gates, judged tests, probe building, the program's compile and marshal; a 90 kB
completion, or lambdas nested 2,500 deep, cost up to ~2 s: the compiler is quadratic in
nesting, and each code is parsed and compiled a few times), and 60 s of wall time (a CPU bomb such as `2**2**...`
times out on each test, 10 s each). The `unit` lane replaces the sandbox by one that runs nothing
(`NoRunSandbox`); the `sandbox` lane runs the real one.
"""

from __future__ import annotations

import json
import math
import os
import random
import time
from pathlib import Path

import pytest

from cooprl.config import Run, load_config
from envs.code_generation.config import CodeTaskConfig
from envs.code_generation.task import build_code_task
from envs.coder_tester.config import CoderTesterConfig
from envs.coder_tester.task import build_coder_tester_task
from envs.planner_coder.config import PlannerCoderConfig
from envs.planner_coder.task import build_planner_coder_task
from rewards import sandbox as sandbox_module
from rewards.sandbox import RunReport, TestOutcome, load_failed_report

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = {"task_id": "P/0", "entry_point": "add",
           "prompt": 'def add(a, b):\n    """Return a + b.\n    >>> add(1, 2)\n    3\n    """\n',
           "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(-1, 1) == 0\n",
           "canonical_solution": "    return a + b\n", "reference_aux": "def aux(a, b):\n    return a + b\n",
           "reference_main": "def add(a, b):\n    return aux(a, b)\n"}
CODE = ("magrpo_che_cpu.yaml", CodeTaskConfig, build_code_task)
PLANNER = ("planner_coder_cpu.yaml", PlannerCoderConfig, build_planner_coder_task)
TESTER = ("coder_tester_cpu.yaml", CoderTesterConfig, build_coder_tester_task)
CENTRAL = "magrpo.collaboration_mode=centralized"
# Where a payload `{p}` goes in each role's completion (the aux prompt ends with `def aux(`, the code prompts with
# the function's docstring, the tester's with `assert add(`, the planner's with `Plan:\n1.`)
AUX = ["a, b, pad={p}):\n    return a + b\n", "a, b):\n    return {p}\n", "{p}"]
BODY = ["    return {p}\n", "    x = {p}\n    return a + b\n", "{p}"]
TESTS = ["{p}) == 1\nassert add(1, 2) == 3\n", "1, 2) == {p}\n", "1, 2) == 3\nassert add({p}) == 3\n", "{p}"]
PLAN = ["{p}", " Add.\n2. {p}"]
JOINT = ["<auxiliary>def aux(a, b, pad={p}):\n    return a + b\n</auxiliary><main>def add(a, b):\n    return aux(a, b)"
         "\n</main>", "<auxiliary>def aux(a, b):\n    return a + b\n</auxiliary><main>def add(a, b):\n    x = {p}\n"
         "    return aux(a, b)\n</main>", "{p}"]
PLAN_CODE = [" Add.\n    # 2. {p}\n    return a + b\n", " Add.\n    return {p}\n", "{p}"]
CODE_TESTS = ["    return {p}\n\nassert add(1, 2) == 3\n", "    return a + b\n\nassert add(1, 2) == {p}\n", "{p}"]
# every team, in every reward mode (code_reward.cooperation seed / verified, code_reward.type hidden_tests /
# self_tests, coder_tester.reward_sharing shared / individual, centralized): its overrides and its roles' shapes
TEAMS = {
    "code aux+main, seed": (CODE, (), [AUX, BODY]),
    "code aux+main, verified": (CODE, ("code_reward.cooperation=verified",), [AUX, BODY]),
    "code single agent, hidden tests": (CODE, ("magrpo.num_agents=1",), [BODY]),
    "code single agent, self tests": (CODE, ("magrpo.num_agents=1", "code_reward.type=self_tests"), [BODY]),
    "code centralized, seed": (CODE, (CENTRAL,), [JOINT]),
    "code centralized, verified": (CODE, (CENTRAL, "code_reward.cooperation=verified"), [JOINT]),
    "planner+coder, hidden tests": (PLANNER, (), [PLAN, BODY]),
    "planner+coder, self tests": (PLANNER, ("code_reward.type=self_tests",), [PLAN, BODY]),
    "planner+coder, centralized": (PLANNER, (CENTRAL,), [PLAN_CODE]),
    "coder+tester, hidden tests": (TESTER, (), [BODY, TESTS]),
    "coder+tester, self tests, individual": (TESTER, ("code_reward.type=self_tests",
                                                      "coder_tester.reward_sharing=individual"), [BODY, TESTS]),
    "coder+tester, centralized": (TESTER, (CENTRAL,), [CODE_TESTS]),
}
SANE = "a + b"     # the payload of the honest joint action scored next to each pathological one
TEN_MB = "    x = 1\n" * 1_000_000


def _block(depth: int, opener: str) -> str:
    """Statements nested `depth` deep inside a function body (indented from 4 spaces), ending in a return."""
    lines = [" " * (4 + 4 * i) + opener for i in range(depth)]
    return "\n".join(lines + [" " * (4 + 4 * depth) + "return a + b"]) + "\n"


def _nested(rng: random.Random) -> str:
    """An expression or a block nested deep, in one of many constructs."""
    d = rng.choice([50, 400, 1000, 1000, 2500])
    b = min(d, 120)   # blocks: the tokenizer refuses more than 100 levels of indentation
    shapes = [
        "(" * d + "a" + ")" * d, "[" * d + "]" * d, "{1: " * d + "1" + "}" * d, "{" * d + "1" + "}" * d,
        "lambda: " * d + "a", "(lambda: " * d + "a" + ")()" * d, "add(" * d + "1" + ", 1)" * d, "a" + "[0]" * d,
        "a" + ".real" * d, "-" * d + "a", "not " * d + "a", "+".join(["1"] * d), "*".join(["1"] * d),
        "**".join(["2"] * d), " < ".join(["a"] * d), "a if a else " * d + "b",
        'f"{' * min(d, 30) + "a" + '}"' * min(d, 30), "f'{" + "(" * d + "a" + ")" * d + "}'",
        "".join(f"f'{{a!r:>{i % 9}}}'" for i in range(d)), "[" + ",".join(["1"] * d) + "]",
        "add(" + ",".join(["1"] * d) + ")",
        _block(b, "if a:"), _block(b, "def g():"), _block(b, "for _ in a:"), _block(b, "try:"), _block(b, "with a:"),
    ]
    return rng.choice(shapes)


def _huge(rng: random.Random) -> str:
    """A huge literal, a long line, or text holding NUL bytes and lone surrogates."""
    return rng.choice([
        "1" * 5000, "0x" + "f" * 90_000, "'" + "a" * 99_000 + "'", "[" + "1, " * 30_000 + "]",
        "b'" + "\\x00" * 20_000 + "'", "a + " * 20_000 + "a", "x = 1; " * 12_000, "# " + "z" * 99_000,
        "a\x00b", "'\ud800'", "\ud800\udfff" * 1000, "1" + "\r" * 5000 + "2", '"""' + "\\" * 5001,
        "\t" * 5000 + "return a", "\ufeff" * 100 + "a", "add(" + "1," * 1900 + "1)",
    ])


def pathological(rng: random.Random) -> str:
    """One payload: nested or huge, with a NUL byte or a surrogate put in now and then."""
    payload = _nested(rng) if rng.random() < 0.65 else _huge(rng)
    if rng.random() < 0.15:
        at = rng.randrange(len(payload) + 1)
        payload = payload[:at] + rng.choice(["\x00", "\ud800", "\udfff", "\x1b"]) + payload[at:]
    return payload


def joint_action(rng: random.Random, shapes: list[list[str]], payload: str) -> list[str]:
    """One completion per agent, each in one of its role's shapes; the payload in one agent's or in every one's."""
    everyone = rng.random() < 0.5
    hit = rng.randrange(len(shapes))
    return [rng.choice(role).replace("{p}", payload if everyone or a == hit else SANE) for a, role in enumerate(shapes)]


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    path = tmp_path_factory.mktemp("pathological") / "one.jsonl"
    path.write_text(json.dumps(PROBLEM) + "\n" + json.dumps({**PROBLEM, "task_id": "P/1"}) + "\n")
    built = {}
    for name, ((config_file, task_config, build), overrides, _) in TEAMS.items():
        config = load_config(ROOT / "configs" / config_file,
                             [f"dataset.path={path}", "dataset.train_split=train[:1]", "dataset.eval_split=train[1:]",
                              "code_prompt.open_body=false", *overrides], task_config=task_config)
        built[name] = build(Run.of(config, "magrpo"))
    return built


CPU_BOUND_S = 5.0     # the trainer's own CPU per batch: cleaning, gates, judged tests, probes, compile, marshal
WALL_BOUND_S = 60.0   # with the real sandbox: a CPU bomb's tests time out (10 s each, 2 hidden tests), its probes too


def check_batch(task, joints) -> None:
    """Score `joints` (one node group) as the trainers do, with the guard's fallback switched off; fail when
    anything raises, a score needed the guard or leaves the reward's range, or the batch costs more than the bounds."""
    problem = task.train_items[0]
    wall, cpu = time.monotonic(), time.process_time()
    scores = task.score.raw([problem] * len(joints), joints)    # the reward itself: an exception fails the test
    wall, cpu = time.monotonic() - wall, time.process_time() - cpu
    assert len(scores) == len(joints)
    for score in scores:
        assert not score.error
        assert math.isfinite(score.total) and -1.0 <= score.total <= task.max_reward, score
    lengths = [len(text) for text in joints[0]]
    assert cpu <= CPU_BOUND_S and wall <= WALL_BOUND_S, \
        f"{task.name}: {cpu:.2f} CPU s, {wall:.2f} s for a batch (completion lengths {lengths})"


def run_property(tasks, seed: int, samples: int) -> None:
    rng = random.Random(seed)
    for name, task in tasks.items():
        shapes = TEAMS[name][2]
        sane = [role[0].replace("{p}", SANE) for role in shapes]
        for _ in range(samples):
            check_batch(task, [joint_action(rng, shapes, pathological(rng)), sane])
        check_batch(task, [[TEN_MB] * task.num_agents, sane])


class NoRunSandbox:
    """A sandbox that runs nothing: every test passes (so the verified probes and the testers' judging go on), after
    the trainer's own work on the program (its compile and marshal, `rewards.sandbox._program_fields`)."""

    _closed = False

    def __init__(self):
        self._pid = os.getpid()

    def run_detailed(self, program, tests, timeout_s=10.0, max_timeouts=3, *, entry_point=None,
                     total_s=None, cpu_budget_s=None) -> RunReport:
        suite = sandbox_module.as_suite(tests, entry_point)
        fields = sandbox_module._program_fields(program)
        if "load_error" in fields:
            return load_failed_report(suite, fields["load_error"])
        return RunReport([TestOutcome(t, True) for t in suite.tests])

    def map_detailed(self, fn, items):
        return [fn(item) for item in items]

    def close(self) -> None:
        pass


@pytest.fixture
def no_run_sandbox(monkeypatch):
    monkeypatch.setattr(sandbox_module, "_default", NoRunSandbox())


def test_pathological_completions_score_on_the_trainers_side_of_every_team(tasks, no_run_sandbox):
    run_property(tasks, seed=20, samples=5)


@pytest.mark.sandbox
def test_pathological_completions_score_in_the_sandbox_for_every_team(tasks):
    run_property(tasks, seed=3401, samples=3)
