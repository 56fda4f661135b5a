"""envs.code_generation.scoring: the code reward's breakdown as the metrics of a Score."""

from __future__ import annotations

import sys

import pytest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from rewards.code_rewards import RewardBreakdown  # noqa: E402


def test_the_cooperation_bonus_metric_has_no_float_residue():
    # 1 of 7 tests passed, no bonus: the total (rounded to 6 digits) minus the float levels was -1.4e-07 (-0.000)
    from envs.code_generation.scoring import breakdown_metrics
    b = RewardBreakdown(total=round(1.5 + 1 / 7, 6), aux_defined=True, main_defined=True, syntax_ok=True,
                        tests_passed=1, tests_total=7)
    bonus = breakdown_metrics(b, single_agent=False)["cooperation_bonus"]
    assert bonus == 0.0 and str(bonus) == "0.0"
    b = RewardBreakdown(total=round(1.5 + 1 / 7 + 1.5, 6), aux_defined=True, main_defined=True, syntax_ok=True,
                        tests_passed=1, tests_total=7, uses_aux=True, calls_aux=True, not_wrapper=True)
    assert breakdown_metrics(b, single_agent=False)["cooperation_bonus"] == 1.5


@pytest.mark.sandbox
def test_feedback_is_scored_pooled_without_probes():
    # issue 42: feedback re-scoring in verified mode ran probe programs one pair at a time on the trainer's thread,
    # outside the task's guard, and told every honest pair that main "does not call aux" (a one-assert slice cannot
    # pass the constant probe). It is scored with the turn's batch now, in seed mode (no probes)
    from envs.code_generation.scoring import score_code_pairs
    from envs.code_generation.task import with_feedback_scores
    from rewards.problem import Problem
    from tests.rewards.test_coop_verified import HONEST_MAIN, PROBLEM, SPLIT_AUX
    problem = Problem.coerce({**PROBLEM, "task_id": "shout"})
    codes = [(SPLIT_AUX, HONEST_MAIN), ("def aux(text):\n    return text\n", "def shout_words(text):\n    return 1\n")]
    scores = score_code_pairs([problem, problem], codes, single_agent=False, cooperation="verified")
    assert [s.total for s in scores] == [4.0, 1.5]
    out = with_feedback_scores([problem, problem], codes, scores, 1, single=False)
    assert [s.total for s in out] == [4.0, 1.5] and [len(s.details) for s in out] == [4, 4]
    honest, wrong = out[0].details[3], out[1].details[3]
    assert (honest.tests_total, honest.tests_passed, honest.cooperation, honest.uses_aux) == (1, 1, "seed", True)
    assert (wrong.tests_total, wrong.tests_passed) == (1, 0)
    # a slice that keeps every assert adds nothing: the feedback reads the score's own breakdown
    assert [len(s.details) for s in with_feedback_scores([problem], codes[:1], scores[:1], 8, single=False)] == [3]
