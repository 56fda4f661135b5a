"""The three-level code reward, scored in the isolated sandbox of `rewards.sandbox`.

Per (aux completion, main completion) pair:
1. Cleaning (`rewards.cleaning`): markdown fences and prose are stripped; the function `aux` is taken from
   the aux completion and the function `entry_point` from the main completion (AST first, text fallback). The
   completions' own top-level imports are kept; every other top-level statement of a completion (helpers,
   classes, prints, demo calls, `if __name__ == "__main__":`) is dropped.
2. Level 1: +0.4 when `aux` has a `def` with a `return <value>` (judged on the text when it does not parse),
   +0.6 likewise for the entry point. Without the entry point scoring stops here.
3. Level 2: the prompt's import lines + the completions' imports + aux + main must parse: +0.5, else stop.
4. Level 3: the tests of `check(candidate)` run in the sandbox, `candidate` bound to the entry point, each with
   `timeout_s`; after `max_timeouts` timeouts the rest count as failed. += passed/total. The program run is the
   level-2 code plus the helper functions the prompt defines fully (e.g. `poly` of HumanEval/32): they belong
   to the problem, and the canonical solutions call them. A test is a top-level assert of `check`, or a loop
   or other statement holding asserts, that exercises the candidate (calls it, or uses a value computed by
   calling it) with a condition that is not constant; `assert True, "..."` (36 HumanEval checks), `assert 1 == 1`
   and the like are setup: they run, with no verdict (`TestSuite.from_check`, `assert_units.check_units`).
   A check with no test at all gives no level-3 credit and no cooperation bonus (reason "no tests: ..."):
   the pass fraction is never 1.0 for nothing.
5. Cooperation (two agents only, when a test passed and aux is defined): +0.5 when main calls `aux`; then +1.0
   when main is not a thin wrapper, and −0.5 when it ignores aux's return value. All three are judged on the
   code of main that can run (dead branches, code after a return, nested functions never called are dropped)
   and on data flow; `rewards.cooperation` states the rules.
   With `cooperation="verified"` (`code_reward.cooperation: verified`) the bonus is paid only for what runs: the
   pair is run again with aux raising, handing main its argument wherever aux's result is not a move of it,
   returning one value for every call, and returning other values of the same kind, and each time some test that
   passed must fail, having run to completion; the +1.0 also needs aux alone on main's arguments to fail one
   (`rewards.coop_probes` states the rules); the bonus is then scaled by the share of tests passed. The seed's
   rule (`cooperation="seed"`, the default) judges main's code alone; docs/rewards.md compares the two.
A completion over `MAX_COMPLETION_CHARS` (1,000,000) is refused whole, as if missing (reason "main completion too
long").
Single agent (GRPO/AC baselines): no aux term, no bonus: 0.6 + 0.5 + pass fraction = 2.1 at most.
Totals are rounded to 6 decimals, so a perfect pair scores exactly 4.0.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from types import CodeType
from typing import Any, Mapping, Sequence

from rewards.problem import Problem
from rewards.cleaning import (MAX_COMPLETION_CHARS, PARSE_ERRORS, clean_completion, parse_python, prompt_helpers,
                              prompt_imports)
from rewards.cooperation import cooperation
from rewards.coop_probes import (MODES as COOPERATION_MODES, bypass_main, compile_program, failed_to_completion,
                                  moves_only, scored_aux, scored_main, verify as verify_cooperation)
from rewards.sandbox import Sandbox, TestOutcome, TestSuite, default_sandbox

AUX_NAME = "aux"
W_AUX_DEF, W_MAIN_DEF, W_SYNTAX, W_TESTS = 0.4, 0.6, 0.5, 1.0
W_USES_AUX, W_NOT_WRAPPER, W_IGNORED = 0.5, 1.0, -0.5
# The scored run's total budget: as long as its timeouts may take (max_timeouts x timeout_s, at least one
# timeout); the tests it cuts count as timed out.
# Verified cooperation: a probe run's tests get the scored run's timeout, and the whole probe run at most
# PROBE_TIME_FACTOR x the scored run's CPU time (at least PROBE_CPU_FLOOR_S): CPU time, which the machine's load
# does not change, where wall time made honest pairs lose their probes on a busy machine. All the pair's probe runs
# together take at most PROBES_TOTAL_FACTOR x timeout_s of wall time, and never less than PROBES_WALL_FLOOR_S (an
# absolute bound, each run what the runs before it left: wide enough that on a loaded machine the CPU budgets,
# not the wall clock, decide); what is cut counts as timed out, and a probe counts only tests that ran to
# completion.
PROBE_TIME_FACTOR = 3.0
PROBE_CPU_FLOOR_S = 0.25
PROBES_TOTAL_FACTOR = 2.0
PROBES_WALL_FLOOR_S = 10.0


@dataclass(frozen=True)
class RewardBreakdown:
    """The reward of one pair and the parts it is made of."""

    total: float = 0.0
    aux_defined: bool = False
    main_defined: bool = False
    syntax_ok: bool = False
    tests_passed: int = 0
    tests_total: int = 0
    timeouts: int = 0
    uses_aux: bool = False        # the bonus's gate: main calls aux, counted only when a test passed
    calls_aux: bool = False       # main's code calls aux (on code that can run), whatever the tests say
    not_wrapper: bool = False
    ignored_aux_return: bool = False
    cooperation: str = "seed"     # how the bonus was judged: "seed" (main's code) or "verified" (probe runs)
    coop_check: str = ""          # verified mode: why the bonus was refused ('' when it was paid or not probed)
    reason: str = ""
    failures: tuple[str, ...] = field(default_factory=tuple)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["failures"] = list(self.failures)
        return d


@dataclass
class _Prepared:
    """A pair after cleaning and levels 1–2: either final (`done`) or waiting for its test run."""

    parts: dict
    program: str | CodeType = ""   # compiled, or the source when only the prompt's part fails to compile
    suite: TestSuite | None = None
    main_src: str = ""
    entry_point: str = ""
    single_agent: bool = False
    done: RewardBreakdown | None = None
    aux_src: str = ""                                # what verified cooperation needs to rebuild the program
    imports: tuple[str, ...] = ()                    # the program's import lines (prompt's and completions')
    helper_names: tuple[str, ...] = ()               # the functions the prompt defines
    assemble: Any = None                             # (aux source[, main source, bypass]) -> program source
    rename_items: bool = True                        # the derived probe renames ints in containers (`moves_only`)



@lru_cache(maxsize=2048)
def _prompt_parts(prompt: str, entry_point: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    return tuple(prompt_imports(prompt)), tuple(prompt_helpers(prompt, entry_point, skip=(AUX_NAME,)))


@lru_cache(maxsize=2048)
def hidden_tests_suite(test: str, entry_point: str, prompt: str) -> TestSuite:
    """Return a problem's hidden tests (`test`: its check) as the hidden-test reward runs them."""
    # the judge's context: the prompt itself (imports, helpers such as poly/encode_cyclic), trusted data
    context = []
    try:
        parse_python(prompt)
        context.append(prompt)
    except PARSE_ERRORS:
        context.append("\n".join(prompt_imports(prompt)))
    return TestSuite.from_check(test, entry_point, context=context)


