"""How often does the untrained embedded model write a function body for the single-agent code prompt? GRPO, AC
and the coder of coder+tester learn nothing when no sample of a group defines the function (every reward ties at 0).

The embedded SmolLM2 samples 4 completions for each of 16 coop training problems under three endings of the
single-agent prompt, and we count the rebuilt programs that define the entry point with a return (`main_defined`)
and that parse:
- `current`: the prompt ends with the problem's code (signature and docstring), as in training;
- `indent`: the same plus the body's four-space indentation;
- `fence`: the instructions, then a ```python fence before the problem's code.

    python bench/function_rate.py        (about 2 minutes per variant on one core)
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def main() -> int:
    import torch
    from _common import embedded_generator   # bench/ is the script's folder
    from cooprl.rollout.generation import SamplingParams
    from envs.code_generation.data import load_problems
    from envs.code_generation.prompts import completion_to_code, problem_code, single_prompt, stop_strings
    from rewards.code_rewards import code_reward

    generator = embedded_generator(threads=1)
    problems = load_problems({"name": "coop", "type": "coophumaneval"}, "train[16:32]")

    def instructions(problem) -> str:
        return single_prompt(problem)[:-len(problem_code(problem))]

    variants = {   # name -> (prompts, the text the completion continues: added back before rebuilding the code)
        "current": ([single_prompt(p) for p in problems], ""),
        "indent": ([single_prompt(p) + "    " for p in problems], "    "),
        "fence": ([instructions(p) + "```python\n" + problem_code(p) for p in problems], ""),
    }
    params = SamplingParams(max_new_tokens=80, temperature=0.8, top_p=0.95, stop_strings=tuple(stop_strings("single")))
    print(f"{len(problems)} coop training problems x 4 samples per prompt ending (SmolLM2-135M, temperature 0.8)")
    for name, (prompts, lead) in variants.items():
        start = time.time()
        with torch.no_grad():
            samples = generator.sample(prompts, 4, params)
        defined = parses = 0
        for problem, group in zip(problems, samples):
            for completion in group:
                b = code_reward(problem, "", completion_to_code("single", problem, lead + completion.text),
                                single_agent=True)
                defined, parses = defined + b.main_defined, parses + b.syntax_ok
        total = 4 * len(problems)
        print(
            f"{name:<8} defines the function {defined}/{total}, parses {parses}/{total} ({time.time() - start:.0f} s)",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
