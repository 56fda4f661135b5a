"""Test-time strategies driven by a scripted LLM (deterministic canned answers) through every branch, plus one
run of evaluate_strategy.py with the embedded tiny random model and its resume."""

from __future__ import annotations

import json
import re

import pytest

import evaluate_strategy
from envs.code_generation.data import Problem
from rewards.sandbox import Sandbox
from strategies import codet, collabcoder, cosplay, direct
from strategies.base import Budget, Session
from strategies.execution import ERROR, pass_matrix, score, signatures
from cooprl.rollout.generation import SamplingParams
from strategies.llm import ScriptedLLM, TeamLLM
from strategies.text import code_prompt, extract_code

ADD = Problem(
    "T/add",
    'def add(a, b):\n    """Return a + b.\n    >>> add(1, 2)\n    3\n    """\n',
    "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(2, 2) == 4\n"
    "    assert candidate(-1, 5) == 4\n    assert candidate(5, 1) == 6\n",
    "add",
    {"canonical_solution": "    return a + b\n"},
)
RIGHT, MINUS, TIMES = "    return a + b\n", "    return a - b\n", "    return a * b\n"
CODE = "Implement the function"   # every code prompt holds it (strategies.text.code_prompt)


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(workers=2) as sb:
        yield sb


def test_session_meters_calls_and_tokens():
    llm = ScriptedLLM([("hi", ["one two three"])])
    session = Session(llm, Budget(max_calls=3))
    assert session.generate("hi there", 2) == ["one two three"] * 2
    assert session.generate("hi", 5) == ["one two three"]          # clipped to the one call left
    assert session.generate("hi", 1) == []                         # spent
    assert (session.cost.calls, session.cost.tokens_in, session.cost.tokens_out) == (3, 2 + 2 + 1, 9)
    assert Session(llm, Budget(max_tokens=4)).generate("hi b c d e", 3) == ["one two three"] * 3
    tight = Session(llm, Budget(max_tokens=4))
    tight.generate("hi b c d e", 1)
    assert tight.exhausted() and tight.generate("x", 1) == []


def test_execution_matrix_signatures_and_score(sandbox):
    codes = [f"def add(a, b):\n{body}" for body in (RIGHT, MINUS, "    raise ValueError('no')\n")]
    tests = ["assert add(1, 2) == 3", "assert add(0, 0) == 0"]
    assert pass_matrix(sandbox, ADD, codes, tests) == [[1, 1], [0, 1], [0, 0]]
    assert signatures(sandbox, ADD, codes, ["add(2, 3)", "add(1, 1)"]) == [("5", "2"), ("-1", "0"), (ERROR, ERROR)]
    assert score(ADD, codes[0], sandbox) == {"passed": True, "tests_passed": 4, "tests_total": 4}
    assert score(ADD, codes[1], sandbox)["passed"] is False


def test_team_llm_writes_aux_and_main(sandbox):
    """A two-agent team as the coder: code prompts go to aux and main (guidance in front), the rest to main."""
    aux = ScriptedLLM([("helper function named `aux`", ["a, b):\n    return a + b\n"])])
    main = ScriptedLLM([("Do not redefine `aux`", ["    return aux(a, b)\n"])], default="plain answer")
    team = TeamLLM(aux, main, [ADD])
    [g] = team.generate(code_prompt(ADD, "Plan: add them."), 1, SamplingParams())
    code = extract_code(ADD, g.text)
    assert "def aux(a, b):" in code and "return aux(a, b)" in code and score(ADD, code, sandbox)["passed"]
    assert aux.prompts[0].startswith("Plan: add them.") and main.prompts[0].startswith("Plan: add them.")
    assert g.tokens_in == len(aux.prompts[0].split()) + len(main.prompts[0].split())
    assert [g.text for g in team.generate("Write a plan.", 2, SamplingParams())] == ["plain answer"] * 2


def test_extract_code_shapes():
    body = extract_code(ADD, RIGHT + "\nprint(add(1, 2))\n")
    assert body.startswith("def add(a, b):") and body.rstrip().endswith("return a + b") and "print" not in body
    chat = extract_code(ADD, "```python\nimport math\n\ndef add(a, b):\n    return a + b\n```\nIt adds.")
    assert chat.startswith("import math") and "It adds" not in chat
    helpers = extract_code(ADD, "def helper(x):\n    return x\n\ndef add(a, b):\n    return helper(a) + b\n")
    assert "def helper" in helpers and "def add" in helpers