@lru_cache(maxsize=2048)
def _helper_names(prompt: str, entry_point: str) -> tuple[str, ...]:
    """The names of the functions and classes the prompt defines besides the entry point (the gate's globals)."""
    names = []
    for helper in _prompt_parts(prompt, entry_point)[1]:
        try:
            names.append(parse_python(helper).body[0].name)
        except (*PARSE_ERRORS, IndexError, AttributeError):   # a helper the gate then does not know: refused
            pass
    return tuple(names)


def _round(x: float) -> float:
    return round(x + 0.0, 6)


def _bounded(completion: str | None) -> str:
    """The completion the reward cleans: '' when it is over `MAX_COMPLETION_CHARS` (refused whole, as missing)."""
    return "" if completion is None or len(completion) > MAX_COMPLETION_CHARS else completion


def _prepare(problem: Problem | Mapping[str, Any], aux: str, main: str, single_agent: bool,
             cooperation_mode: str = "seed") -> _Prepared:
    problem = Problem.coerce(problem)
    prompt, test, entry_point = problem.prompt, problem.test, problem.entry_point
    main_clean = clean_completion(_bounded(main), entry_point)
    aux_clean = clean_completion(_bounded(aux), AUX_NAME) if not single_agent else None
    aux_defined = aux_clean is not None and aux_clean.returns_value
    main_defined = main_clean.returns_value
    total = (W_AUX_DEF if aux_defined else 0.0) + (W_MAIN_DEF if main_defined else 0.0)
    parts = {"aux_defined": aux_defined, "main_defined": main_defined}
    if main_defined and not single_agent:
        parts["calls_aux"] = cooperation(main_clean.function, entry_point, AUX_NAME).uses_aux
    if not main_defined:
        why = "main function missing" if not main_clean.function else "main function has no return value"
        if len(main or "") > MAX_COMPLETION_CHARS:
            why = f"main completion too long ({len(main)} characters; the reward reads {MAX_COMPLETION_CHARS})"
        return _Prepared(parts, done=RewardBreakdown(total=_round(total), reason=why, **parts))

    imports, helpers = _prompt_parts(prompt, entry_point)
    pieces = list(imports) + list(main_clean.imports)
    if aux_clean is not None:
        pieces += list(aux_clean.imports)
    head = "\n".join(dict.fromkeys(pieces))
    aux_src = aux_clean.function if aux_clean is not None else ""

    # verified mode scores aux behind the probes' wrapper (passing results through): same frames as the probes,
    # and main followed by the main-bypass probe's entry point (`scored_main`): the same layout in every run
    verified = cooperation_mode == "verified" and aux_defined
    wrapped = verified and scored_aux(aux_src, AUX_NAME) != aux_src
    suite = hidden_tests_suite(test, entry_point, prompt)
    rename_items = not (verified and moves_only(suite.units, suite.param))

    def assemble(aux_function: str, main_function: str | None = None, bypass: bool = False) -> str:
        # prompt helpers first, so that the completions' own definitions win
        parts = ([head] if head else []) + list(helpers) + ([aux_function] if aux_function else [])
        if main_function is None:
            main_function = (scored_main(main_clean.function, entry_point, AUX_NAME, bypass) if wrapped
                             else main_clean.function)
        return "\n\n".join(parts + [main_function]) + "\n"

    code_parts = ([head] if head else []) + ([aux_src] if aux_src else []) + [main_clean.function]
    source = assemble(scored_aux(aux_src, AUX_NAME, rename_items) if verified else aux_src)
    # Level 2 is judged on `code` (the completions' parts), but compiling the whole program is the same check
    # when it succeeds (the helpers are whole statements of a prompt that parses), and the sandbox then runs
    # this code object as is: one compile instead of a parse here and a compile in the worker.
    try:
        program: str | CodeType = compile_program(source)
    except PARSE_ERRORS:
        program = source
    if isinstance(program, str):
        try:
            parse_python("\n\n".join(code_parts) + "\n")
        except PARSE_ERRORS as err:
            why = (f"syntax error: {err.msg} (line {err.lineno}, column {err.offset})" if isinstance(err, SyntaxError)
                   else f"syntax error: the parser gave up ({type(err).__name__})")
            return _Prepared(parts, done=RewardBreakdown(total=_round(total), reason=why, **parts))
        # the completions parse and the prompt's part does not: the run reports the load error
    parts["syntax_ok"] = True
    return _Prepared(parts, program=program, suite=suite, main_src=main_clean.function,
                     entry_point=entry_point, single_agent=single_agent, aux_src=aux_src,
                     imports=tuple(dict.fromkeys(pieces)),
                     helper_names=_helper_names(prompt, entry_point) if verified else (), rename_items=rename_items,
                     assemble=assemble)


