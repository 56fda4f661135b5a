"""Run a test-time strategy on the eval split and score it on the hidden tests.

  python evaluate_strategy.py --strategy direct|codet|collabcoder|cosplay [--config CONFIG] [--checkpoint RUN]
                              [--endpoint URL [--endpoint-model NAME] [--endpoint-api completions|chat]]
                              [--override KEY=VALUE ...]

The config is a trainer config of a code environment (default: configs/magrpo_che_config.yaml; agent_model,
dataset, output, seed and reward are read; `--override` works as in train_*.py), read as training reads it
(`cooprl.cli.read_config`, the environment its sections name, whose setup starts the reward's executor).
Overrides of `budget.*` and of the strategy's own section (`codet.num_codes=8`, `cosplay.num_tests=4`, ...) set
the Budget and the strategy's config, typed keys checked like every config key (docs/config.md lists them).
With `--checkpoint` (a run folder, its checkpoints folder or one checkpoint) the trained agents are the LLM:
one agent, or a two-agent team (aux + main) as the coder, prompted as their run trained them (its config.yaml's
code_prompt.open_body and aux_main.main_sees_aux, unless overridden). With `--endpoint URL` an OpenAI-compatible
server is the LLM (`vllm serve`, `transformers serve`, llama.cpp, a hosted API; `--endpoint-api chat` for
chat-only APIs).

Writes `<output.base_dir>/strategy-<strategy>-<dataset>/strategy_results.jsonl` (or the folder an
`--override output.run_name=NAME` names; a config file's run_name names its training run and is not used), one line
per problem, with the settings in `strategy_config_<strategy>.json`; a second run with the same folder skips the
problems already there (resume), only under the same settings (else it stops and names the keys that differ).
A training run's own folder is refused unless --checkpoint is from that run. Prints a summary table whose last line
is `pass@1: X`, and draws strategy_results.png. Bad input prints one `error: ...` line and exits 2; Ctrl-C one line
and 130 (the finished problems stay: rerun to resume).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from cooprl.cli import add_override_option, print_interrupted, print_user_error, read_config
from cooprl.config import (TRAINER_SECTIONS, Config, ConfigError, agent_names, apply_overrides, build_section,
                           check_override_sections)
from cooprl.console import add_threads_option, chosen_threads, setup_logging, use_torch_threads
from cooprl.errors import UserError
from cooprl.run_folders import RUN_CONFIG, create_folder
from cooprl.stopping import TerminateAsInterrupt, signal_of
from envs import environment_for, task_config_of
from envs.code_generation.config import CodeTaskConfig
from strategies import STRATEGIES
from strategies.base import Budget
from strategies.llm import OpenAILLM

OPENAI_APIS = OpenAILLM.APIS

RESULTS = "strategy_results.jsonl"
DEFAULT_CONFIG = "configs/magrpo_che_config.yaml"


def read_strategy_config(config_path: str, overrides: list[str]) -> Config:
    """Return the config of a strategy run, read and set up as training does it (the file read once through the
    hardened reader, the environment its sections name, that environment's setup: the reward's executor);
    ConfigError for an environment without the code task's problems (a strategy writes code)."""
    config = read_config(config_path, overrides, task_config_of)
    env = environment_for(config)
    if not issubclass(env.config, CodeTaskConfig):
        raise ConfigError(f"config file {config_path!r} is for the {env.name} environment; a strategy solves the code "
                          "task's problems: give a code environment's config (dataset, external, code_reward)")
    if env.setup is not None:
        env.setup(config)
    return config


def split_overrides(strategy: str, overrides: list[str]) -> tuple[list[str], Budget, Any]:
    """Return (the overrides for cooprl's config, the Budget, the strategy's config); the `budget.` and
    `<strategy>.` keys are checked like every config key (types, unknown keys)."""
    # a section this command does not read (another strategy's, a trainer's) would be ignored without a word
    owners = {**{name: f"train_{name}.py" for name in TRAINER_SECTIONS},
              **{name: f"--strategy {name}" for name in STRATEGIES}}
    check_override_sections(overrides, {strategy}, owners, f"evaluate_strategy.py --strategy {strategy}")
    own = [o for o in overrides if o.split("=", 1)[0].split(".")[0] in ("budget", strategy)]
    data = apply_overrides({}, own)
    for name in data:
        if not isinstance(data[name], dict):
            raise ConfigError(f"--override {name}: is a section; set one of its keys, e.g. {name}.KEY=VALUE")
    budget = build_section(Budget, data.get("budget", {}), "budget")
    strategy_config = build_section(STRATEGIES[strategy][1], data.get(strategy, {}), strategy)
    rest = [o for o in overrides if o not in own]
    return rest, budget, strategy_config