def test_direct_one_sample(sandbox):
    llm = ScriptedLLM([(CODE, [RIGHT])])
    solution = direct.solve(ADD, llm, sandbox, Budget())
    assert solution.cost.calls == 1 and score(ADD, solution.code, sandbox)["passed"]
    assert direct.solve(ADD, llm, sandbox, Budget(max_calls=0)).code == ""


def test_codet_dual_agreement_hand_example():
    # codes 0, 1 pass tests {0, 1}; code 2 passes {0, 2}; code 3 passes nothing
    m = [[1, 1, 0], [1, 1, 0], [1, 0, 1], [0, 0, 0]]
    assert codet.dual_agreement(m) == [(4, [0, 1], [0, 1]), (2, [2], [0, 2])]


def test_codet_solve_scores(sandbox):
    # tests: add(1,2)==3, add(2,2)==4, add(0,0)==0, add(2,3)==6 (the last is wrong)
    # a+b passes {0,1,2} (twice), a-b passes {2}, a*b passes {1,2,3}: scores 2*3=6, 1*3=3, 1*1=1
    llm = ScriptedLLM([("# check the correctness of", ["1, 2) == 3\nassert add(2, 2) == 4", "0, 0) == 0\nnot code",
                                                       "2, 3) == 6\nassert add(1, 2) == 3"]),
                       (CODE, [RIGHT, MINUS, TIMES, RIGHT])])
    config = codet.CodeTConfig(num_codes=4, num_test_samples=3)
    solution = codet.solve(ADD, llm, sandbox, Budget(), config)
    assert solution.tests == ["assert add(1, 2) == 3", "assert add(2, 2) == 4", "assert add(0, 0) == 0",
                              "assert add(2, 3) == 6"]
    m = solution.trace[0]["matrix"]
    assert m == [[1, 1, 1, 0], [0, 0, 1, 0], [0, 1, 1, 1], [1, 1, 1, 0]]
    assert [(s, c) for s, c, _ in codet.dual_agreement(m)] == [(6, [0, 3]), (3, [2]), (1, [1])]
    assert solution.trace[0]["chosen"] == 0 and solution.metrics["best_score"] == 6
    assert score(ADD, solution.code, sandbox)["passed"] and solution.cost.calls == 7


@pytest.mark.parametrize("scores,weights,expected", [
    ((0.2, 0.9, 0.3, 0.9), (0.5, 0.5), "plan"),    # the plan scores lower: revise the plan
    ((0.9, 0.2, 0.9, 0.3), (0.5, 0.5), "code"),    # the code scores lower: patch the code
    ((0.5, 0.5, 0.5, 0.5), (0.5, 0.5), "code"),    # a tie patches the code
    ((0.2, 0.6, 1.0, 0.5), (0.5, 0.5), "code"),    # plan 0.60 vs code 0.55
    ((0.2, 0.6, 1.0, 0.5), (1.0, 0.0), "plan"),    # trusting confidence only: plan 0.2 vs code 0.6
])
def test_collabcoder_decision(scores, weights, expected):
    config = collabcoder.CollabCoderConfig(trust_confidence=weights[0], trust_consistency=weights[1])
    assert collabcoder.decide(collabcoder.Scores(*scores), config) == expected
    no_cdm = collabcoder.CollabCoderConfig(use_cdm=False)
    assert collabcoder.decide(collabcoder.Scores(*scores), no_cdm) == "code"


def test_collabcoder_parse_scores():
    s = collabcoder.parse_scores("plan_confidence: 0.25\ncode_confidence: 80%\nplan_consistency=1", 0.5)
    assert s == collabcoder.Scores(0.25, 0.8, 1.0, 0.5)


