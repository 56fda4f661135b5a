"""The verdict of `make demo-coop`: did the team learn to cooperate? Reads the SFT run and the MAGRPO run started from
it and prints, on the held-out problems (the eval split), how often main calls aux, the gated uses_aux, the
cooperation bonus and the eval reward after SFT alone (MAGRPO's evaluation before its first step) and after RL.

    python bench/demo_coop.py runs/demo-coop-magrpo-cpu

Exit status 1 when a claim of the demo does not hold (main calls aux in most samples, uses_aux and the bonus above
zero, the eval reward after RL above the one after SFT), so `make demo-coop` fails loudly instead of looking fine;
2 after one `error:` line when the folder is not a run started from an SFT run (`agent_model.init_from`).
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


class NotADemoRun(ValueError):
    """The folder is not an RL run started from an SFT run (what `make demo-coop` writes); the message says why."""


USAGE = ("usage: python bench/demo_coop.py RL_RUN_DIR\n  RL_RUN_DIR: a run started from an SFT run with "
         "--override agent_model.init_from=SFT_RUN_DIR (make demo-coop writes runs/demo-coop-magrpo-cpu)")


def start_run(rl_dir: Path) -> Path:
    """Return the run folder the run in `rl_dir` started from (its config's agent_model.init_from); NotADemoRun when
    the folder is no run, or a run that did not start from another one."""
    import yaml
    if not (rl_dir / "config.yaml").is_file() or not (rl_dir / "metrics.jsonl").is_file():
        raise NotADemoRun(f"{rl_dir}: not a run folder (it needs config.yaml and metrics.jsonl)")
    config = yaml.safe_load((rl_dir / "config.yaml").read_text(encoding="utf-8")) or {}
    init_from = (config.get("agent_model") or {}).get("init_from")
    if not init_from:
        raise NotADemoRun(f"{rl_dir}: made without agent_model.init_from; this verdict compares an RL run with the "
                          f"SFT run it started from (train it with --override agent_model.init_from=SFT_RUN_DIR, "
                          f"as make demo-coop does)")
    return Path(init_from)


def verdict(rl_dir: Path) -> tuple[str, bool]:
    """Return the verdict's text and whether every claim holds, from the MAGRPO run in `rl_dir`; NotADemoRun when
    `rl_dir` is not a run started from an SFT run."""
    sft_dir = start_run(rl_dir)
    evals = evaluations(rl_dir)
    if evals and evals[0]["step"] != 0:   # it skipped evaluating its start policy: the SFT run's last evaluation
        evals = evaluations(sft_dir)[-1:] + evals
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


def main(argv: list[str]) -> int:
    """Print the verdict of the run `argv` names; return 0 when every claim holds, 1 when one does not, 2 (after one
    `error:` line and the usage) when the argument is no RL run started from an SFT run."""
    if argv[:1] in (["-h"], ["--help"]):
        print(USAGE)
        return 0
    if len(argv) != 1:
        print(USAGE, file=sys.stderr)
        return 2
    try:
        text, held = verdict(Path(argv[0]))
    except NotADemoRun as err:
        print(f"error: {err}\n{USAGE}", file=sys.stderr)
        return 2
    print(text)
    return 0 if held else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
