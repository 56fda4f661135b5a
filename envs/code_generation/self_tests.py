"""Scoring one function per joint action by hidden tests or by self tests (`code_reward.type`), for the code
environments whose team writes one function (a single agent, planner_coder's coder, coder_tester's coder).

`self_tests` needs a node's whole group: the rollout hands a node's joint actions to `Task.score` in a row with the
same item object (cooprl/task.py), so `groups` cuts the batch where the item object changes. A group's pool is the
judged form (`rewards.judged_tests`) of the problem's examples (`example_asserts`) and of the generated tests given
for the group (a tester's), less the tests that junk passes (`rewards.judged_tests.stub_programs`); each code runs
as the program the hidden-test reward would run (`coder_programs`), its execution matrix in one sandbox batch with
every other group's, and each code's reward is `rewards.self_tests`'s.
The hidden-test reward is still computed when the problem has tests, for the logs only (`hidden_reward`,
`success`): in self_tests mode no hidden verdict reaches the reward.
"""

from __future__ import annotations

from dataclasses import replace
from types import CodeType
from typing import Sequence

from cooprl.task import Score, node_groups as groups   # one node's joint actions
from envs.code_generation.prompts import code_prefix, completion_to_code
from envs.code_generation.task import score_code_pairs
from rewards.code_rewards import scored_program
from rewards.judged_tests import judged_suite, stub_programs
from rewards.problem import Problem
from rewards.sandbox import default_sandbox
from rewards.self_tests import (example_asserts, judged_pool, levels_reward, pass_row, run_judged,
                                self_tests_rewards)

REWARD_TYPES = ("hidden_tests", "self_tests")


def coder_programs(items: Sequence[Problem], codes: Sequence[str]) -> list[str | CodeType | None]:
    """Return the program the hidden-test reward runs for each single-agent code (cleaned; None when its scoring
    stops before the tests): what every other judge of the code runs too."""
    return [scored_program(problem, "", code, single_agent=True) for problem, code in zip(items, codes)]


def reference_program(problem: Problem) -> str | CodeType | None:
    """Return the problem's reference solution built as a coder's code is (the coder's prefix + the canonical body,
    or the cooperative set's reference aux + main as a pair, then cleaned), or None when the record has none."""
    extra = problem.extra
    if extra.get("canonical_solution"):
        body = extra["canonical_solution"]
        if not code_prefix("single", problem).endswith("\n"):   # an open-body prompt ends with the indentation
            body = body.lstrip(" \t")
        return scored_program(problem, "", completion_to_code("single", problem, body), single_agent=True)
    if extra.get("reference_main"):
        return scored_program(problem, extra.get("reference_aux", ""), extra["reference_main"], single_agent=False)
    return None


def score_functions(items: Sequence[Problem], codes: Sequence[str], reward_type: str,
                    group_tests: Sequence[Sequence[str]] | None = None) -> list[Score]:
    """Return each code's Score (single-agent reward, max 2.1): by the hidden tests, or by self tests, where
    `group_tests[k]` are extra generated tests of entry k's group (entries of one group give the union)."""
    if reward_type not in REWARD_TYPES:
        raise ValueError(f"code_reward.type {reward_type!r}: expected one of {', '.join(REWARD_TYPES)}")
    hidden = score_code_pairs(items, [("", code) for code in codes], single_agent=True)
    if reward_type == "hidden_tests":
        return hidden
    totals = self_test_totals(items, codes, hidden, group_tests)
    return [replace(score, total=total, metrics={**score.metrics, "hidden_reward": score.total,
                                                   "self_support": round(total - levels_of(score), 6)})
            for score, total in zip(hidden, totals)]


def levels_of(score: Score) -> float:
    """Return the levels-1-2 part of a single-agent code Score (its details hold the breakdown)."""
    b = score.details[2]
    return levels_reward(b.main_defined, b.syntax_ok)


def self_test_totals(items: Sequence[Problem], codes: Sequence[str], hidden: Sequence[Score],
                     group_tests: Sequence[Sequence[str]] | None) -> list[float]:
    """Return each code's self-tests reward: levels 1-2 + its support in its group's execution matrix, whose tests
    are the group's judged tests less the vacuous ones (both junk stubs pass them: `f(x) == f(x)` would lend
    every code that runs the same support)."""
    programs = coder_programs(items, codes)
    jobs, plans = [], []
    for run in groups(items):
        problem = items[run.start]
        pool: list[str] = []
        judged_pool(problem.entry_point, example_asserts(problem), pool)
        for k in run:
            judged_pool(problem.entry_point, group_tests[k] if group_tests else (), pool)
        runnable = [programs[k] is not None for k in run]
        rows = [k for k in run if programs[k] is not None] if pool else []
        stubs = stub_programs(problem.entry_point) if rows else []
        suite = judged_suite(problem.entry_point, pool)
        jobs += [(program, suite) for program in [programs[k] for k in rows] + stubs]
        plans.append((run, runnable, rows, len(stubs), len(pool)))
    reports = iter(run_judged(default_sandbox(), jobs) if jobs else [])
    totals = [0.0] * len(codes)
    for run, runnable, rows, n_stubs, width in plans:
        matrix_rows = {k: pass_row(next(reports)) for k in rows}
        stub_rows = [pass_row(next(reports)) for _ in range(n_stubs)]
        kept = [j for j in range(width) if not (stub_rows and all(row[j] for row in stub_rows))]
        matrix = [[row[j] for j in kept] for row in (matrix_rows.get(k, [0] * width) for k in run)]
        levels = [levels_of(hidden[k]) for k in run]
        for k, total in zip(run, self_tests_rewards(levels, matrix, runnable)):
            totals[k] = total
    return totals