def test_collabcoder_revises_plan_then_code(sandbox):
    llm = ScriptedLLM([
        ("give four scores", ["0.1\ncode_confidence: 0.9\nplan_consistency: 0.2\ncode_consistency: 0.9",
                              "0.9\ncode_confidence: 0.1\nplan_consistency: 0.9\ncode_consistency: 0.2"]),
        ("Insight:", ["the plan subtracts", "the code multiplies"]),
        ("Analyse the failure", [" wrong operation\nCode analysis: ok\nAlignment analysis: ok"]),
        ("corrected step-by-step plan", [" Add a and b."]),
        ("short step-by-step plan", [" Subtract b from a."]),
        (CODE, [MINUS, TIMES, RIGHT]),
    ])
    solution = collabcoder.solve(ADD, llm, sandbox, Budget())
    assert solution.tests == ["assert add(1, 2) == 3"]      # the statement's example, the visible test
    assert [t["step"] for t in solution.trace] == ["init", "revise_plan", "revise_code"]
    assert (
        solution.trace[1]["scores"]["plan_confidence"] == 0.1
        and solution.trace[2]["trajectory"] == "the code multiplies"
    )
    assert solution.metrics == {"iterations": 2, "plan_updates": 1, "code_updates": 1, "visible_tests": 1,
                                "solved_visible": True}
    assert score(ADD, solution.code, sandbox)["passed"]
    # the code written after the plan update follows the new plan; the patch sees the reasoning trajectory
    code_prompts = [p for p in llm.prompts if CODE in p]
    assert "Add a and b." in code_prompts[1] and "- the plan subtracts" in code_prompts[2]
    # 2 (plan, code) + 2 x (analysis, scores, insight) + plan + code + patch
    assert solution.cost.calls == 2 + 6 + 3
    assert collabcoder.summarize([solution.metrics, {"iterations": 2, "code_updates": 2}]) == {
        "plan_update_rate_%": 25.0, "code_update_rate_%": 75.0}


def test_collabcoder_stops_when_budget_runs_out(sandbox):
    llm = ScriptedLLM([(CODE, [MINUS])], default="")
    solution = collabcoder.solve(ADD, llm, sandbox, Budget(max_calls=4))
    assert solution.cost.calls == 4 and solution.metrics["iterations"] == 1


def test_cosplay_self_consistency_filter():
    assert cosplay.agreed_output(["3", " 3", "3", "4"], 3) == "3"
    assert cosplay.agreed_output(["3", "3", "4", "5"], 3) is None
    assert cosplay.agreed_output(["3", "x y", "3", "3"], 3) == "3"     # unparsable answers do not count
    assert cosplay.agreed_output(["3", "3.0", "3", "4"], 3) is None    # 3 and 3.0 differ, as == would not say
    assert cosplay.agreed_output(["[1,2]", "[1, 2]", "[1,  2]"], 3) == "[1, 2]"


# 4 codes x 4 UTs: code 0 fails all; UT 1 has the lowest non-trivial support; UTs 0 and 3 the highest (3);
# UT 2 is passed by no code
M = [[0, 0, 0, 0], [1, 1, 0, 1], [1, 0, 0, 1], [1, 1, 0, 1]]


def test_cosplay_self_play_steps():
    assert cosplay.step1_targets(M) == [0]
    assert cosplay.step2_targets(M, 1) == [1] and cosplay.step2_targets(M, 2) == [1, 0]
    assert cosplay.step3_target(M) == (0, [0])
    assert cosplay.step4_targets(M) == [2]
    assert cosplay.step4_targets([[1, 0], [1, 1]]) == [0] and cosplay.step3_target([[1, 1], [1, 1]]) is None
    assert cosplay.step1_targets([[], []]) == []   # no UTs: nothing is known to fail


def test_cosplay_cluster_selection():
    sigs = {0: ("1", "2"), 1: ("1", "2"), 2: ("1", "3"), 3: (ERROR, ERROR), 4: (ERROR, ERROR), 5: (ERROR, ERROR)}
    chosen, clusters = cosplay.select_cluster([2] * 6, sigs)
    assert chosen == 0
    assert [(c["members"], c["score"]) for c in clusters] == [([0, 1], 4), ([2], 2), ([3, 4, 5], 0)]
    # the largest cluster wins among valid outputs
    chosen, _ = cosplay.select_cluster([1] * 3, {0: ("7",), 1: ("8",), 2: ("8",)})
    assert chosen == 1


ABS, LOW, ZERO = "    return abs(a) + abs(b)\n", "    return a + b if a < 3 else 0\n", "    return 0\n"


