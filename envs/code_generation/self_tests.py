"""Scoring one function per joint action by hidden tests or by self tests (`code_reward.type`), for the code
environments whose team writes one function (a single agent, planner_coder's coder, coder_tester's coder).

`self_tests` needs a node's whole group: the rollout hands a node's joint actions to `Task.score` in a row with the
same item object (cooprl/task.py), so `groups` cuts the batch where the item object changes. A group's pool, in
judged form (`rewards.judged_tests`):
- the held-out tests: the one-line asserts of the problem's check that its prompt does not show
  (`rewards.self_tests.held_out_asserts`), weight 1;
- the generated tests given for the group (a tester's), weighted by reliability, less those that junk passes
  (`rewards.judged_tests.stub_programs`), those that reject none of the reference's wrong mutants on their values
  (`rewards.mutants`: a guarded tautology), those that call the entry point only on the prompt's examples, and
  those a memoriser passes (`typed_junk`: the reference answering the examples right and every other call with
  another value of the right type; a test of an example joined to a type check or a tautology).
The prompt's examples are never in the pool: a code that memorises them (`{'aaabcc': 'a3bc2'}.get(text, '')`)
then earns exactly what the same code without the table earns. Each code runs as the program the hidden-test
reward would run (`coder_programs`), its execution matrix in one sandbox batch with every other group's, and each
code's reward is `rewards.self_tests`'s. The hidden-test reward is still computed for the logs (`hidden_reward`,
`success`); the held-out tests are the part of the hidden check that reaches the self-tests reward (a problem
without a check has none: its pool is the generated tests alone).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import CodeType
from typing import Any, Sequence

from cooprl.task import Score, node_groups as groups   # one node's joint actions
from envs.code_generation.prompts import code_prefix, completion_to_code
from envs.code_generation.scoring import score_code_pairs
from envs.code_generation.transitions import visible_asserts
from rewards.code_rewards import hidden_tests_suite, scored_build
from rewards.judged_tests import (judged_suite, parameters, spec_guarded_program, spec_kinds, stub_programs,
                                  typed_junk_program, typed_twin_program)
from rewards.problem import Problem
from rewards.mutants import wrong_mutants
from rewards.sandbox import TestSuite, default_sandbox
from rewards.self_tests import (calls_of, caught_row, example_asserts, held_out_asserts, judged_pool, levels_reward,
                                loaded, pass_row, run_judged, self_tests_rewards, shown_calls_only, vacuous)

REWARD_TYPES = ("hidden_tests", "self_tests")


def coder_builds(items: Sequence[Problem], codes: Sequence[str]) -> list[tuple[str | CodeType, str] | None]:
    """Return, for each single-agent code, the program the hidden-test reward runs and its source
    (`rewards.code_rewards.scored_build`: cleaned; None when its scoring stops before the tests): what every other
    judge of the code runs too."""
    return [scored_build(problem, "", code, single_agent=True) for problem, code in zip(items, codes)]


def coder_programs(items: Sequence[Problem], codes: Sequence[str]) -> list[str | CodeType | None]:
    """Return the program of each `coder_builds` build (None where that is None)."""
    return [None if built is None else built[0] for built in coder_builds(items, codes)]


def reference_build(problem: Problem) -> tuple[str | CodeType, str] | None:
    """Return the problem's reference solution built as a coder's code is (the coder's prefix + the canonical body,
    or the cooperative set's reference aux + main as a pair, then cleaned): (program, source) as `scored_build`
    returns them, or None when the record has none."""
    extra = problem.extra
    if extra.get("canonical_solution"):
        return scored_build(problem, "", reference_source(problem), single_agent=True)
    if extra.get("reference_main"):
        return scored_build(problem, extra.get("reference_aux", ""), extra["reference_main"], single_agent=False)
    return None


def reference_program(problem: Problem) -> str | CodeType | None:
    """Return the program of `reference_build` (None where that is None)."""
    built = reference_build(problem)
    return None if built is None else built[0]


def typed_junk(problem: Problem, reference: str | None, shown_calls: Sequence[str] = ()) -> list[str]:
    """Return the problem's typed junk (`rewards.judged_tests.typed_junk_program`: the reference, `reference` the
    source of its `reference_build`, with every result changed to another value of its type, except on
    `shown_calls`, where it answers right: a memoriser of those calls), as a list of one program; none without a
    reference."""
    program = None if reference is None else typed_junk_program(reference, problem.entry_point, sorted(shown_calls))
    return [] if program is None else [program]


def typed_twins(problem: Problem, reference: str | None, wrong_sources: Sequence[str]) -> list[str]:
    """Return each wrong code (source) as its typed twin (`rewards.judged_tests.typed_twin_program`: a result of
    another kind than the reference's, `reference` the source of its `reference_build`, raises, so that no test is
    paid for catching it with a type check); the codes as they are without a reference."""
    if reference is None:
        return list(wrong_sources)
    return [typed_twin_program(wrong, reference, problem.entry_point) for wrong in wrong_sources]


def spec_guarded(problem: Problem, reference: str | None) -> list[str]:
    """Return the reference (`reference`: the source of its `reference_build`) refusing arguments of a kind the
    hidden check never passes (`rewards.judged_tests.spec_guarded_program`: a correct code), as a list of one
    program; none without a reference or a check that constrains an argument."""
    program = None if reference is None or not problem.test else spec_guarded_program(
        reference, problem.entry_point, spec_kinds(problem.test, problem.entry_point,
                                                   parameters(problem.prompt, problem.entry_point)))
    return [] if program is None else [program]


def reference_source(problem: Problem) -> str | None:
    """Return the source of the problem's reference solution as one program (the coder's prefix + the canonical
    body, or the reference aux then main), or None when the record has none."""
    extra = problem.extra
    if extra.get("canonical_solution"):
        body = extra["canonical_solution"]
        if not code_prefix("single", problem).endswith("\n"):   # an open-body prompt ends with the indentation
            body = body.lstrip(" \t")
        return completion_to_code("single", problem, body)
    if extra.get("reference_main"):
        return f"{extra.get('reference_aux', '')}\n\n{extra['reference_main']}"
    return None


def hidden_suite(problem: Problem) -> TestSuite:
    """Return the problem's hidden tests as the hidden-test reward runs them."""
    return hidden_tests_suite(problem.test, problem.entry_point, problem.prompt)


