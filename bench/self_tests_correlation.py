"""How well the self-tests reward ranks codes like the hidden-test reward does.

For N problems of the coop set and of HumanEval, the embedded SmolLM2 samples G codes per problem (the single-agent
code prompt) and, for the second pool, K tester completions (coder_tester's tester prompt). Each code gets:
- hidden: the single-agent code reward on the problem's hidden tests (max 2.1);
- self (examples): `code_reward.type: self_tests` as training computes it with no tester: since issue 34 its pool
  is the problem's held-out asserts (the check's asserts the prompt does not show), never the examples, so this
  correlation holds part of the hidden tests by construction;
- self (examples + sampled tests): the pool adds the policy's sampled asserts kept by CoSPlay's self-consistency
  filter (for one call, the expected value at least `MIN_AGREE` of the K completions agree on, the majority's).
Spearman's rank correlation (ties: average ranks) between self and hidden, per problem (over its G codes; `nan` when
either side is constant) and overall (over all N x G codes of the dataset).
With `--with-reference` each problem's group also holds its reference solution (HumanEval's canonical solution, the
coop set's reference aux + main): a 135M model's codes rarely pass a hidden test, so without a correct code in the
group the hidden reward barely varies beyond the syntax levels, and the correlation says little about the tests.

    python bench/self_tests_correlation.py [--problems 10] [--samples 8] [--testers 4] [--with-reference] [--threads 2]
"""

from __future__ import annotations

import argparse
import ast
import math
import sys
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MIN_AGREE = 2


def ranks(values: list[float]) -> list[float]:
    """Return the average ranks of `values` (ties share the mean of their positions)."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2
        i = j + 1
    return out


def spearman(x: list[float], y: list[float]) -> float:
    """Return Spearman's rho of x and y (the Pearson correlation of their average ranks); nan if one is constant."""
    rx, ry = ranks(x), ranks(y)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    sx = math.sqrt(sum((a - mx) ** 2 for a in rx))
    sy = math.sqrt(sum((b - my) ** 2 for b in ry))
    if not sx or not sy:
        return float("nan")
    return sum((a - mx) * (b - my) for a, b in zip(rx, ry)) / (sx * sy)


def consistent_tests(entry_point: str, asserts: list[str]) -> list[str]:
    """Return CoSPlay's self-consistent tests: per call `f(...)`, the expected value most of the asserts give, kept
    when at least MIN_AGREE agree."""
    by_call: dict[str, Counter] = defaultdict(Counter)
    for test in asserts:
        try:
            node = ast.parse(test).body[0]
        except (SyntaxError, ValueError, IndexError):
            continue
        cmp = node.test if isinstance(node, ast.Assert) else None
        if not (isinstance(cmp, ast.Compare) and len(cmp.ops) == 1 and isinstance(cmp.ops[0], ast.Eq)):
            continue
        by_call[ast.unparse(cmp.left)][ast.unparse(cmp.comparators[0])] += 1
    kept = []
    for call, values in by_call.items():
        value, count = values.most_common(1)[0]
        if count >= MIN_AGREE and call.startswith(f"{entry_point}("):
            kept.append(f"assert {call} == {value}")
    return kept


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=10)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--testers", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--with-reference", action="store_true", help="add each problem's reference solution")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    args = parser.parse_args()

    import torch
    from _common import embedded_generator   # bench/ is the script's folder
    from cooprl.rollout.generation import SamplingParams
    from envs.code_generation.data import load_problems
    from envs.code_generation.prompts import completion_to_code, single_prompt, stop_strings
    from envs.code_generation.self_tests import score_functions
    from envs.coder_tester.task import TESTER_STOPS, tester_prompt, tester_tests
    from rewards.self_tests import reference_code

    generator = embedded_generator(args.threads)
    code_params = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=0.8, top_p=0.95,
                                 stop_strings=tuple(stop_strings("single")))
    test_params = SamplingParams(max_new_tokens=96, temperature=0.8, top_p=0.95, stop_strings=TESTER_STOPS)
    datasets = {"coop": load_problems({"name": "coop", "type": "coophumaneval"}, f"test[:{args.problems}]"),
                "humaneval": load_problems({"type": "humaneval"}, f"test[:{args.problems}]")}
    for name, problems in datasets.items():
        with torch.no_grad():
            codes = generator.sample([single_prompt(p) for p in problems], args.samples, code_params)
            testers = generator.sample([tester_prompt(p, 4) for p in problems], args.testers, test_params)
        overall = {"examples": ([], []), "sampled": ([], [])}
        per_problem: dict[str, list[float]] = {"examples": [], "sampled": []}
        print(f"\n{name}: {len(problems)} problems x {args.samples} codes"
              f"{' + the reference' if args.with_reference else ''}, {args.testers} tester samples each")
        print(f"{'problem':<16} {'hidden mean':>11} {'rho examples':>13} {'rho +sampled':>13} {'tests kept':>10}")
        for problem, samples, tests in zip(problems, codes, testers):
            programs = [completion_to_code("single", problem, c.text) for c in samples]
            if args.with_reference and reference_code(problem):
                programs.append(reference_code(problem))
            asserts = [t for c in tests for t in tester_tests(problem, c.text, 8)]
            kept = consistent_tests(problem.entry_point, asserts)
            items = [problem] * len(programs)
            hidden = [s.total for s in score_functions(items, programs, "hidden_tests")]
            own = [s.total for s in score_functions(items, programs, "self_tests")]
            more = [s.total for s in score_functions(items, programs, "self_tests", group_tests=[kept] * len(items))]
            for key, values in (("examples", own), ("sampled", more)):
                overall[key][0].extend(values)
                overall[key][1].extend(hidden)
                per_problem[key].append(spearman(values, hidden))
            print(f"{problem.task_id:<16} {sum(hidden) / len(hidden):>11.3f} {spearman(own, hidden):>13.3f} "
                  f"{spearman(more, hidden):>13.3f} {len(kept):>10}")
        for key, (values, hidden) in overall.items():
            defined = [r for r in per_problem[key] if not math.isnan(r)]
            mean = sum(defined) / len(defined) if defined else float("nan")
            print(f"{name} overall ({key}): rho {spearman(values, hidden):.3f} over {len(values)} codes; "
                  f"mean per-problem rho {mean:.3f} over {len(defined)} problems where it is defined")
    return 0


if __name__ == "__main__":
    sys.exit(main())