def _cosplay_llm() -> ScriptedLLM:
    def output(prompt: str) -> str:
        a, b = map(int, re.findall(r">>> add\((-?\d+), (-?\d+)\)\n$", prompt)[0])
        if (a, b) == (7, 1):   # the LLM cannot agree on this one (9, 8, 9, 8): the UT is dropped
            output.flip = not getattr(output, "flip", False)
            return str(a + b + output.flip)
        return str(a + b)
    return ScriptedLLM([
        ("short algorithmic hints", [" add them\n2. mind negatives"]),
        ("detailed solution plan", ["Return a plus b."]),
        ("on which this plan could fail", [" negative numbers"]),
        ("choose an input on which it fails", ["3, 9)", "5, -6)"]),
        ("# A random valid input", ["7, 1)", "2, 3)", "4, 4)", "1, 1)"]),
        ("# An input that tests", ["-1, -2)", "0, 5)", "-4, 1)"]),
        (CODE, [RIGHT, TIMES, ZERO, ABS, MINUS, LOW, RIGHT, RIGHT]),
        (">>> add(", [output]),
    ])


def test_cosplay_end_to_end(sandbox):
    """Every stage on a hand-traced run (codes: a+b, a*b, 0, |a|+|b|; UTs checked by hand below)."""
    config = cosplay.CoSPlayConfig(num_hints=2, ideas_per_plan=1, num_codes=4, num_tests=4, max_rounds=2,
                                   cluster_inputs=2)
    llm = _cosplay_llm()
    solution = cosplay.solve(ADD, llm, sandbox, Budget(), config)
    # stage 1: 2 hints -> subsets {h1}, {h2}, {h1, h2} -> 3 plans -> 1 attack idea each
    assert solution.trace[0] == {"step": "explore", "hints": ["add them", "mind negatives"], "plans": 3, "ideas": 3}
    # stage 2: random input (7, 1) is dropped by self-consistency and retried as (2, 3); then (4, 4); the attack
    # half gives (-1, -2) and (0, 5)
    assert solution.tests[:4] == ["assert add(2, 3) == 5", "assert add(4, 4) == 8", "assert add(-1, -2) == -3",
                                  "assert add(0, 5) == 5"]
    assert not any("add(7, 1)" in t for t in solution.tests)
    rounds = [t["done"] for t in solution.trace if t["step"].startswith("round_")]
    # round 1: a*b and 0 fail every UT -> step 1 resamples them (a-b, and a+b-but-0-when-a>=3);
    # UT (4, 4) has the lowest support (2) -> step 2 refreshes it with the suspect code: (3, 9) == 12;
    # UT (2, 3) has the top non-trivial support (3) -> step 3 refines a-b, which fails it, into a+b;
    # (2, 3) and (0, 5) are now passed by all -> step 4 replaces them: (1, 1) == 2 and (-4, 1) == -3
    assert rounds[0] == [("step1", [1, 2]), ("step2", [1]), ("step3", [0, 1]), ("step4", [0, 3])]
    # round 2: codes a+b, a+b, a+b-but-0-when-a>=3, |a|+|b|; the UTs (3, 9), (-1, -2), (-4, 1) tie at the
    # lowest support (3) -> step 2 refreshes the first, (3, 9), into (5, -6) == -1; (-1, -2) then has the top
    # non-trivial support -> step 3 refines |a|+|b| into a+b; step 4 replaces the three UTs all pass:
    # (1, 1) -> (2, 3) (random, after (7, 1) is dropped again), (-1, -2) -> (-1, -2), (-4, 1) -> (0, 5) (attack)
    assert rounds[1] == [("step2", [1]), ("step3", [2, 3]), ("step4", [0, 2, 3])] and len(rounds) == 2
    final = solution.trace[-1]
    assert final["tests"] == ["assert add(2, 3) == 5", "assert add(5, -6) == -1", "assert add(-1, -2) == -3",
                              "assert add(0, 5) == 5"]
    # the a<3 code fails (5, -6): codes 0, 1, 3 tie at the top pass count
    assert [sum(r) for r in final["matrix"]] == [4, 4, 3, 4] and solution.metrics["bon_tied"] == 3
    # stage 4: the tied codes agree on the R = 2 random inputs: one cluster, its first code
    assert final["clusters"] == [{"members": [0, 1, 3], "score": 6}] and final["chosen"] == 0
    assert score(ADD, solution.code, sandbox)["passed"] and solution.cost.calls == len(llm.prompts)
    gt = cosplay.gt_metrics(ADD, solution, sandbox)
    assert gt == {"ut_acc": 1.0, "code_acc": 0.75, "bon": True, "signal": True}