def mutants_of(problem: Problem) -> list[str]:
    """Return the problem's wrong mutants (`rewards.mutants`): programs that load, fail some hidden test on its
    value and time out on none; none without a reference or hidden tests. Computed once per problem."""
    source = reference_source(problem)
    if source is None or not problem.test:
        return []
    suite = hidden_suite(problem)

    def rejected_on_values(programs: list[str]) -> list[bool]:
        # one that times out on a hidden test would cost every tester's run a timeout: left out
        reports = run_judged(default_sandbox(), [(program, suite) for program in programs])
        return [loaded(r) and any(not o.passed and o.on_values for o in r.outcomes)
                and not any(o.timed_out for o in r.outcomes) for r in reports]

    return wrong_mutants((problem.task_id, problem.test, source), source, rejected_on_values)


def score_functions(items: Sequence[Problem], codes: Sequence[str], reward_type: str,
                    group_tests: Sequence[Sequence[str]] | None = None, feedback_slice: Any = None) -> list[Score]:
    """Return each code's Score (single-agent reward, max 2.1): by the hidden tests, or by self tests, where
    `group_tests[k]` are extra generated tests of entry k's group (entries of one group give the union).
    `feedback_slice`: the `external.sandbox_slice` whose asserts a later turn's feedback shows (None: no feedback
    shows tests, `feedback_slice_of`); they leave the held-out pool."""
    if reward_type not in REWARD_TYPES:
        raise ValueError(f"code_reward.type {reward_type!r}: expected one of {', '.join(REWARD_TYPES)}")
    hidden = score_code_pairs(items, [("", code) for code in codes], single_agent=True)
    if reward_type == "hidden_tests":
        return hidden
    totals = self_test_totals(items, codes, hidden, group_tests, feedback_slice)
    return [replace(score, total=total, metrics={**score.metrics, "hidden_reward": score.total,
                                                   "self_support": round(total - levels_of(score), 6)})
            for score, total in zip(hidden, totals)]


def levels_of(score: Score) -> float:
    """Return the levels-1-2 part of a single-agent code Score (its details hold the breakdown)."""
    b = score.details[2]
    return levels_reward(b.main_defined, b.syntax_ok)


def feedback_slice_of(run: Any) -> Any:
    """The `external.sandbox_slice` whose asserts a later turn's feedback shows for `run` (level or expert
    feedback, more than one turn), or None: what the self-tests' held-out pool leaves out."""
    external = run.config.task.external
    shows = run.section.num_turns > 1 and external.mode in ("level_feedback", "expert_edits")
    return external.sandbox_slice if shows else None


