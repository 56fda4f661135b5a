"""Test-time strategies: `solve(problem, llm, sandbox, budget) -> Solution` (see strategies/base.py).

STRATEGIES maps each name to (module, config class); a module has `solve`, and may have `gt_metrics`
(metrics that need the ground truth, computed after `solve`) and `summarize` (a run's aggregate metrics).
"""

from strategies import codet, collabcoder, cosplay, direct

STRATEGIES = {
    "direct": (direct, direct.DirectConfig),
    "codet": (codet, codet.CodeTConfig),
    "collabcoder": (collabcoder, collabcoder.CollabCoderConfig),
    "cosplay": (cosplay, cosplay.CoSPlayConfig),
}