def test_cosplay_gt_free(sandbox, monkeypatch):
    """`solve` never scores on the hidden tests: the ground-truth path is not called inside it."""
    import strategies.cosplay as mod
    monkeypatch.setattr(mod, "score", lambda *a, **k: pytest.fail("ground truth used inside solve"))
    monkeypatch.setattr(mod, "reference_code", lambda *a, **k: pytest.fail("reference used inside solve"))
    mod.solve(ADD, _cosplay_llm(), sandbox, Budget(), cosplay.CoSPlayConfig(
        num_hints=1, ideas_per_plan=1, num_codes=2, num_tests=2, max_rounds=1, cluster_inputs=1))


CLI = ["--config", "configs/magrpo_che_cpu.yaml", "--override", "agent_model.name=offline:tiny-random",
       "dataset.name=coop", "dataset.eval_split=train[:2]", "budget.max_new_tokens=8", "output.run_name=strat"]


@pytest.mark.slow
def test_cli_runs_and_resumes(tmp_path, capsys):
    argv = ["--strategy", "direct"] + CLI + [f"output.base_dir={tmp_path}"]
    assert evaluate_strategy.main(argv) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert re.fullmatch(r"pass@1: \d\.\d{4}", out[-1])
    assert any(line.startswith("calls / problem") for line in out)
    path = tmp_path / "strat" / "strategy_results.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["task_id"] for r in rows] == ["Coop/0", "Coop/1"] and rows[0]["cost"]["calls"] == 1
    # an interrupted run: the last line is half written; the rerun redoes that problem only
    path.write_text(path.read_text().splitlines()[0] + "\n" + '{"task_id": "Coop/1", "stra')
    assert evaluate_strategy.main(argv) == 0
    out = capsys.readouterr().out
    assert "resuming: 1 problem(s)" in out and re.search(r"^problems +2$", out, flags=re.M)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert sorted(r["task_id"] for r in rows) == ["Coop/0", "Coop/1"]


@pytest.mark.parametrize("override,needle", [
    ("budget.nope=1", "budget.nope: unknown key"),
    ("codet.num_codes=4", "the codet section is read by --strategy codet, not by"),
    ("direct.temperature=hot", "direct.temperature"),
    ("direct.temprature=0", "direct.temprature: unknown key; did you mean direct.temperature?"),
    ("budget.max_calss=3", "budget.max_calss: unknown key; did you mean budget.max_calls?"),
    ("budget.top_p=2", "budget.top_p: 2.0 is out of range; expected a value in [0.0, 1.0]"),
    ("dataset.eval_split=nosuch[", "nosuch["),
])
def test_cli_bad_input_is_one_error_line(tmp_path, capsys, override, needle):
    argv = ["--strategy", "direct"] + CLI + [f"output.base_dir={tmp_path}", override]
    assert evaluate_strategy.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and needle in err[0]


def test_cli_missing_checkpoint_is_one_error_line(tmp_path, capsys):
    argv = ["--strategy", "direct", "--checkpoint", str(tmp_path / "nope")] + CLI + [f"output.base_dir={tmp_path}"]
    assert evaluate_strategy.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --checkpoint")


def test_strategy_settings_are_typed_options_checked_and_documented():
    # the budget and every strategy's section are option() fields: a doc each, bounds and did-you-mean at load,
    # and a row each in the generated docs/config.md
    import dataclasses
    from pathlib import Path
    from cooprl.config import ConfigError
    from strategies import CONFIG_SECTIONS
    assert set(CONFIG_SECTIONS) == {"budget", "direct", "codet", "collabcoder", "cosplay"}
    page = (Path(__file__).resolve().parents[2] / "docs" / "config.md").read_text(encoding="utf-8")
    for name, cls in CONFIG_SECTIONS.items():
        for f in dataclasses.fields(cls):
            assert f.metadata.get("doc"), f"{name}.{f.name} has no doc"
            assert f"| `{name}.{f.name}` |" in page, f"{name}.{f.name} is not in docs/config.md"
    with pytest.raises(ConfigError, match=r"cosplay.num_codez: unknown key; did you mean cosplay.num_codes\?"):
        evaluate_strategy.split_overrides("cosplay", ["cosplay.num_codez=3"])
    with pytest.raises(ConfigError, match=r"cosplay.random_fraction: 1.5 is out of range"):
        evaluate_strategy.split_overrides("cosplay", ["cosplay.random_fraction=1.5"])
    with pytest.raises(ConfigError, match=r"codet.num_codes: 0 is out of range"):
        evaluate_strategy.split_overrides("codet", ["codet.num_codes=0"])
    _, budget, config = evaluate_strategy.split_overrides("collabcoder", ["budget.max_calls=7",
                                                                          "collabcoder.use_rt=false"])
    assert budget.max_calls == 7 and config.use_rt is False and config.max_iterations == 5