def self_test_totals(items: Sequence[Problem], codes: Sequence[str], hidden: Sequence[Score],
                     group_tests: Sequence[Sequence[str]] | None, feedback_slice: Any = None) -> list[float]:
    """Return each code's self-tests reward: levels 1-2 + its support in its group's execution matrix (module
    docstring: which tests make the pool)."""
    programs = coder_programs(items, codes)
    jobs, plans = [], []
    for run in groups(items):
        problem, plan = items[run.start], _SelfTestsPlan(run)
        shown_later = () if feedback_slice is None else visible_asserts(problem, feedback_slice)
        plan.held_out = pool_of(problem.entry_point, held_out_asserts(problem, shown_later))
        shown = set().union(*(calls_of(problem.entry_point, t) for t in example_asserts(problem)))
        generated = pool_of(problem.entry_point, [t for k in run for t in (group_tests[k] if group_tests else ())])
        plan.generated = [t for t in generated if t not in plan.held_out
                          and not shown_calls_only(problem.entry_point, t, shown)]
        plan.runnable = [programs[k] is not None for k in run]
        plan.rows = [k for k in run if programs[k] is not None] if plan.pool else []
        if plan.rows and plan.generated:
            plan.stubs, plan.mutants = stub_programs(problem.entry_point), mutants_of(problem)
            reference = reference_build(problem)
            plan.typed = typed_junk(problem, None if reference is None else reference[1], shown)
        suite = judged_suite(problem.entry_point, plan.pool)
        jobs += [(program, suite) for program in
                 [programs[k] for k in plan.rows] + plan.stubs + plan.mutants + plan.typed]
        plans.append(plan)
    reports = iter(run_judged(default_sandbox(), jobs) if jobs else [])
    totals = [0.0] * len(codes)
    for plan in plans:
        matrix_rows = {k: pass_row(next(reports)) for k in plan.rows}
        stub_rows = [pass_row(next(reports)) for _ in plan.stubs]
        mutant_rows = [caught_row(next(reports)) for _ in plan.mutants]
        typed_rows = [pass_row(next(reports)) for _ in plan.typed]
        kept = plan.kept_columns(stub_rows, mutant_rows, typed_rows)
        width = len(plan.pool)
        matrix = [[row[j] for j in kept] for row in (matrix_rows.get(k, [0] * width) for k in plan.run)]
        levels = [levels_of(hidden[k]) for k in plan.run]
        for k, total in zip(plan.run, self_tests_rewards(levels, matrix, plan.runnable, len(plan.held_out))):
            totals[k] = total
    return totals


def pool_of(entry_point: str, tests: Sequence[str]) -> list[str]:
    """Return the distinct judged forms of `tests` (`rewards.judged_tests`), in order."""
    pool: list[str] = []
    judged_pool(entry_point, tests, pool)
    return pool


@dataclass
class _SelfTestsPlan:
    """One group's self-tests runs: its held-out tests, then the generated ones, on its runnable codes, and the
    generated ones on the junk stubs and the reference's wrong mutants too."""

    run: range
    held_out: list[str] = field(default_factory=list)
    generated: list[str] = field(default_factory=list)
    runnable: list[bool] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)
    stubs: list[str] = field(default_factory=list)
    mutants: list[str] = field(default_factory=list)
    typed: list[str] = field(default_factory=list)   # the memoriser of the examples (`typed_junk`), if any

    @property
    def pool(self) -> list[str]:
        return self.held_out + self.generated

    def kept_columns(self, stub_rows: Sequence[Sequence[int]], mutant_rows: Sequence[Sequence[int]],
                     typed_rows: Sequence[Sequence[int]] = ()) -> list[int]:
        """Return the pool's columns that count: every held-out test; a generated test unless both junk stubs pass
        it (it holds whatever a code returns), the memoriser passes it (a code that answers the prompt's examples
        right and everything else with wrong values of the right type: a test of the examples joined to a type
        check or a tautology) or, where the problem has wrong mutants, it rejects none of them on their values (a
        guarded tautology: it separates no plausible wrong code from a right one)."""
        n = len(self.held_out)
        return list(range(n)) + [j for j in range(n, len(self.pool))
                                 if not vacuous(j, stub_rows, typed_rows)
                                 and (not mutant_rows or any(row[j] for row in mutant_rows))]