def _finish(prep: _Prepared, outcomes: Sequence[TestOutcome], reason: str = "", cooperation_mode: str = "seed",
            probe: Any = None) -> RewardBreakdown:
    """The breakdown of a pair after its test run. In verified mode `probe(aux_source[, main_source, bypass])` runs the
    program with aux's (and main's) source replaced and returns its verdicts (`_probe_runner`)."""
    parts = dict(prep.parts)
    total = (W_AUX_DEF if parts["aux_defined"] else 0.0) + W_MAIN_DEF + W_SYNTAX
    n = len(outcomes)
    passed = sum(1 for o in outcomes if o.passed)
    timeouts = sum(1 for o in outcomes if o.timed_out)
    if n:
        total += W_TESTS * passed / n
    failures = tuple(f"{o.test} -> {o.error or 'failed'}" for o in outcomes if not o.passed)
    if n == 0 and not reason:
        reason = "no tests: no assert of the check exercises the candidate"
    if timeouts:
        reason = reason or f"{timeouts} timeout(s)"
    parts["cooperation"] = cooperation_mode
    bonus = Bonus()
    if not prep.single_agent and passed > 0 and parts["aux_defined"]:
        coop = cooperation(prep.main_src, prep.entry_point, AUX_NAME)
        bonus = (verified_bonus(prep, coop, [o.passed for o in outcomes], probe) if cooperation_mode == "verified"
                 else seed_bonus(coop))
    return RewardBreakdown(total=_round(total + bonus.value), tests_passed=passed, tests_total=n, timeouts=timeouts,
                           reason=reason, failures=failures, **parts, **bonus.fields())