def _results_made_with(folder, settings_overrides, strategy="codet", checkpoint=None):
    """Write the results folder a run of `strategy` on Coop/0 and Coop/1 leaves, made with `settings_overrides` (and
    the agents of `checkpoint`)."""
    rest, budget, strategy_config = evaluate_strategy.split_overrides(strategy, CLI[3:] + settings_overrides)
    config = evaluate_strategy.read_strategy_config(CLI[1], rest)
    settings = evaluate_strategy.strategy_settings(config, strategy, budget, strategy_config, checkpoint, None)
    folder.mkdir(parents=True)
    evaluate_strategy.settings_file(folder, strategy).write_text(json.dumps(settings), encoding="utf-8")
    row = {"strategy": strategy, "llm": "offline:tiny-random", "passed": True, "code": "", "seconds": 1.0,
           "cost": {"calls": 1, "tokens_in": 1, "tokens_out": 1}, "metrics": {"num_codes": 2}}
    (folder / evaluate_strategy.RESULTS).write_text(
        "".join(json.dumps({**row, "task_id": f"Coop/{i}"}) + "\n" for i in range(2)), encoding="utf-8")


@pytest.mark.slow
def test_results_resume_only_under_the_settings_that_made_them(tmp_path, capsys):
    _results_made_with(tmp_path / "strat", ["codet.num_codes=2"])
    saved = evaluate_strategy.settings_file(tmp_path / "strat", "codet").read_text()
    argv = ["--strategy", "codet"] + CLI + [f"output.base_dir={tmp_path}"]
    assert evaluate_strategy.main(argv + ["codet.num_codes=3", "budget.max_calls=9"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "made with other settings" in err[0], err
    assert "codet.num_codes: 2 there, 3 now" in err[0] and "budget.max_calls" in err[0]
    assert "output.run_name" in err[0]   # the way out
    assert evaluate_strategy.settings_file(tmp_path / "strat", "codet").read_text() == saved   # still true
    # the same settings resume (every problem is done: nothing to load or run)
    assert evaluate_strategy.main(argv + ["codet.num_codes=2"]) == 0
    assert "resuming: 2 problem(s)" in capsys.readouterr().out


def test_results_of_a_run_s_older_checkpoint_are_not_resumed_with_its_newer_one(tmp_path, capsys, monkeypatch):
    # --checkpoint RUN names the run's newest checkpoint: once the run saved a newer one, the settings file still
    # said "checkpoint: RUN" and the results of the two checkpoints were mixed
    from cooprl import checkpoint as ckpt
    monkeypatch.setattr(ckpt, "check_checkpoint", lambda folder: None)   # folders with a done marker, no weights
    run_dir = tmp_path / "trained"
    for step in (1, 2):
        (run_dir / "checkpoints" / f"checkpoint-{step}").mkdir(parents=True)
        (run_dir / "checkpoints" / f"checkpoint-{step}" / "done").write_text(str(step))
        if step == 1:
            _results_made_with(tmp_path / "strat", ["codet.num_codes=2"], checkpoint=str(run_dir))
    argv = ["--strategy", "codet", "--checkpoint", str(run_dir)] + CLI + [f"output.base_dir={tmp_path}",
                                                                          "codet.num_codes=2"]
    assert evaluate_strategy.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "weights.checkpoint" in err[0] and "checkpoint-1" in err[0] and "checkpoint-2" in err[0]


def test_results_never_go_into_a_training_run_folder(tmp_path, capsys):
    # the CPU config's run_name names its training run: without --override output.run_name it is not used
    config = evaluate_strategy.read_strategy_config("configs/magrpo_che_cpu.yaml", [f"output.base_dir={tmp_path}"])
    assert config.output.run_name   # (the file fixes one)
    assert evaluate_strategy.results_folder(config, "codet", None, named=False) == tmp_path / "strategy-codet-coop"
    # named on the command line, a training run's folder is refused unless the checkpoint is that run's
    run_dir = tmp_path / "trained"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(config.to_yaml("magrpo"))
    argv = ["--strategy", "direct"] + CLI[:-1] + [f"output.base_dir={tmp_path}", "output.run_name=trained"]
    assert evaluate_strategy.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a training run's folder" in err[0], err
    named = evaluate_strategy.read_strategy_config("configs/magrpo_che_cpu.yaml",
                                                   [f"output.base_dir={tmp_path}", "output.run_name=trained"])
    assert evaluate_strategy.results_folder(named, "direct", str(run_dir / "checkpoints"), named=True) == run_dir


# ------------------------------------------------------------------------------------------------ issue 43
def test_a_team_whose_main_saw_aux_in_training_sees_its_own_aux_here(sandbox):
    aux = ScriptedLLM([("helper function named `aux`", ["a, b):\n    return a + b\n", "a, b):\n    return b + a\n"])])
    main = ScriptedLLM([("Do not redefine `aux`", ["    return aux(a, b)\n"])])
    team = TeamLLM(aux, main, [ADD], main_sees_aux=True)
    generations = team.generate(code_prompt(ADD, "Plan: add them."), 2, SamplingParams())
    assert len(generations) == 2 and len(main.prompts) == 2   # one main answer per aux answer
    for prompt, body in zip(main.prompts, ("return a + b", "return b + a"), strict=True):
        assert prompt.startswith("Plan: add them.\n\nThe helper function `aux` is defined as follows:\n\n"
                                 "def aux(a, b):")
        assert body in prompt and prompt.endswith(ADD.prompt.lstrip("\n"))
    assert all(score(ADD, extract_code(ADD, g.text), sandbox)["passed"] for g in generations)
    plain = ScriptedLLM([("Do not redefine `aux`", ["    return aux(a, b)\n"])])
    TeamLLM(aux, plain, [ADD]).generate(code_prompt(ADD), 2, SamplingParams())
    assert "is defined as follows" not in plain.prompts[0]   # upstream's team: main only knows aux exists


def cooprl_overrides(*more: str) -> list[str]:
    """Return CLI's overrides and `more` less the budget's (what read_strategy_config reads)."""
    return evaluate_strategy.split_overrides("direct", CLI[3:] + list(more))[0]


def _trained_run(folder, **task_keys) -> str:
    """Write a run folder whose config.yaml has the task's `task_keys` (section.key: value); return its checkpoint."""
    overrides = [f"{key}={value}" for key, value in task_keys.items()]
    config = evaluate_strategy.read_strategy_config(CLI[1], cooprl_overrides(*overrides))
    (folder / "checkpoints" / "checkpoint-3").mkdir(parents=True)
    (folder / "config.yaml").write_text(config.to_yaml("magrpo"))
    return str(folder / "checkpoints" / "checkpoint-3")


def test_a_trained_checkpoint_gets_the_prompts_of_its_training(tmp_path, capsys):
    checkpoint = _trained_run(tmp_path / "run", **{"code_prompt.open_body": "true", "aux_main.main_sees_aux": "true"})
    config = evaluate_strategy.read_strategy_config(CLI[1], cooprl_overrides())
    assert not config.task.code_prompt.open_body and not config.task.aux_main.main_sees_aux   # the file's
    taken = evaluate_strategy.training_prompts(config, checkpoint, set())
    assert taken.task.code_prompt.open_body and taken.task.aux_main.main_sees_aux
    err = capsys.readouterr().err
    assert f"note: code_prompt.open_body=true, as {tmp_path / 'run' / 'config.yaml'} trained with it" in err
    assert "note: aux_main.main_sees_aux=true" in err
    # what the command line overrides stays; a run folder given as --checkpoint is found too
    kept = evaluate_strategy.training_prompts(config, str(tmp_path / "run"), {"code_prompt.open_body"})
    assert not kept.task.code_prompt.open_body and kept.task.aux_main.main_sees_aux
    # a checkpoint outside any run, and a run trained with the defaults, change nothing
    (tmp_path / "loose").mkdir()
    assert evaluate_strategy.training_prompts(config, str(tmp_path / "loose"), set()) is config
    plain = _trained_run(tmp_path / "plain")
    assert evaluate_strategy.training_prompts(config, plain, set()).task == config.task


def test_the_strategy_sees_the_prompts_the_config_asks_for(tmp_path, capsys, monkeypatch, sandbox):
    # code_prompt.open_body was ignored: a strategy asked for the function after its docstring, never inside it
    import strategies.llm
    llm = ScriptedLLM([(CODE, [RIGHT])])
    monkeypatch.setattr(strategies.llm, "build_llm", lambda *args, **kwargs: llm)
    argv = ["--strategy", "direct"] + CLI + [f"output.base_dir={tmp_path}", "dataset.eval_split=train[:1]",
                                             "code_prompt.open_body=true"]
    assert evaluate_strategy.main(argv) == 0
    assert llm.prompts[0].endswith('"""\n    ') and "def " in llm.prompts[0]   # inside the body
    settings = json.loads(evaluate_strategy.settings_file(tmp_path / "strat", "direct").read_text())
    assert settings["prompting"]["open_body"] is True and settings["prompting"]["main_sees_aux"] is False


def test_results_of_another_dataset_file_are_not_resumed(tmp_path, capsys):
    # dataset.path names a file: results made on its earlier contents were resumed as if they were the same problems
    from envs.code_generation.data import COOP_FILE
    data = tmp_path / "problems.jsonl"
    data.write_text("".join(COOP_FILE.read_text().splitlines(keepends=True)[:2]))
    path_override = [f"dataset.path={data}", "dataset.eval_split=test"]
    _results_made_with(tmp_path / "strat", ["codet.num_codes=2", *path_override])
    argv = ["--strategy", "codet"] + CLI + [f"output.base_dir={tmp_path}", "codet.num_codes=2", *path_override]
    assert evaluate_strategy.main(argv) == 0   # the same file: resumed (both problems done, nothing loaded)
    assert "resuming: 2 problem(s)" in capsys.readouterr().out
    record = json.loads(data.read_text().splitlines()[1])
    record["test"] = record["test"].replace("assert", "assert True or", 1)   # one problem's test changed
    data.write_text(data.read_text().splitlines(keepends=True)[0] + json.dumps(record) + "\n")
    assert evaluate_strategy.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "made with other settings (dataset.sha256:" in err[0], err
    assert evaluate_strategy.file_digest(str(data)) in err[0]


def test_an_agents_entry_given_as_a_mapping_names_the_model_a_strategy_loads(monkeypatch):
    import cooprl.models.loading as loading
    from strategies.llm import build_llm
    rest, budget, strategy_config = evaluate_strategy.split_overrides(
        "codet", CLI[3:] + ["agents=[{name: offline:tiny-random, temperature: 0.2}, other/model]"])
    config = evaluate_strategy.read_strategy_config(CLI[1], rest)
    settings = evaluate_strategy.strategy_settings(config, "codet", budget, strategy_config, None, None)
    assert settings["prompting"]["agents"] == ["offline:tiny-random", "other/model"]   # the models, as JSON

    class Loaded(Exception):
        pass

    def load(name, **kwargs):
        raise Loaded(name)

    monkeypatch.setattr(loading, "load_causal_lm", load)
    with pytest.raises(Loaded, match="^offline:tiny-random$"):   # the first entry's model, untrained
        build_llm(config)


def test_a_shared_policy_checkpoint_is_a_team_of_one_model(tmp_path):
    # a shared-policy run saves its one model once (agent_0/ and shared_policy.json): both roles of the team are it
    import torch

    from cooprl import checkpoint as ckpt
    from cooprl.config import load_config
    from cooprl.models.loading import TINY_RANDOM, load_causal_lm
    from strategies.llm import build_llm
    trained = load_causal_lm(TINY_RANDOM, device="cpu")
    with torch.no_grad():
        trained.lm_head.weight.add_(0.5)
    folder = ckpt.save_checkpoint(tmp_path, 1, [trained], {}, shared_agents=2)
    config = load_config(None, [f"agent_model.name={TINY_RANDOM}", "agent_model.device=cpu"])
    llm = build_llm(config, str(folder), max_new_tokens=4)
    assert isinstance(llm, TeamLLM) and llm.aux.generator is llm.main.generator
    assert torch.equal(llm.main.generator.model.lm_head.weight, trained.lm_head.weight)