def override_keys(overrides: list[str]) -> set[str]:
    """Return the keys `--override KEY=VALUE` strings set."""
    return {o.split("=", 1)[0].strip() for o in overrides}


def results_folder(config: Config, strategy: str, checkpoint: str | None, named: bool) -> Path:
    """Return the folder (created) of a strategy's results: `<output.base_dir>/<output.run_name>` when the command
    line `named` it (a config file's run_name names its training run, not this), else
    `strategy-<strategy>-<dataset>`. ConfigError when that folder is a training run's and `checkpoint` is not
    from it: the run's folder keeps that run's files only."""
    name = config.output.run_name if named and config.output.run_name else \
        f"strategy-{strategy}-{config.task.run_label()}"
    folder = Path(config.output.base_dir) / name
    here = folder.resolve()
    from_run = checkpoint is not None and here in (Path(checkpoint).resolve(), *Path(checkpoint).resolve().parents)
    if (folder / RUN_CONFIG).is_file() and not from_run:
        raise ConfigError(f"output.run_name: {folder} is a training run's folder and --checkpoint is not from it; "
                          "give the strategy's results another output.run_name")
    return create_folder(folder)


def strategy_settings(config: Config, strategy: str, budget: Budget, strategy_config: Any, checkpoint: str | None,
                      endpoint: Endpoint | None) -> dict[str, Any]:
    """Return the settings that make a strategy's results (saved as strategy_config_<strategy>.json): the strategy
    and its section, the budget, the LLM (its model, how prompts reach it, and the weights loaded: the checkpoint
    folder `checkpoint` names and agent_model.init_from's, resolved, so that a run folder's newer checkpoint is
    another setting), the problems and the seed."""
    from cooprl.checkpoint import init_source
    from strategies.llm import checkpoint_folder
    dataset, model = config.task.dataset, config.agent_model
    weights = {"checkpoint": str(checkpoint_folder(checkpoint).resolve()) if checkpoint and not endpoint else None,
               "init_from": str(init_source(model.init_from).resolve()) if model.init_from and not endpoint else None}
    # the agents' models (a strategy samples with the budget's settings, not an `agents:` entry's own)
    agents = agent_names(config) if config.agents is not None else None
    prompting = {"agents": agents, "torch_dtype": model.torch_dtype, "chat_template": model.chat_template,
                 "special_tokens": model.special_tokens, "max_length": model.max_length,
                 "open_body": config.task.code_prompt.open_body, "main_sees_aux": config.task.aux_main.main_sees_aux}
    settings = {"strategy": strategy, "budget": asdict(budget), strategy: asdict(strategy_config),
                "model": model.name, "checkpoint": checkpoint, "weights": weights, "prompting": prompting,
                "endpoint": asdict(endpoint) if endpoint else None,
                "dataset": {"name": dataset.name, "type": dataset.type, "path": dataset.path,
                            "sha256": file_digest(dataset.path) if dataset.path else None},
                "eval_split": dataset.eval_split, "seed": config.seed}
    return json.loads(json.dumps(settings))   # as the file holds them (tuples as lists)


def file_digest(path: str) -> str | None:
    """Return the SHA-256 of the file at `path` (a dataset.path: results of another file's problems are not
    resumed under the same name), None when it cannot be read."""
    digest = hashlib.sha256()
    try:
        with Path(path).expanduser().open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        return None
    return digest.hexdigest()


# the keys that set a trained team's prompts: a checkpoint is given them as its run trained with them
PROMPT_KEYS = ("code_prompt.open_body", "aux_main.main_sees_aux")