@dataclass(frozen=True)
class Bonus:
    """The cooperation bonus of one pair and the breakdown fields that explain it (none set: no bonus judged)."""

    value: float = 0.0
    uses_aux: bool | None = None
    not_wrapper: bool | None = None
    ignored_aux_return: bool | None = None
    coop_check: str | None = None   # verified mode: why it was refused

    def fields(self) -> dict[str, Any]:
        """Return the breakdown fields this bonus sets."""
        return {key: value for key, value in asdict(self).items() if key != "value" and value is not None}


def seed_bonus(coop) -> Bonus:
    """The seed's bonus, judged on main's code: calls aux, is not a thin wrapper, does not ignore aux's return."""
    if not coop.uses_aux:
        return Bonus(uses_aux=False)
    value = W_USES_AUX + W_NOT_WRAPPER * (not coop.thin_wrapper) + W_IGNORED * coop.ignores_return
    return Bonus(value, uses_aux=True, not_wrapper=not coop.thin_wrapper, ignored_aux_return=coop.ignores_return)


def verified_bonus(prep: _Prepared, coop, passed: list[bool], probe: Any) -> Bonus:
    """The bonus of verified mode: the seed's parts (main's own work, aux's return used), paid only when the
    probe runs show that aux does work main needs, and scaled by the share of tests passed."""
    bonus = W_USES_AUX + W_NOT_WRAPPER * (not coop.thin_wrapper) + W_IGNORED * coop.ignores_return
    if bonus <= 0:
        return Bonus(coop_check="nothing to pay: main's code is a thin wrapper that ignores aux's return, or its "
                                "data-flow analysis gave up")
    why = verify_cooperation(prep.aux_src, prep.main_src, prep.imports, passed, probe, AUX_NAME, prep.helper_names,
                             prep.rename_items)
    if why:
        return Bonus(coop_check=why)
    not_wrapper, check = not coop.thin_wrapper, None
    if not_wrapper:
        # main's own work: aux alone on main's arguments must fail (to completion) a test main passed
        has_def = bypass_main(prep.main_src, prep.entry_point, AUX_NAME) is not None
        verdicts = probe(scored_aux(prep.aux_src, AUX_NAME, prep.rename_items), bypass=True) if has_def else []
        if len(verdicts) != len(passed) or not failed_to_completion(passed, verdicts):
            not_wrapper, bonus = False, bonus - W_NOT_WRAPPER
            check = "main adds nothing aux does not do: aux alone on main's arguments passes the tests main passes"
    return Bonus(max(0.0, bonus) * sum(passed) / len(passed), uses_aux=True, not_wrapper=not_wrapper,
                 ignored_aux_return=coop.ignores_return, coop_check=check)


def code_reward(problem: Problem | Mapping[str, Any], aux: str, main: str, *, single_agent: bool = False,
                timeout_s: float = 10.0, max_timeouts: int = 3, sandbox: Sandbox | None = None,
                cooperation: str = "seed") -> RewardBreakdown:
    """The reward of one (aux, main) pair for `problem` (a Problem or a dict with prompt, test, entry_point).

    `single_agent=True` scores `main` alone (aux ignored; maximum 2.1). `sandbox` defaults to the process-wide
    pool (`rewards.sandbox.default_sandbox()`). `cooperation` is how the bonus is judged: "seed" (main's code,
    `rewards.cooperation`) or "verified" (probe runs, scaled by the share of tests passed; `rewards.coop_probes`).
    """
    return code_rewards_batch([problem], [aux], [main], single_agent=single_agent, timeout_s=timeout_s,
                              max_timeouts=max_timeouts, sandbox=sandbox, cooperation=cooperation)[0]


