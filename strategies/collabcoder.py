"""`collabcoder`: CollabCoder (seed 000), plan-code co-evolution through collaborative decision-making.

Algorithm 1 of the paper, as its prompts (Figures 9-16) describe it:
  plan   <- A_plan(P)                                   dynamic planning agent
  code   <- A_code(plan, T)                             adaptive coding agent
  repeat up to `max_iterations` times, while the code fails a visible test of T:
    (E_plan, E_code, E_align) <- A_CDM(P, plan, code, F)     merged diagnostic analysis (one call)
    (Phi, Psi)                <- A_CDM(E_plan, E_code, E_align)  confidence and consistency scores (one call)
    X                         <- decide(Phi, Psi, trust weights)  revise the plan or the code
    R                         <- A_RT(R, E_X, P, X, F)       reasoning trajectory update
    X = plan: plan <- A_plan(P, plan, F, R); code <- A_code(plan, T)
    X = code: code <- A_code(P, code, F, R, T)               patch
T are the examples of the problem statement (its `>>>` lines), the visible tests the paper's baselines use too;
without examples the LLM writes `generated_tests` asserts. They run as untrusted tests in our sandbox. The seed
does not give the number of iterations or the trust weights: the defaults below are ours (MapCoder's t = 5).
The paper's efficiency metrics, plan and code update rates, are updates / debugging iterations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from cooprl.config import option
from envs.code_generation.prompts import problem_code
from rewards.problem import Problem
from strategies.base import LLM, Budget, Session, Solution
from strategies.execution import run_tests
from strategies.text import CODE_STOP, code_prompt, doctest_asserts, entry, extract_code, parse_asserts, score_of


@dataclass
class CollabCoderConfig:
    max_iterations: int = option(5, "debugging iterations (not in the seed; MapCoder's t = 5)", min=0)
    trust_confidence: float = option(0.5, "trust weight of the confidence scores (Phi) in a module's score", min=0.0)
    trust_consistency: float = option(0.5, "trust weight of the consistency scores (Psi) in a module's score",
                                      min=0.0)
    default_score: float = option(0.5, "the score of one the CDM answer leaves out", min=0.0, max=1.0)
    use_cdm: bool = option(True, "false: the ablation \"w/o CDM\" (always patch the code)")
    use_rt: bool = option(True, "false: the ablation \"w/o RT\" (no reasoning trajectory)")
    rt_max_entries: int = option(5, "reasoning-trajectory entries shown to the agents (the newest)", min=0)
    text_max_new_tokens: int = option(192, "longest plan, analysis or trajectory entry in tokens", min=1)
    generated_tests: int = option(5, "asserts asked for when the statement has no examples", min=1)
    timeout_s: float = option(2.0, "seconds per visible test run", min=0.01)


@dataclass(frozen=True)
class Scores:
    """CDM's scores in [0, 1]: confidence that the plan / code is right (Phi), and consistency of the plan with
    the problem and of the code with the plan (Psi)."""

    plan_confidence: float
    code_confidence: float
    plan_consistency: float
    code_consistency: float


def decide(scores: Scores, config: CollabCoderConfig) -> str:
    """Return "plan" or "code": the module to revise, the one with the lower trust-weighted score
    w_conf * confidence + w_cons * consistency. A tie revises the code (a patch is the cheaper move)."""
    if not config.use_cdm:
        return "code"
    plan = config.trust_confidence * scores.plan_confidence + config.trust_consistency * scores.plan_consistency
    code = config.trust_confidence * scores.code_confidence + config.trust_consistency * scores.code_consistency
    return "plan" if plan < code else "code"


def parse_scores(text: str, default: float) -> Scores:
    """Return the four scores an answer to the scoring prompt wrote (`plan_confidence: 0.7`, ...)."""
    return Scores(*(score_of(text, k, default) for k in
                    ("plan_confidence", "code_confidence", "plan_consistency", "code_consistency")))


# --------------------------------------------------------------------------- the agents' prompts
def plan_prompt(problem: Problem) -> str:
    return (f"{problem_code(problem).rstrip()}\n\nWrite a short step-by-step plan (numbered steps, no code) "
            f"to implement `{entry(problem)}`.\nPlan:\n1.")


def plan_refine_prompt(problem: Problem, plan: str, feedback: str, trajectory: str) -> str:
    return (f"{problem_code(problem).rstrip()}\n\nCurrent plan:\n{plan}\n\nTest feedback:\n{feedback}\n\n"
            f"{trajectory}The plan is wrong. Write a corrected step-by-step plan (numbered steps, no code).\nPlan:\n1.")


def code_guidance(plan: str, tests: Sequence[str]) -> str:
    shown = "\n".join(tests[:5])
    return f"Follow this plan:\n{plan}\n\nThe code must pass:\n{shown}" if shown else f"Follow this plan:\n{plan}"


def patch_guidance(code: str, feedback: str, trajectory: str) -> str:
    return (f"This code is wrong:\n{code}\n\nTest feedback:\n{feedback}\n\n{trajectory}"
            "Write the corrected function.")


def cdm_prompt(problem: Problem, plan: str, code: str, feedback: str) -> str:
    return (f"{problem_code(problem).rstrip()}\n\nPlan:\n{plan}\n\nCode:\n{code}\n\nTest feedback:\n{feedback}\n\n"
            "Analyse the failure in three parts.\nPlan analysis: is the plan right for the problem?\n"
            "Code analysis: does the code have bugs?\nAlignment analysis: does the code follow the plan?\n"
            "Plan analysis:")


def score_prompt(analysis: str) -> str:
    return (f"Diagnosis:\n{analysis}\n\nFrom this diagnosis give four scores between 0 and 1:\n"
            "plan_confidence (the plan is correct), code_confidence (the code is correct),\n"
            "plan_consistency (the plan matches the problem), code_consistency (the code matches the plan).\n"
            "plan_confidence:")


def rt_prompt(problem: Problem, trajectory: str, analysis: str, target: str, feedback: str) -> str:
    return (f"Problem: `{entry(problem)}`.\n{trajectory}Latest failure:\n{feedback}\nDiagnosis:\n{analysis}\n"
            f"We will now revise the {target}. In one or two sentences, state what was learned and what to avoid.\n"
            "Insight:")


def feedback_of(tests: Sequence[str], outcomes: Sequence[Any], limit: int = 3) -> str:
    failed = [f"{t}  # {o.error or 'failed'}" for t, o in zip(tests, outcomes) if not o.passed]
    return "\n".join(failed[:limit])


def solve(problem: Problem, llm: LLM, sandbox: Any, budget: Budget,
          config: CollabCoderConfig | None = None) -> Solution:
    """Return the last code of the plan-code co-evolution, its visible tests, the cost, the update counts
    (plan_updates, code_updates, iterations) and the reasoning trajectory as the trace."""
    config = config or CollabCoderConfig()
    session = Session(llm, budget)
    say = lambda prompt: (session.generate(prompt, 1, max_new_tokens=config.text_max_new_tokens) or [""])[0]  # noqa: E731

    tests = doctest_asserts(problem)
    if not tests:   # no examples in the statement: the LLM writes some
        tests = parse_asserts(problem, f"assert {entry(problem)}(" + say(
            f"{problem_code(problem).rstrip()}\n    pass\n\n# check the correctness of {entry(problem)}\n"
            f"assert {entry(problem)}("), config.generated_tests)
    plan = "1." + say(plan_prompt(problem))
    texts = session.generate(code_prompt(problem, code_guidance(plan, tests)), 1, stop=CODE_STOP)
    code = extract_code(problem, texts[0]) if texts else ""
    candidates, trace, trajectory = [code], [{"step": "init", "plan": plan, "code": code}], []
    plan_updates = code_updates = iterations = 0
    solved_visible = False
    for it in range(config.max_iterations + 1):   # the last pass only checks the last revision
        outcomes = run_tests(sandbox, problem, code, tests, config.timeout_s)
        if all(o.passed for o in outcomes):
            solved_visible = True
            break
        if it == config.max_iterations or session.exhausted():
            break
        iterations += 1
        feedback = feedback_of(tests, outcomes)
        analysis = "Plan analysis:" + say(cdm_prompt(problem, plan, code, feedback))
        scores = parse_scores("plan_confidence:" + say(score_prompt(analysis)), config.default_score)
        target = decide(scores, config)
        shown = ""
        if config.use_rt:
            shown = "".join(f"- {r}\n" for r in trajectory[-config.rt_max_entries:])
            trajectory.append(say(rt_prompt(problem, f"Trajectory so far:\n{shown}" if shown else "", analysis,
                                            target, feedback)).strip().split("\n")[0])
            shown = "Lessons so far:\n" + "".join(f"- {r}\n" for r in trajectory[-config.rt_max_entries:]) + "\n"
        if target == "plan":
            plan = "1." + say(plan_refine_prompt(problem, plan, feedback, shown))
            plan_updates += 1
            texts = session.generate(code_prompt(problem, code_guidance(plan, tests)), 1, stop=CODE_STOP)
        else:
            code_updates += 1
            texts = session.generate(code_prompt(problem, patch_guidance(code, feedback, shown)), 1, stop=CODE_STOP)
        if texts:
            code = extract_code(problem, texts[0])
            candidates.append(code)
        trace.append({"step": f"revise_{target}", "scores": scores.__dict__, "feedback": feedback,
                      "analysis": analysis, "trajectory": trajectory[-1] if trajectory else "", "code": code})
    metrics = {"iterations": iterations, "plan_updates": plan_updates, "code_updates": code_updates,
               "visible_tests": len(tests), "solved_visible": solved_visible}
    return Solution(code=code, candidates=candidates, tests=tests, cost=session.cost, metrics=metrics, trace=trace)


def summarize(metrics: Sequence[dict]) -> dict[str, float]:
    """The paper's update rates over a run: updates / debugging iterations, in percent (Table 6)."""
    iterations = sum(m.get("iterations", 0) for m in metrics)
    return {"plan_update_rate_%": 100.0 * sum(m.get("plan_updates", 0) for m in metrics) / max(1, iterations),
            "code_update_rate_%": 100.0 * sum(m.get("code_updates", 0) for m in metrics) / max(1, iterations)}