def training_prompts(config: Config, checkpoint: str, overridden: set[str]) -> Config:
    """Return `config` with the PROMPT_KEYS of the run `checkpoint` lies in (its config.yaml, up to three folders
    above it; `checkpoint`: --checkpoint, else agent_model.init_from), except those the command line overrides: a
    trained checkpoint answers the prompts it was trained with. Each key taken is said on stderr; a checkpoint
    outside a run keeps `config`'s."""
    from cooprl.config import read_yaml
    folder = Path(checkpoint).resolve()
    run_config = next((p / RUN_CONFIG for p in [folder, *folder.parents][:4] if (p / RUN_CONFIG).is_file()), None)
    if run_config is None:
        return config
    try:
        data = read_yaml(run_config)
    except UserError:
        return config
    task = config.task
    for key in PROMPT_KEYS:
        section, name = key.split(".")
        saved = data.get(section)
        trained = saved.get(name, False) if isinstance(saved, dict) else False   # absent: the key's default
        if key in overridden or not isinstance(trained, bool) or trained == _prompt_key(task, key):
            continue
        task = _with_prompt_key(task, key, trained)
        print(f"note: {key}={str(trained).lower()}, as {run_config} trained with it (--override {key}=... to "
              "change it)", file=sys.stderr)
    return replace(config, task=task)


def _prompt_key(task: CodeTaskConfig, key: str) -> bool:
    return task.code_prompt.open_body if key == "code_prompt.open_body" else task.aux_main.main_sees_aux


def _with_prompt_key(task: CodeTaskConfig, key: str, value: bool) -> CodeTaskConfig:
    if key == "code_prompt.open_body":
        return replace(task, code_prompt=replace(task.code_prompt, open_body=value))
    return replace(task, aux_main=replace(task.aux_main, main_sees_aux=value))


def settings_file(run_dir: Path, strategy: str) -> Path:
    """Return the file that says which settings made `strategy`'s results in `run_dir`."""
    return run_dir / f"strategy_config_{strategy}.json"


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(value, dict):
        return {prefix: value}
    return {k: v for key, item in value.items() for k, v in _flat(item, f"{prefix}{key}.").items()} if value \
        else {prefix: value}


def check_same_settings(run_dir: Path, strategy: str, settings: dict[str, Any]) -> None:
    """Raise ConfigError when `run_dir` holds results of `strategy` made with other settings than `settings` (naming
    the keys that differ), or results whose settings file is missing: they are resumed only under the settings that
    made them. A key the saved file does not hold (written by an older cooprl) is not compared."""
    rows = [r for r in read_done(run_dir / RESULTS) if r.get("strategy") == strategy]
    if not rows:
        return
    how = "resume them with the same settings, or write elsewhere: --override output.run_name=NEW"
    try:
        saved = json.loads(settings_file(run_dir, strategy).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise ConfigError(f"{run_dir / RESULTS} holds {len(rows)} {strategy} result(s), but no readable "
                          f"{settings_file(run_dir, strategy).name} says which settings made them; {how}") from None
    before, now = _flat(saved), _flat(settings)
    differ = [f"{key.rstrip('.')}: {json.dumps(before[key])} there, {json.dumps(now[key])} now"
              for key in now if key in before and before[key] != now[key]]
    if differ:
        raise ConfigError(f"{run_dir} holds {len(rows)} {strategy} result(s) made with other settings "
                          f"({'; '.join(differ[:4])}{'; ...' if len(differ) > 4 else ''}); {how}")


def read_done(path: Path) -> list[dict]:
    """Return the rows already written. A truncated last line (an interrupted run) is cut off the file, so that
    the next row starts on a line of its own."""
    if not path.is_file():
        return []
    text = path.read_text(encoding="utf-8")
    if text and not text.endswith("\n"):
        text = text[:text.rfind("\n") + 1]
        path.write_text(text, encoding="utf-8")
    rows = []
    for line in text.splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def summary(strategy: str, rows: list[dict]) -> list[tuple[str, str]]:
    """Return the summary table as (name, value) rows, pass@1 last."""
    module = STRATEGIES[strategy][0]
    n = max(1, len(rows))
    table = [("problems", str(len(rows))),
             ("calls / problem", f"{sum(r['cost']['calls'] for r in rows) / n:.1f}"),
             ("tokens in / problem", f"{sum(r['cost']['tokens_in'] for r in rows) / n:.0f}"),
             ("tokens out / problem", f"{sum(r['cost']['tokens_out'] for r in rows) / n:.0f}"),
             ("seconds / problem", f"{sum(r['seconds'] for r in rows) / n:.1f}")]
    metrics = [r["metrics"] for r in rows]
    numeric = sorted({k for m in metrics for k, v in m.items() if isinstance(v, (int, float))})
    for key in numeric:
        values = [float(m[key]) for m in metrics if isinstance(m.get(key), (int, float))]
        table.append((f"{key} (mean)", f"{sum(values) / max(1, len(values)):.3f}"))
    if hasattr(module, "summarize"):
        table += [(k, "n/a (no problem measured it)" if v is None else f"{v:.1f}")
                  for k, v in module.summarize(metrics).items()]
    table.append(("pass@1", f"{sum(r['passed'] for r in rows) / n:.4f}"))
    return table


def plot(run_dir: Path, strategy: str, rows: list[dict]) -> Path | None:
    """Draw each problem's tokens (in + out) and whether it passed; return the PNG (None without matplotlib)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("note: matplotlib is not installed; no plot")
        return None
    fig = draw(strategy, rows)
    path = run_dir / f"strategy_results_{strategy}.png"
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def draw(strategy: str, rows: list[dict]) -> Any:
    """Return the figure of `plot`: a bar per problem (its tokens in + out, green when it passed), problems numbered
    1, 2, ... on whole-number ticks."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(8, 4))
    tokens = [r["cost"]["tokens_in"] + r["cost"]["tokens_out"] for r in rows]
    colors = ["tab:green" if r["passed"] else "tab:red" for r in rows]
    ax.bar(range(1, len(rows) + 1), tokens, color=colors)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))   # problem numbers: no 0.5, 1.5
    ax.set_xlabel("problem (green: passed the hidden tests)")
    ax.set_ylabel("tokens in + out")
    ax.set_title(f"{strategy}: pass@1 {sum(r['passed'] for r in rows) / max(1, len(rows)):.3f}")
    return fig


