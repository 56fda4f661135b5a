"""How often does the untrained main agent call `aux` at all? A policy gradient can only raise what the policy
samples, so this rate, measured before any training, bounds what the cooperation bonus can teach in a short run.

The embedded SmolLM2 samples G main completions per problem of the coop set's training split under each prompt
variant, and we count the completions whose rebuilt main function calls `aux(...)` (the reward's own check,
`rewards.cooperation.calls_aux`):
- `upstream`: main's prompt as in training (aux exists and should be called; main does not see it);
- `sees_aux`: the same, preceded by one aux sample of the aux agent (`aux_main.main_sees_aux: true`);
- `example`: the same, preceded by a worked example of a function that calls a helper (a one-shot prompt);
- `hot`: `upstream` at temperature 1.2 instead of 0.8 (more exploration);
- `open_body`: `upstream` ending inside main's body (`code_prompt.open_body: true`);
- `open_sees_aux`: `sees_aux` ending inside main's body.

    python bench/aux_calls.py [--problems 16] [--samples 8] [--threads 1] [--variants upstream,open_body]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

EXAMPLE = ("Example. The helper `aux` is already defined, and the main function calls it:\n\n"
           "def aux(numbers):\n    return [n for n in numbers if n > 0]\n\n"
           "def sum_positive(numbers):\n    positives = aux(numbers)\n    return sum(positives)\n\n"
           "Now your task.\n")


VARIANTS = ("upstream", "sees_aux", "example", "hot", "open_body", "open_sees_aux")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=16)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=80)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    args = parser.parse_args()
    chosen = args.variants.split(",")
    unknown = [v for v in chosen if v not in VARIANTS]
    if unknown:   # before the model loads
        parser.error(f"--variants: unknown {unknown}; choose from {', '.join(VARIANTS)}")

    import torch
    from _common import embedded_generator   # bench/ is the script's folder
    from cooprl.rollout.generation import SamplingParams
    from envs.code_generation.data import load_problems
    from envs.code_generation.prompts import (aux_prompt, completion_to_code, main_prompt, open_body, stop_strings,
                                              with_aux_code)
    from rewards.cooperation import calls_aux

    generator = embedded_generator(args.threads)
    problems = load_problems({"name": "coop", "type": "coophumaneval"}, f"train[16:{16 + args.problems}]")

    def params(temperature: float, role: str) -> SamplingParams:
        return SamplingParams(max_new_tokens=args.max_new_tokens, temperature=temperature, top_p=0.95,
                              stop_strings=tuple(stop_strings(role)))

    with torch.no_grad():
        auxes = generator.sample([aux_prompt(p) for p in problems], 1, params(0.8, "aux"))
    aux_codes = [completion_to_code("aux", p, a[0].text) for p, a in zip(problems, auxes)]
    opened = [open_body(p) for p in problems]
    variants = {   # name -> (the problems as the prompts show them, the prompts, the temperature)
        "upstream": (problems, [main_prompt(p) for p in problems], 0.8),
        "sees_aux": (problems, [with_aux_code(main_prompt(p), code) for p, code in zip(problems, aux_codes)], 0.8),
        "example": (problems, [EXAMPLE + main_prompt(p) for p in problems], 0.8),
        "hot": (problems, [main_prompt(p) for p in problems], 1.2),
        "open_body": (opened, [main_prompt(p) for p in opened], 0.8),
        "open_sees_aux": (opened, [with_aux_code(main_prompt(p), code) for p, code in zip(opened, aux_codes)], 0.8),
    }
    print(f"{args.problems} coop training problems x {args.samples} main samples per prompt variant (SmolLM2-135M)")
    print(f"{'variant':<10} {'calls aux':>10} {'problems with a call':>21} {'seconds':>8}")
    for name in chosen:
        shown, prompts, temperature = variants[name]
        start = time.time()
        with torch.no_grad():
            samples = generator.sample(prompts, args.samples, params(temperature, "main"))
        calls = [[calls_aux(completion_to_code("main", p, c.text), p.entry_point) for c in group]
                 for p, group in zip(shown, samples)]
        total = sum(map(sum, calls))
        print(f"{name:<10} {total:>4}/{args.problems * args.samples:<5} "
              f"{sum(any(c) for c in calls):>14}/{args.problems:<6}"
              f" {time.time() - start:>8.0f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
