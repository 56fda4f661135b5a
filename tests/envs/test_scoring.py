"""envs.code_generation.scoring: the code reward's breakdown as the metrics of a Score."""

from __future__ import annotations

import sys
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
