"""Test-time strategies: `solve(problem, llm, sandbox, budget) -> Solution` (see strategies/base.py).

STRATEGIES maps each name to (module, config class); a module has `solve`, and may have `gt_metrics`
(metrics that need the ground truth, computed after `solve`) and `summarize` (a run's aggregate metrics).
The config classes and the `Budget` are typed `option()` fields, checked and documented like every config key
(`CONFIG_SECTIONS`, listed in docs/config.md).
"""

from strategies import codet, collabcoder, cosplay, direct
from strategies.base import Budget

STRATEGIES = {
    "direct": (direct, direct.DirectConfig),
    "codet": (codet, codet.CodeTConfig),
    "collabcoder": (collabcoder, collabcoder.CollabCoderConfig),
    "cosplay": (cosplay, cosplay.CoSPlayConfig),
}

# evaluate_strategy.py's own config sections (`--override budget.max_calls=50`, `--override codet.num_codes=8`)
CONFIG_SECTIONS: dict[str, type] = {"budget": Budget, **{name: config for name, (_, config) in STRATEGIES.items()}}
