"""The coder+tester Task: agent 0 writes the function, agent 1 writes unit tests; they act at once.

The coder answers the single-agent code prompt (it ends with the problem's code). The tester answers
`tester_prompt`, which ends with `assert <entry>(`: its tests are the first `coder_tester.max_tests` one-line asserts
calling the entry point in `assert <entry>(` + its completion (`rewards.self_tests.generated_asserts`). Generated
tests are judged tests: the sandbox's judge evaluates them on the plain-data values of the candidate's calls.

Rewards of joint action k of a node (its group: the node's G joint actions, consecutive in the scoring batch):
    coder_k  = the single-agent code reward of the coder's code (max 2.1): hidden tests, or with
               `code_reward.type: self_tests` its support among the problem's examples and every tester test of the
               group, weighted by reliability (rewards/self_tests.py); no hidden verdict then.
    tester_k = mean over its tests t of   0        when t is not a judged test (rewards/judged_tests.py: an assert
                                                   on the values of calls, not one that inspects the program),
                                                   or calls the function with a literal number outside the
                                                   range the hidden check passes there (an input the prompt
                                                   may exclude: `off_spec_range`),
                                          -1       when the reference solution fails t, or a correct
                                                   code of the group, or the reference refusing
                                                   arguments of kinds the hidden check never passes
                                                   (a test pinning the reference off the spec),
                                          0        when both stubs that return junk pass t (a tautology), or
                                                   the typed junk does (the reference's results changed to
                                                   other values of their type, the prompt's examples answered
                                                   right: a type check, `is not None`, a guarded tautology,
                                                   the prompt's examples copied),
                                          kill(t)  otherwise,
               kill(t) = share of the group's wrong codes (codes that fail some hidden test, run as the cleaned program
               the coder is scored on, and load) that fail t (0 when the group has none); 0 when it wrote no test or
               the problem has no reference solution (HumanEval's canonical_solution, the coop set's reference_aux +
               reference_main, built as a coder's code is). Range [-1, 1]. The tester's reward always uses the
               reference and the hidden verdicts: ground truth, never shown. A test is paid for the wrong codes it
               catches, not for being true of the reference (docs/teams.md: "What a tester is paid" has the shapes).
`reward_sharing: shared`: both agents are trained on total = coder_k + tester_k (max 3.1).
`reward_sharing: individual`: Score.agent_rewards = [coder_k, tester_k] (each agent its own; total as in shared, for
the logs and early termination). MADPO and MARLHF refuse it; MAAC takes it single-turn only (cooprl/ says why).
Later turns: the coder gets the code task's level feedback, the tester how many of its tests the reference passed
and how many wrong codes they caught.
Centralized (`collaboration_mode: centralized`, one turn, shared reward): one model writes the function and then its
asserts in one answer (`joint_prompt`); `split_joint_answer` cuts it into the coder's and the tester's texts, scored
as above (`cooprl.task.centralized_task`). The group of a node is then the one model's G answers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Sequence

from cooprl.config import ConfigError, Run
from cooprl.task import JointFormat, Score, Task, centralized_task
from envs.code_generation.data import Problem
from envs.code_generation.prompts import completion_to_code, problem_code, single_prompt, stop_strings
from envs.code_generation.task import check_single_turn, task_problems
from envs.code_generation.self_tests import (coder_builds, feedback_slice_of, groups, mutants_of, reference_build,
                                             score_functions, spec_guarded, typed_junk, typed_twins)
from envs.code_generation.transitions import feedback_problem, next_prompt
from envs.coder_tester.demonstrations import coder_tester_demonstrations
from rewards.code_rewards import code_reward
from rewards.judged_tests import STUB_BODIES, judged_suite, off_spec_range, parameters, spec_ranges, stub_programs
from rewards.sandbox import default_sandbox
from rewards.self_tests import (calls_of, caught_row, discrimination_reward, example_asserts, generated_asserts,
                                judged_pool, loaded, pass_row, run_judged, vacuous)

CODER_MAX, TESTER_MAX = 2.1, 1.0
N_JUNK_STUBS = len(STUB_BODIES)   # a group's stubs: the junk stubs, then the typed junk (when there is a reference)
TESTER_STOPS = ("```", "\ndef ", "\n\n\n", "\nprint(")
JOINT_STOPS = ("\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\n```", "\n\n\n")   # the code's, but asserts go on


@dataclass
class TesterVerdict:
    """What the tester's tests did: the tests, each one's column in the rows (None: not a judged test), the pass
    rows of the correct codes (the reference first, then the group's codes that pass every hidden test) and of
    the junk stubs, and the caught rows (`rewards.self_tests.caught_row`) of the wrong codes: the group's that
    load, then the reference's wrong mutants (`rewards.mutants`)."""

    tests: list[str]
    columns: list[int | None]
    correct_rows: list[list[int]]
    stub_rows: list[list[int]]
    caught_rows: list[list[int]]
    has_reference: bool
    typed_rows: list[list[int]] = field(default_factory=list)   # the typed junk's (`rewards.self_tests.vacuous`)

    @property
    def reward(self) -> float:
        """Return the tester's reward (module docstring); 0 without a reference."""
        if not self.has_reference:
            return 0.0
        return discrimination_reward(self.columns, self.correct_rows, self.stub_rows, self.caught_rows,
                                     self.typed_rows)

    def judged(self) -> list[int]:
        """Return the columns of its judged tests."""
        return [j for j in self.columns if j is not None]

    def valid(self) -> list[int]:
        """Return the columns of its judged tests that every correct code passes."""
        return [j for j in self.judged() if self.correct_rows and all(row[j] for row in self.correct_rows)]

    def vacuous(self) -> list[int]:
        """Return the columns of its valid tests that junk passes (`rewards.self_tests.vacuous`)."""
        return [j for j in self.valid() if vacuous(j, self.stub_rows, self.typed_rows)]


def tester_prompt(problem: Problem, max_tests: int) -> str:
    """Return the tester's prompt: the problem and a request for one-line asserts; ends with `assert <entry>(`."""
    entry = problem.entry_point
    return (f"Problem:\n{problem.prompt.strip(chr(10))}\n\n"
            f"Write {max_tests} unit tests for `{entry}`, one per line, each of the form "
            f"`assert {entry}(...) == expected`. Cover edge cases. Write only the asserts.\n"
            f"assert {entry}(")


def tester_tests(problem: Problem, completion: str, max_tests: int) -> list[str]:
    """Return the tests of a tester completion: the asserts of `assert <entry>(` + completion (at most max_tests)."""
    return generated_asserts(problem.entry_point, f"assert {problem.entry_point}(" + (completion or ""), max_tests)


def is_wrong(score: Score) -> bool:
    """Return whether a coder's code counts as wrong for the tester: it parses and fails some hidden test."""
    b = score.details[2]
    return bool(b.syntax_ok and b.tests_total and b.tests_passed < b.tests_total)


def is_correct(score: Score) -> bool:
    """Return whether a coder's code counts as correct for the tester: it passes every hidden test (a test that
    rejects it is wrong, whatever the reference does)."""
    b = score.details[2]
    return bool(b.syntax_ok and b.tests_total and b.tests_passed == b.tests_total)


@dataclass
class _GroupRuns:
    """The runs one group asks for: each tester's judged tests (its pool) on the reference and the wrong codes, and
    the union of the pools on the junk stubs."""

    run: range
    pools: dict[int, list[str]]
    columns: dict[int, list[int | None]]
    union: list[str]
    judges: list[Any]          # the correct codes (reference first), then the wrong ones; empty without a reference
    n_correct: int
    stubs: list[str]


def tester_verdicts(items: Sequence[Problem], codes: Sequence[str], coder_scores: Sequence[Score],
                    tests: Sequence[list[str]]) -> list[TesterVerdict]:
    """Return each joint action's TesterVerdict: its judged tests run on the correct codes (the reference and the
    group's codes that pass every hidden test) and the wrong ones (the group's, the reference's mutants), each
    coder's code as the cleaned program it is scored on, in a process of its own per tester (one tester's slow
    test never skips another's); the junk stubs, pure and instant, run once per group on all its testers' tests.
    Every run of the batch goes in one sandbox batch."""
    builds, plans, jobs = coder_builds(items, codes), [], []
    programs = [None if built is None else built[0] for built in builds]
    for run in groups(items):
        problem = items[run.start]
        built = reference_build(problem)
        entry, (reference, reference_src) = problem.entry_point, (None, None) if built is None else built
        correct = [programs[k] for k in run if is_correct(coder_scores[k]) and programs[k] is not None]
        # the correct codes: the reference, the reference refusing arguments off the spec (so a test pinning what
        # the reference does there is wrong, as a correct alternative code shows it to be), the group's own; the
        # wrong ones as typed twins (a result of another kind than the reference's is caught by a type check:
        # no test is paid for it)
        guarded = spec_guarded(problem, reference_src)
        judges = [] if reference is None else [reference, *guarded, *correct, *typed_twins(problem, reference_src, [
            builds[k][1] for k in run if is_wrong(coder_scores[k]) and programs[k] is not None] + mutants_of(problem))]
        plan = _GroupRuns(run, {k: [] for k in run}, {}, [], judges, 1 + len(guarded) + len(correct), [])
        # a test on a number outside the range the hidden calls take is no test: it earns 0, paid or wrong alike
        ranges = spec_ranges(problem.test, entry, parameters(problem.prompt, entry)) if problem.test else {}
        for k in run:
            plan.columns[k] = [None if off_spec_range(test, entry, ranges) else column
                               for test, column in zip(tests[k], judged_pool(entry, tests[k], plan.pools[k]))]
            judged_pool(entry, plan.pools[k], plan.union)
            if plan.pools[k]:
                jobs += [(program, judged_suite(entry, plan.pools[k])) for program in plan.judges]
        # the typed junk answers the prompt's examples right (a memoriser): a test of shown calls only is vacuous
        shown = set().union(*(calls_of(entry, t) for t in example_asserts(problem)))
        plan.stubs = (stub_programs(entry) + typed_junk(problem, reference_src, shown)
                      if plan.judges and plan.union else [])
        jobs += [(stub, judged_suite(entry, plan.union)) for stub in plan.stubs]
        plans.append(plan)
    reports = iter(run_judged(default_sandbox(), jobs) if jobs else [])
    verdicts = []
    for plan in plans:
        runs = {k: [next(reports) for _ in plan.judges] if plan.pools[k] else [] for k in plan.run}
        stub_rows = [pass_row(next(reports)) for _ in plan.stubs]
        junk_rows, typed_rows = stub_rows[:N_JUNK_STUBS], stub_rows[N_JUNK_STUBS:]
        for k in plan.run:
            own, at_union = runs[k], [plan.union.index(test) for test in plan.pools[k]]
            verdicts.append(TesterVerdict(
                tests[k], plan.columns[k], [pass_row(r) for r in own[:plan.n_correct]],
                [[row[j] for j in at_union] for row in junk_rows],
                [caught_row(r) for r in own[plan.n_correct:] if loaded(r)],   # one that does not load is no bug
                bool(plan.judges) and (not own or loaded(own[0])),   # nor does a reference that does not load judge
                [[row[j] for j in at_union] for row in typed_rows]))
    return verdicts


def tester_metrics(verdict: TesterVerdict) -> dict[str, float]:
    """Return the tester's numbers for the logs: tests written, the share judged, the share of the judged ones the
    reference passes, the share of them that junk stubs pass too (vacuous), the mean kill of the other valid ones."""
    n, judged, valid, vacuous = len(verdict.tests), verdict.judged(), verdict.valid(), verdict.vacuous()
    useful = [j for j in valid if j not in vacuous]
    kills = [sum(row[j] for row in verdict.caught_rows) / len(verdict.caught_rows)
             for j in useful] if verdict.caught_rows else []
    return {"tester_reward": verdict.reward, "tests_written": float(n),
            "tests_judged": len(judged) / n if n else 0.0,
            "tests_valid": len(valid) / len(judged) if judged and verdict.correct_rows else 0.0,
            "tests_vacuous": len(vacuous) / len(judged) if judged else 0.0,
            "tests_kill": sum(kills) / len(kills) if kills else 0.0,
            "tester_no_reference": float(not verdict.has_reference)}


def build_coder_tester_task(run: Run) -> Task:
    """Return the coder+tester Task for `run`'s section and config (ConfigError if it cannot be built)."""
    trainer, section, cfg = run.trainer, run.section, run.config.task
    if section.num_agents != 2:
        raise ConfigError(f"{trainer}.num_agents={section.num_agents}: the coder+tester team has 2 agents")
    if cfg.aux_main.main_sees_aux:
        raise ConfigError("aux_main.main_sees_aux is for the code task's aux+main team, not this one")
    team, external, reward_type = cfg.coder_tester, cfg.external, cfg.code_reward.type
    individual = team.reward_sharing == "individual"
    centralized = section.collaboration_mode == "centralized"
    if centralized:
        check_single_turn(run)
        if individual:
            raise ConfigError(f"{trainer}.collaboration_mode=centralized: one model writes both parts and is trained "
                              f"on one reward; set coder_tester.reward_sharing=shared")

    def parts(problem: Problem, joint: Sequence[str]) -> tuple[str, list[str]]:
        return completion_to_code("single", problem, joint[0]), tester_tests(problem, joint[1], team.max_tests)

    def score(items: Sequence[Problem], joints: Sequence[Sequence[str]]) -> list[Score]:
        codes, tests = zip(*(parts(p, joint) for p, joint in zip(items, joints))) if joints else ((), ())
        coder = score_functions(items, list(codes), reward_type, group_tests=list(tests),
                                feedback_slice=feedback_slice_of(run))
        verdicts = tester_verdicts(items, list(codes), coder, list(tests))
        out = []
        for c, v in zip(coder, verdicts):
            t = v.reward
            total = round(c.total + t, 6)
            metrics = {**c.metrics, **tester_metrics(v), "coder_reward": c.total}
            out.append(Score(total, metrics, c.success, details=(c.details, v),
                             agent_rewards=[c.total, t] if individual else None))
        return out

    def next_prompts(problem: Problem, histories: Sequence[Sequence[tuple[str, str]]], joint: Sequence[str],
                     score_: Score) -> list[str]:
        (_, code, breakdown), verdict = score_.details
        sliced = feedback_problem(problem, external.sandbox_slice)
        if sliced.test != problem.test:   # the feedback shows (and runs) only the chosen asserts
            breakdown = code_reward(sliced, "", code, single_agent=True)
        coder = next_prompt("level_feedback", problem, "single", list(histories[0]), breakdown,
                            sandbox_slice=external.sandbox_slice)
        return [coder, tester_feedback(problem, histories[1], verdict)]

    dataset = cfg.dataset
    task = Task(name=f"coder_tester:{dataset.name}", num_agents=2,
                train_items=task_problems(cfg, dataset.train_split),
                eval_items=task_problems(cfg, dataset.eval_split), item_id=lambda p: p.task_id,
                first_prompts=lambda p: [single_prompt(p), tester_prompt(p, team.max_tests)], score=score,
                next_prompts=next_prompts, max_reward=CODER_MAX + TESTER_MAX,
                stop_strings=[tuple(stop_strings("single")), TESTER_STOPS], agent_rewards=individual,
                demonstrations=lambda p: coder_tester_demonstrations(p, team.max_tests),
                joint_format=JointFormat(lambda p: joint_prompt(p, team.max_tests), split_joint_answer, JOINT_STOPS))
    return centralized_task(task) if centralized else task


def joint_prompt(problem: Problem, max_tests: int) -> str:
    """Return the centralized prompt (one model codes and tests): the function, then one-line asserts after it; it
    ends with the problem's code."""
    entry = problem.entry_point
    return (f"Implement the function `{entry}` below, then write {max_tests} unit tests for it after the function, "
            f"one per line, each of the form `assert {entry}(...) == expected`. Write only the Python code, no "
            f"explanation.\n\n{problem_code(problem)}")


def split_joint_answer(problem: Problem, answer: str) -> list[str]:
    """Return [coder text, tester text] of a centralized answer: the function body up to the first column-0
    `assert `, and the asserts from there (the tester's text continues its prompt's `assert <entry>(`: a leading
    newline leaves that line unparseable, so only the answer's own asserts count)."""
    start = re.search(r"^assert ", answer or "", re.MULTILINE)
    if start is None:
        return [answer or "", ""]
    return [answer[:start.start()], "\n" + answer[start.start():]]


def tester_feedback(problem: Problem, history: Sequence[tuple[str, str]], verdict: TesterVerdict) -> str:
    """Return the tester's next prompt: its last prompt and tests, what they did, and a request for better tests
    (ending with `assert <entry>(` again)."""
    last_prompt, _ = history[-1]
    start = f"assert {problem.entry_point}("
    context = last_prompt[:-len(start)] if last_prompt.endswith(start) else last_prompt + "\n"
    n, judged, valid = len(verdict.tests), len(verdict.judged()), verdict.valid()
    caught = sum(1 for row in verdict.caught_rows if any(row[j] for j in valid))
    said = "\n".join(verdict.tests) or "(no test)"
    unjudged = (f" {n - judged} could not be checked: call `{problem.entry_point}` and compare its value with a "
                f"literal." if judged < n else "")
    return (f"{context}{said}\n\nFeedback: {len(valid)} of your {n} tests accept every correct solution; "
            f"they catch {caught} of {len(verdict.caught_rows)} wrong solutions.{unjudged} Write the tests again, "
            f"fixing wrong expected values and adding tests that catch mistakes.\n{start}")
