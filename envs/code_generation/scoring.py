"""The code reward as the trainers' Scores: each (aux code, main code) pair scored by `rewards.code_rewards` in one
sandbox batch, with its levels and cooperation statistics as metrics. The decentralized and centralized code tasks
(`envs.code_generation.task`) and the single-function rewards (`envs.code_generation.self_tests`) build on it.
"""

from __future__ import annotations

from typing import Any, Sequence

from cooprl.task import Score
from rewards.code_rewards import code_rewards_batch
from rewards.problem import Problem


def breakdown_metrics(b: Any, single_agent: bool) -> dict[str, float]:
    """Return the reward's levels and cooperation statistics as numbers for the logs."""
    level1 = 0.6 * b.main_defined + (0.0 if single_agent else 0.4 * b.aux_defined)
    level2 = 0.5 * b.syntax_ok
    pass_rate = b.tests_passed / b.tests_total if b.tests_total else 0.0
    metrics = {"level1_definitions": level1, "level2_syntax": level2, "level3_tests": pass_rate if b.syntax_ok else 0.0,
               "pass_rate": pass_rate, "syntax_ok": float(b.syntax_ok), "main_defined": float(b.main_defined),
               "timeouts": float(b.timeouts)}
    if not single_agent:
        metrics.update(aux_defined=float(b.aux_defined), uses_aux=float(b.uses_aux), calls_aux=float(b.calls_aux),
                       thin_wrapper=float(b.uses_aux and not b.not_wrapper),
                       ignored_aux_return=float(b.ignored_aux_return),
                       # rounded: the difference of the float levels is otherwise a -1e-17 that logs as -0.000
                       cooperation_bonus=round(b.total - level1 - level2 - metrics["level3_tests"], 6) + 0.0)
    return metrics


def score_code_pairs(items: Sequence[Problem], codes: Sequence[tuple[str, str]], single_agent: bool,
                     cooperation: str = "seed") -> list[Score]:
    """Return the Score of each (aux code, main code) pair for its problem, all scored in one sandbox batch.

    `details` is (aux code, main code, reward breakdown): what the transitions need for feedback. `cooperation`
    is `code_reward.cooperation` (seed or verified).
    """
    breakdowns = code_rewards_batch(items, [aux for aux, _ in codes], [main for _, main in codes],
                                    single_agent=single_agent, cooperation=cooperation)
    return [Score(b.total, breakdown_metrics(b, single_agent), b.tests_total > 0 and b.tests_passed == b.tests_total,
                  details=(aux, main, b)) for (aux, main), b in zip(codes, breakdowns)]
