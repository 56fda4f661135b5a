"""`cosplay`: CoSPlay (seed 002), cooperative self-play of code and unit tests at test time, GT-free.

1. Exploration-attack idea generation (§2.1): hints H about the problem; every hint subset of size 1-2 is
   expanded into solution plans S; for every plan, failure-oriented attack ideas A.
2. Pools (§2.2): N_c codes, one per plan (shuffled, reused in turn when N_c > |S|); N_t unit tests, half from
   random valid inputs, half from attack ideas. The LLM predicts each input's output `output_samples` times; the
   UT is kept when at least `min_agree` answers agree (self-consistency).
3. Self-play (§2.3) for up to T_max rounds on the execution matrix M (codes x UTs, run in the sandbox):
   step 1 resample all-failing codes; step 2 refresh the lowest-support non-trivial UTs (the code that passes
   them shown as a suspect); step 3 refine the codes failing the highest-support non-trivial UT with it;
   step 4 replace zero-discrimination UTs (passed by none or all). M is re-run after each step; a step without
   a target is skipped; the loop ends early when M is all ones.
4. Cluster selection (§2.4): the codes with the top pass count (BoN-tied) run on R random valid inputs; codes with
   the same outputs form a cluster, scored |cluster| x valid outputs (runtime errors do not count as agreement);
   the best cluster's first code is the answer.
No ground truth is used until `gt_metrics` (UT accuracy, code accuracy, BoN, Signal: Table 1) and the final score.
The seed does not give |H|, ideas per plan or R: those defaults are ours.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter
from dataclasses import dataclass
from typing import Any, Sequence

from cooprl.config import option
from envs.code_generation.prompts import problem_code
from rewards.problem import Problem
from strategies.base import LLM, Budget, Session, Solution
from strategies.execution import ERROR, pass_matrix, reference_code, score, signatures
from strategies.text import (CODE_STOP, LINE_STOP, args_from_line, call_of, code_prompt, doctest_prompt, entry,
                             extract_code, normalize_value, numbered_items, output_prompt)


@dataclass
class CoSPlayConfig:
    num_hints: int = option(4, "hints |H| about the problem (not in the seed)", min=1)
    max_subset_size: int = option(2, "hint subsets of size 1 to this are expanded into plans", min=1)
    plans_per_subset: int = option(1, "plans |S_omega| per hint subset", min=1)
    ideas_per_plan: int = option(2, "attack ideas |A_s| per plan (not in the seed)", min=0)
    num_codes: int = option(16, "codes in the pool (N_c)", min=1)
    num_tests: int = option(16, "unit tests in the pool (N_t)", min=0)
    random_fraction: float = option(0.5, "share of the unit tests' inputs that are random valid ones (the rest come "
                                    "from attack ideas)", min=0.0, max=1.0)
    output_samples: int = option(4, "expected outputs sampled per unit-test input", min=1)
    min_agree: int = option(3, "a unit test is kept when at least this many of its sampled outputs agree", min=1)
    input_attempts: int = option(2, "tries per unit test (each costs 1 + output_samples calls)", min=1)
    max_rounds: int = option(5, "self-play rounds (T_max)", min=0)
    refresh_per_round: int = option(1, "unit tests refreshed by step 2 of each round", min=0)
    cluster_inputs: int = option(10, "random valid inputs R the top codes run on for clustering (not in the seed)",
                                 min=1)
    use_cluster: bool = option(True, "false: plain best-of-N over the final pool instead of cluster selection")
    text_max_new_tokens: int = option(160, "longest hint, plan or idea in tokens", min=1)
    timeout_s: float = option(2.0, "seconds per unit-test run", min=0.01)
    seed: int = option(0, "seed of the shuffles of plans and ideas", min=0)


@dataclass(frozen=True)
class UnitTest:
    """A generated UT: the call, the agreed expected value (normalized literal) and where the input came from."""

    call: str
    expected: str
    source: str   # "random" or "attack"

    @property
    def test(self) -> str:
        return f"assert {self.call} == {self.expected}"


# --------------------------------------------------------------------------- pure decisions (tested alone)
def agreed_output(answers: Sequence[str], min_agree: int) -> str | None:
    """Return the expected value at least `min_agree` answers agree on (normalized literals), else None."""
    values = [v for v in (normalize_value(a) for a in answers) if v is not None]
    if not values:
        return None
    value, count = Counter(values).most_common(1)[0]
    return value if count >= min_agree else None


def column_support(matrix: Sequence[Sequence[int]]) -> list[int]:
    return [sum(col) for col in zip(*matrix)] if matrix else []


def step1_targets(matrix: Sequence[Sequence[int]]) -> list[int]:
    """Codes that fail every UT (step 1 resamples them); none when there are no UTs."""
    return [i for i, row in enumerate(matrix) if row and not any(row)]


def step2_targets(matrix: Sequence[Sequence[int]], k: int) -> list[int]:
    """The `k` non-trivial UTs (passed by some but not all codes) with the lowest support (step 2 refreshes them)."""
    support, n = column_support(matrix), len(matrix)
    nontrivial = [j for j, s in enumerate(support) if 0 < s < n]
    return sorted(nontrivial, key=lambda j: (support[j], j))[:k]


def step3_target(matrix: Sequence[Sequence[int]]) -> tuple[int, list[int]] | None:
    """The highest-support non-trivial UT and the codes failing it (step 3 refines them with it), or None."""
    support, n = column_support(matrix), len(matrix)
    nontrivial = [j for j, s in enumerate(support) if 0 < s < n]
    if not nontrivial:
        return None
    best = max(nontrivial, key=lambda j: (support[j], -j))
    return best, [i for i, row in enumerate(matrix) if not row[best]]


def step4_targets(matrix: Sequence[Sequence[int]]) -> list[int]:
    """UTs that discriminate nothing: passed by no code or by every code (step 4 replaces them)."""
    support, n = column_support(matrix), len(matrix)
    return [j for j, s in enumerate(support) if s == 0 or s == n]


def select_cluster(pass_counts: Sequence[int], sigs: dict[int, tuple[str, ...]]) -> tuple[int, list[dict]]:
    """Return (chosen code, clusters) among the BoN-tied codes `sigs` (index -> outputs on the R inputs).
    Codes with equal outputs form a cluster scored size x valid outputs; the best cluster (then the larger,
    then the earlier) gives its first code."""
    groups: dict[tuple[str, ...], list[int]] = {}
    for i in sorted(sigs):
        groups.setdefault(sigs[i], []).append(i)
    clusters = []
    for sig, members in groups.items():
        valid = sum(1 for o in sig if o != ERROR) if sig else 1
        clusters.append({"members": members, "score": len(members) * valid, "valid": valid})
    clusters.sort(key=lambda c: (-c["score"], -len(c["members"]), c["members"][0]))
    return clusters[0]["members"][0], clusters


def bon_index(matrix: Sequence[Sequence[int]]) -> int:
    """The first code with the top pass count (Best-of-N with self-generated UTs)."""
    counts = [sum(row) for row in matrix]
    return counts.index(max(counts)) if counts else 0


# --------------------------------------------------------------------------- the pipeline
class _Run:
    """One problem's CoSPlay run: the session, the pools and the trace."""

    def __init__(self, problem: Problem, session: Session, sandbox: Any, config: CoSPlayConfig):
        self.problem, self.session, self.sandbox, self.config = problem, session, sandbox, config
        self.rng = random.Random(config.seed)
        self.trace: list[dict] = []
        self.all_codes: list[str] = []
        self.all_tests: list[str] = []

    def say(self, prompt: str) -> str:
        return (self.session.generate(prompt, 1, max_new_tokens=self.config.text_max_new_tokens) or [""])[0]

    # stage 1
    def explore(self) -> tuple[list[str], list[str], list[str]]:
        c, p = self.config, self.problem
        head = problem_code(p).rstrip()
        hints = numbered_items("1." + self.say(
            f"{head}\n\nList {c.num_hints} short algorithmic hints for `{entry(p)}` (strategies, data structures, "
            "edge cases), one per line.\n1."), c.num_hints)
        subsets = [s for k in range(1, c.max_subset_size + 1) for s in itertools.combinations(hints, k)]
        plans = []
        for subset in subsets:
            for _ in range(c.plans_per_subset):
                hint_text = "\n".join(f"- {h}" for h in subset)
                plan = self.say(f"{head}\n\nHints:\n{hint_text}\n\nUsing these hints, describe a detailed solution "
                                "plan in natural language (no code).\nPlan:").strip()
                if plan:
                    plans.append(plan)
        ideas = []
        for plan in plans:
            ideas += numbered_items("1." + self.say(
                f"{head}\n\nSolution plan:\n{plan}\n\nList {c.ideas_per_plan} inputs on which this plan could fail "
                "(hidden edge cases, implementation pitfalls), one per line.\n1."), c.ideas_per_plan)
        self.trace.append({"step": "explore", "hints": hints, "plans": len(plans), "ideas": len(ideas)})
        return hints, plans, ideas

    # stage 2
    def code_from(self, guidance: str) -> str | None:
        texts = self.session.generate(code_prompt(self.problem, guidance), 1, stop=CODE_STOP)
        if not texts:
            return None
        code = extract_code(self.problem, texts[0])
        self.all_codes.append(code)
        return code

    def code_from_plan(self, plans: list[str]) -> str | None:
        return self.code_from(f"Solution plan:\n{self.rng.choice(plans)}" if plans else "")

    def new_input(self, intro: str, prefix: str = "") -> str | None:
        text = self.session.generate(prefix + doctest_prompt(self.problem, intro), 1, max_new_tokens=64,
                                     stop=LINE_STOP)
        return call_of(self.problem, args_from_line(text[0])) if text else None

    def new_ut(self, source: str, idea: str = "", suspect: str = "") -> UnitTest | None:
        """A UT from a random valid input or an attack idea (with a suspect code to break, for step 2), kept only
        when the sampled outputs agree; None after `input_attempts` tries or when the budget is spent."""
        c = self.config
        intro = f"An input that tests: {idea}" if idea else "A random valid input"
        prefix = f"# This code may be wrong; choose an input on which it fails:\n{suspect}\n\n" if suspect else ""
        for _ in range(c.input_attempts):
            if self.session.exhausted():
                return None
            call = self.new_input(intro, prefix)
            if call is None:
                continue
            answers = self.session.generate(output_prompt(self.problem, call), c.output_samples, max_new_tokens=48,
                                            stop=LINE_STOP)
            expected = agreed_output(answers, c.min_agree)
            if expected is not None:
                ut = UnitTest(call, expected, source)
                self.all_tests.append(ut.test)
                return ut
        return None

    def init_pools(self, plans: list[str], ideas: list[str]) -> tuple[list[str], list[UnitTest]]:
        c = self.config
        order = plans[:]
        self.rng.shuffle(order)
        codes = []
        for i in range(c.num_codes):
            plan = order[i % len(order)] if order else ""
            code = self.code_from(f"Solution plan:\n{plan}" if plan else "")
            if code is None:
                break
            codes.append(code)
        n_random = round(c.num_tests * c.random_fraction)
        attack = ideas[:]
        self.rng.shuffle(attack)
        uts = []
        for j in range(c.num_tests):
            if j < n_random or not attack:
                ut = self.new_ut("random")
            else:
                ut = self.new_ut("attack", idea=attack[(j - n_random) % len(attack)])
            if ut is not None:
                uts.append(ut)
        return codes, uts

    # stage 3
    def matrix(self, codes: list[str], uts: list[UnitTest]) -> list[list[int]]:
        return pass_matrix(self.sandbox, self.problem, codes, [u.test for u in uts], self.config.timeout_s)

    def self_play(self, plans: list[str], ideas: list[str], codes: list[str], uts: list[UnitTest]) -> int:
        """Run up to T_max rounds of steps 1-4 on the pools (changed in place); return the rounds run."""
        c = self.config
        rounds = 0
        for r in range(c.max_rounds):
            m = self.matrix(codes, uts)
            if not codes or not uts or all(all(row) for row in m) or self.session.exhausted():
                break
            rounds += 1
            done = []
            targets = step1_targets(m)                      # step 1: resample all-failing codes
            for i in targets:
                codes[i] = self.code_from_plan(plans) or codes[i]
            if targets:
                done.append(("step1", targets))
                m = self.matrix(codes, uts)
            targets = step2_targets(m, c.refresh_per_round)  # step 2: refresh lowest-support non-trivial UTs
            for j in targets:
                suspect = codes[next(i for i, row in enumerate(m) if row[j])]
                uts[j] = self.new_ut(uts[j].source, suspect=suspect) or uts[j]
            if targets:
                done.append(("step2", targets))
                m = self.matrix(codes, uts)
            target = step3_target(m)                        # step 3: refine codes with the best non-trivial UT
            if target is not None:
                j, failing = target
                for i in failing:
                    codes[i] = self.code_from(f"This code is wrong:\n{codes[i]}\n\nIt fails this test:\n"
                                              f"{uts[j].test}\n\nWrite the corrected function.") or codes[i]
                done.append(("step3", [j] + failing))
                m = self.matrix(codes, uts)
            targets = step4_targets(m)                      # step 4: replace zero-discrimination UTs
            for j in targets:
                ideas_left = ideas or [""]
                idea = self.rng.choice(ideas_left) if uts[j].source == "attack" else ""
                uts[j] = self.new_ut(uts[j].source, idea=idea) or uts[j]
            if targets:
                done.append(("step4", targets))
            self.trace.append({"step": f"round_{r + 1}", "done": done})
        return rounds