@dataclass(frozen=True)
class Endpoint:
    """An OpenAI-compatible server to use as the LLM instead of a local model (`--endpoint`)."""
    url: str
    model: str | None = None          # the name the server knows the model by (default: agent_model.name)
    api: str = "completions"          # completions: our code prompts are continued as text; chat: hosted APIs
    api_key_env: str = "OPENAI_API_KEY"


def evaluate(strategy: str, config_path: str, checkpoint: str | None, overrides: list[str],
             endpoint: Endpoint | None = None) -> tuple[Path, list]:
    """Run `strategy` on every eval problem not yet in the results file; return (run folder, all rows)."""
    from tqdm import tqdm

    from envs.code_generation.task import task_problems
    from rewards.sandbox import default_sandbox
    from strategies.execution import score
    from strategies.llm import build_llm

    rest, budget, strategy_config = split_overrides(strategy, overrides)
    config = read_strategy_config(config_path, rest)
    if endpoint is not None and checkpoint:
        raise ConfigError("--endpoint and --checkpoint: a checkpoint's weights are loaded locally; serve them at the "
                          "endpoint instead, or drop --endpoint")
    trained = checkpoint or config.agent_model.init_from   # the weights the LLM answers with
    if trained and endpoint is None:
        config = training_prompts(config, trained, override_keys(rest))
    problems = task_problems(config.task, config.task.dataset.eval_split)   # the prompts as training builds them
    run_dir = results_folder(config, strategy, checkpoint, named="output.run_name" in override_keys(rest))
    path = run_dir / RESULTS
    if endpoint is not None:
        llm_name = f"{endpoint.model or config.agent_model.name}@{endpoint.url}"
    else:
        llm_name = f"{config.agent_model.name}@{checkpoint}" if checkpoint else config.agent_model.name
    settings = strategy_settings(config, strategy, budget, strategy_config, checkpoint, endpoint)
    check_same_settings(run_dir, strategy, settings)
    # one file per run folder: rows of another strategy or model there are not this evaluation's
    rows = [r for r in read_done(path) if r.get("strategy") == strategy and r.get("llm") == llm_name]
    done = {r["task_id"] for r in rows}
    todo = [p for p in problems if p.task_id not in done]
    settings_file(run_dir, strategy).write_text(json.dumps(settings, indent=2), encoding="utf-8")
    if done:
        print(f"resuming: {len(done)} problem(s) already in {path}, {len(todo)} to go")
    if todo:
        import torch
        torch.manual_seed(config.seed)
        module = STRATEGIES[strategy][0]
        if endpoint is not None:
            from strategies.llm import OpenAILLM
            llm = OpenAILLM(endpoint.model or config.agent_model.name, endpoint.url, endpoint.api_key_env,
                            api=endpoint.api)
        else:
            llm = build_llm(config, checkpoint, problems, budget.max_new_tokens)
            if chosen_threads() is not None:   # the local model samples on them
                print(chosen_threads().describe(), file=sys.stderr)
        sandbox = default_sandbox()
        with path.open("a", encoding="utf-8") as out:
            for problem in tqdm(todo, desc=strategy, unit="problem"):
                start = time.time()
                solution = module.solve(problem, llm, sandbox, budget, strategy_config)
                metrics = dict(solution.metrics)
                if hasattr(module, "gt_metrics"):   # the paper's metrics that need the ground truth
                    metrics.update(module.gt_metrics(problem, solution, sandbox))
                verdict = score(problem, solution.code, sandbox)
                row = {"task_id": problem.task_id, "strategy": strategy, "llm": llm_name, **verdict,
                       "code": solution.code,
                       "cost": asdict(solution.cost), "seconds": round(time.time() - start, 2), "metrics": metrics,
                       "num_candidates": len(solution.candidates), "num_tests": len(solution.tests),
                       "tests": solution.tests[:50]}
                out.write(json.dumps(row) + "\n")
                out.flush()   # a line per problem: an interrupted run resumes after it
                rows.append(row)
    return run_dir, rows