def code_rewards_batch(problems: Sequence[Problem | Mapping[str, Any]], aux_list: Sequence[str],
                       main_list: Sequence[str], *, single_agent: bool = False, timeout_s: float = 10.0,
                       max_timeouts: int = 3, sandbox: Sandbox | None = None, cooperation: str = "seed"
                       ) -> list[RewardBreakdown]:
    """`code_reward` for many pairs; the programs run in parallel on the sandbox's workers."""
    if cooperation not in COOPERATION_MODES:
        raise ValueError(f"cooperation {cooperation!r}: expected one of {', '.join(COOPERATION_MODES)}")
    if not (len(problems) == len(aux_list) == len(main_list)):
        raise ValueError(f"batch lengths differ: {len(problems)} problems, {len(aux_list)} aux, "
                         f"{len(main_list)} main completions")
    sb = sandbox or default_sandbox()

    def one(item) -> RewardBreakdown:
        # cleaning and the AST checks run on the pool's threads too, overlapping with the workers' runs
        prep = _prepare(*item, single_agent, cooperation)
        if prep.done is not None:
            return prep.done
        report = sb.run_detailed(prep.program, prep.suite, timeout_s, max_timeouts,
                                 total_s=max(1, max_timeouts) * timeout_s)
        probe = None
        if cooperation == "verified":
            # a probe that changes aux may send main into a loop, or main may be slow only on a probe's values:
            # each probe run is bounded like the scored run (same timeout per test, same number of timeouts),
            # as a whole by a few times the scored run's own CPU time, and all of them by an absolute wall budget
            cpu_budget = max(PROBE_CPU_FLOOR_S, PROBE_TIME_FACTOR * report.cpu_s)
            wall = max(PROBES_WALL_FLOOR_S, PROBES_TOTAL_FACTOR * timeout_s)
            probe = _probe_runner(sb, prep, timeout_s, max_timeouts, cpu_budget, wall)
        return _finish(prep, report.outcomes, report.error or "", cooperation, probe)

    return sb.map_detailed(one, list(zip(problems, aux_list, main_list)))


def _probe_runner(sb: Sandbox, prep: _Prepared, timeout_s: float, max_timeouts: int, cpu_budget_s: float,
                  wall_total_s: float):
    """run(aux source[, main source, bypass]) -> the verdicts (passed, ran to completion) of the pair's program
    with aux's (and main's) source replaced (verified mode), each run within `cpu_budget_s` CPU seconds, and all
    the runs within `wall_total_s` seconds of wall time together (tests past either count as timed out, and did
    not run to completion)."""
    deadline = time.monotonic() + wall_total_s

    def run(aux_function: str, main_function: str | None = None, bypass: bool = False) -> list[tuple[bool, bool]]:
        source = prep.assemble(aux_function, main_function, bypass)
        try:
            program: str | CodeType = compile_program(source)
        except PARSE_ERRORS:   # the sandbox reports why it does not load
            program = source
        report = sb.run_detailed(program, prep.suite, timeout_s, max_timeouts,
                                 total_s=max(0.0, deadline - time.monotonic()), cpu_budget_s=cpu_budget_s)
        return [] if report.error else [(o.passed, ran_to_completion(o)) for o in report.outcomes]
    return run


def ran_to_completion(outcome: TestOutcome) -> bool:
    """Whether a test ran to its end: not cut by its timeout or the run's budget, not skipped after timeouts."""
    return outcome.passed or not (outcome.timed_out or outcome.error.startswith("skipped"))



def scored_build(problem: Problem | Mapping[str, Any], aux: str, main: str, *, single_agent: bool = False
                 ) -> tuple[str | CodeType, str] | None:
    """Return (the program `code_reward` runs for a pair, its source): the cleaned completions (the program compiled,
    or the source when only the prompt's part fails to compile), or None when scoring stops before the tests (no
    entry point with a return value, a syntax error). What other judges of a coder's code (a tester's tests) run
    too; the source is what a judge that adds code to a correct program (`rewards.judged_tests.typed_junk_program`)
    builds on. One cleaning for both."""
    prep = _prepare(problem, aux, main, single_agent)
    return None if prep.done is not None else (prep.program, prep.assemble(prep.aux_src))


def scored_program(problem: Problem | Mapping[str, Any], aux: str, main: str, *, single_agent: bool = False
                   ) -> str | CodeType | None:
    """Return the program of `scored_build` (None where that is None)."""
    built = scored_build(problem, aux, main, single_agent=single_agent)
    return None if built is None else built[0]