def solve(problem: Problem, llm: LLM, sandbox: Any, budget: Budget, config: CoSPlayConfig | None = None) -> Solution:
    """Return the code CoSPlay selects, every code and UT it generated, the cost, its GT-free pool metrics,
    and (in the trace's last entry, `final_pools`) the pools `gt_metrics` needs."""
    config = config or CoSPlayConfig()
    session = Session(llm, budget)
    run = _Run(problem, session, sandbox, config)
    _, plans, ideas = run.explore()
    codes, uts = run.init_pools(plans, ideas)
    initial_codes = codes[:]
    rounds = run.self_play(plans, ideas, codes, uts)
    m = run.matrix(codes, uts)
    counts = [sum(row) for row in m]
    chosen = bon_index(m)
    clusters: list[dict] = []
    tied = [i for i, n in enumerate(counts) if n == max(counts)] if counts else []
    if config.use_cluster and len(tied) > 1:
        calls = []
        for _ in range(config.cluster_inputs):   # inputs without outputs: one call each
            if session.exhausted():
                break
            call = run.new_input("A random valid input")
            if call is not None and call not in calls:
                calls.append(call)
        if calls:
            sigs = signatures(sandbox, problem, [codes[i] for i in tied], calls, config.timeout_s)
            chosen, clusters = select_cluster(counts, {i: s for i, s in zip(tied, sigs)})
    metrics = {"codes": len(codes), "uts": len(uts), "rounds": rounds, "bon_tied": len(tied),
               "clusters": len(clusters), "top_pass_count": max(counts) if counts else 0,
               "random_uts": sum(u.source == "random" for u in uts)}
    run.trace.append({"step": "final_pools", "codes": codes, "tests": [u.test for u in uts],
                      "initial_codes": initial_codes, "matrix": m, "chosen": chosen,
                      "clusters": [{"members": c["members"], "score": c["score"]} for c in clusters]})
    return Solution(code=codes[chosen] if codes else "", candidates=run.all_codes, tests=run.all_tests,
                    cost=session.cost, metrics=metrics, trace=run.trace)