def main(argv: list[str] | None = None) -> int:
    """Parse the command line, evaluate, print the summary; return the exit code (SIGTERM ends it as Ctrl-C does,
    with 143)."""
    with TerminateAsInterrupt():
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  python evaluate_strategy.py --strategy codet --config configs/magrpo_che_cpu.yaml "
               "--override codet.num_codes=2 budget.max_calls=20\nkeys (--override): docs/config.md lists every "
               "key, budget.* and each strategy's among them")
    parser.add_argument("--strategy", required=True, choices=sorted(STRATEGIES))
    parser.add_argument("--config", default=DEFAULT_CONFIG,
                        help=f"a trainer YAML config (agent_model, dataset, output; default: {DEFAULT_CONFIG})")
    parser.add_argument("--checkpoint", help="a run folder, checkpoints folder or checkpoint-N folder")
    parser.add_argument("--endpoint", metavar="URL", help="an OpenAI-compatible server's base URL (e.g. "
                        "http://localhost:8000/v1 of `vllm serve` or `transformers serve`) as the LLM")
    parser.add_argument("--endpoint-model", help="the model name the endpoint serves (default: agent_model.name)")
    parser.add_argument("--endpoint-api", choices=OPENAI_APIS, default="completions",
                        help="completions (default: the code prompt is continued as text) or chat (hosted APIs)")
    parser.add_argument("--api-key-env", default="OPENAI_API_KEY", help="environment variable holding the key")
    add_threads_option(parser)
    add_override_option(parser, "cooprl keys (agent_model.name=...), budget.KEY=..., <strategy>.KEY=...")
    args = parser.parse_args(argv)
    setup_logging(logging.WARNING)
    use_torch_threads(args.torch_threads)
    try:
        endpoint = (Endpoint(args.endpoint, args.endpoint_model, args.endpoint_api, args.api_key_env)
                    if args.endpoint else None)
        run_dir, rows = evaluate(args.strategy, args.config, args.checkpoint, args.override, endpoint)
    except UserError as err:
        return print_user_error(err)
    except KeyboardInterrupt as stop:   # every finished problem's line is on disk: the same command resumes after it
        return print_interrupted(f"the problems done are kept in {RESULTS}; the same command goes on from them",
                                 signal_of(stop))
    png = plot(run_dir, args.strategy, rows)
    print(f"results: {run_dir / RESULTS}" + (f"; plot: {png}" if png else ""))
    table = summary(args.strategy, rows)
    width = max(len(k) for k, _ in table)
    for key, value in table:
        print(f"{key:<{width}}  {value}" if key != "pass@1" else f"pass@1: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
