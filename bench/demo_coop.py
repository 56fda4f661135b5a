"""The verdict of `make demo-coop`: did the team learn to cooperate? Reads the SFT run and the MAGRPO run started from
it and prints, on the held-out problems (the eval split), how often main calls aux, the gated uses_aux, the
cooperation bonus and the eval reward after SFT alone (MAGRPO's evaluation before its first step) and after RL.

    python bench/demo_coop.py runs/demo-coop-magrpo-cpu

Exit status 1 when a claim of the demo does not hold (main calls aux in most samples, uses_aux and the bonus above
zero, the eval reward after RL above the one after SFT), so `make demo-coop` fails loudly instead of looking fine.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

KEYS = ("reward_mean", "calls_aux", "uses_aux", "cooperation_bonus", "pass_rate")


def evaluations(run_dir: Path) -> list[dict]:
    """Return the evaluation events of the run in `run_dir`, in step order."""
    lines = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [e for e in map(json.loads, lines) if "eval/turn_1/reward_mean" in e]


def start_run(rl_dir: Path) -> Path:
    """Return the run folder the run in `rl_dir` started from (its config's agent_model.init_from)."""
    import yaml
    config = yaml.safe_load((rl_dir / "config.yaml").read_text(encoding="utf-8"))
    return Path(config["agent_model"]["init_from"])


def verdict(rl_dir: Path) -> tuple[str, bool]:
    """Return the verdict's text and whether every claim holds, from the MAGRPO run in `rl_dir`."""
    evals = evaluations(rl_dir)
    if evals and evals[0]["step"] != 0:   # it skipped evaluating its start policy: the SFT run's last evaluation
        evals = evaluations(start_run(rl_dir))[-1:] + evals
    if len(evals) < 2:
        return f"{rl_dir}: needs the evaluation of its start policy (or its SFT run's last) and its last", False
    start, end = evals[0], evals[-1]
    lines = [f"held-out problems, {rl_dir.name}: after SFT -> after MAGRPO (step {end['step']})"]
    lines += [f"  {key:18s} {start[f'eval/turn_1/{key}']:.3f} -> {end[f'eval/turn_1/{key}']:.3f}" for key in KEYS]
    claims = {"main calls aux in most samples": end["eval/turn_1/calls_aux"] > 0.5,
              "uses_aux above zero": end["eval/turn_1/uses_aux"] > 0,
              "cooperation bonus above zero": end["eval/turn_1/cooperation_bonus"] > 0,
              "eval reward after RL above after SFT": end["eval/turn_1/reward_mean"] > start["eval/turn_1/reward_mean"]}
    lines += [f"  {'yes' if held else 'NO '}  {claim}" for claim, held in claims.items()]
    return "\n".join(lines), all(claims.values())


if __name__ == "__main__":
    text, held = verdict(Path(sys.argv[1]))
    print(text)
    sys.exit(0 if held else 1)