def gt_metrics(problem: Problem, solution: Solution, sandbox: Any) -> dict[str, Any]:
    """The paper's Table 1 metrics of one problem, with the ground truth (after `solve`, never inside it):
    ut_acc (share of final UTs the reference solution passes; None without a reference), code_acc (share of
    final codes passing the hidden tests), bon (the top-pass-count code without clustering passes) and signal
    (the final UTs' BoN pick among the round-0 codes passes; the paper picks among a fixed Qwen2.5-7B pool)."""
    final = next((t for t in reversed(solution.trace) if t.get("step") == "final_pools"), None)
    if not final or not final["codes"]:
        return {"ut_acc": None, "code_acc": 0.0, "bon": False, "signal": False}
    verdicts = [score(problem, code, sandbox)["passed"] for code in final["codes"]]
    reference = reference_code(problem)
    ut_acc = None
    if reference is not None and final["tests"]:
        ut_acc = sum(pass_matrix(sandbox, problem, [reference], final["tests"])[0]) / len(final["tests"])
    initial = final["initial_codes"]
    signal = False
    if initial:
        pick = bon_index(pass_matrix(sandbox, problem, initial, final["tests"])) if final["tests"] else 0
        signal = score(problem, initial[pick], sandbox)["passed"]
    return {"ut_acc": ut_acc, "code_acc": sum(verdicts) / len(verdicts),
            "bon": verdicts[bon_index(final["matrix"])], "signal": signal}


def summarize(metrics: Sequence[dict]) -> dict[str, float | None]:
    """Table 1's columns over a run, in percent: UT accuracy, code accuracy, BoN, Signal; None for a column no
    problem measured (UT accuracy when no problem kept a unit test and had a reference to check it against)."""
    def mean(key: str) -> float | None:
        values = [float(m[key]) for m in metrics if m.get(key) is not None]
        return 100.0 * sum(values) / len(values) if values else None
    return {"UT_acc_%": mean("ut_acc"), "code_acc_%": mean("code_acc"), "BoN_%": mean("bon"),
            "Signal_%": mean("signal")}
