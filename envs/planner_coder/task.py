"""The planner+coder Task: a sequential team of two, a shared reward.

Turn 1: the planner (agent 0) answers `planner_prompt` (the problem, a request for at most three numbered steps in
plain English, ending with `Plan:\n1.`); its plan is `"1." + completion`, cut to `planner_coder.plan_max_chars`
(its length is bounded by max_new_tokens too). The coder (agent 1) answers, for each plan, its node prompt (ending
with the problem's code) followed by the plan as comment lines of the body (`    # Plan:`, `    # 1. ...`): the coder
continues the function right after the plan.
Reward (shared, max 2.1): the single-agent code reward of the coder's code (`code_reward.type` hidden_tests, or
self_tests: envs/code_generation/self_tests.py).

Later turns (`num_turns` > 1) give both agents the test feedback of the turn's code (the code task's level feedback
on `external.sandbox_slice` asserts). `planner_coder.revise`:
- `both`: the planner revises its plan with the feedback; the coder revises its code with the feedback (and the new
  plan inserted before its code prefix);
- `decide` (CollabCoder-style: the team's state decides which artifact is revised): when the code is missing (no
  function with a return) or does not parse, the fault is the code's: the coder revises its code with the feedback
  and the planner is asked to restate its plan unchanged; otherwise (it runs, tests may fail) the fault is taken to
  be the plan's: the planner revises its plan with the feedback and the coder writes the function anew from its
  first prompt and the revised plan (its old code is not shown).

Centralized (`collaboration_mode: centralized`, one turn): one model writes the plan as comment lines and then the
code in one answer (`joint_prompt`); `split_joint_answer` cuts it into the two agents' texts and the team's reward
scores it (`cooprl.task.centralized_task`).
"""

from __future__ import annotations

from typing import Any, Sequence

from cooprl.config import ConfigError, Run
from cooprl.task import JointFormat, Score, Task, centralized_task
from envs.code_generation.data import Problem, load_problems
from envs.code_generation.prompts import completion_to_code, problem_code, single_prompt, stop_strings
from envs.code_generation.task import check_single_turn
from envs.code_generation.self_tests import feedback_slice_of, score_functions
from envs.code_generation.transitions import diagnostics, feedback_problem, next_prompt
from envs.planner_coder.demonstrations import planner_coder_demonstrations
from rewards.code_rewards import code_reward

MAX_REWARD = 2.1
PLAN_START = "Plan:\n1."
PLAN_COMMENT = "    # Plan:\n"
PLANNER_STOPS = ("```", "\ndef ", "\nPlan", "\n\n", "\n4.")   # three steps at most


def planner_prompt(problem: Problem) -> str:
    """Return the planner's first prompt: the problem and a request for a short plan, ending with `Plan:\\n1.`."""
    return (f"Problem:\n{problem.prompt.strip(chr(10))}\n\n"
            f"Write a short plan for implementing `{problem.entry_point}`: at most three numbered steps in plain "
            f"English, no code.\n{PLAN_START}")


def plan_text(completion: str, max_chars: int) -> str:
    """Return the plan a planner completion states: `1.` + the completion, its first three non-blank lines, at most
    `max_chars` long."""
    lines = [line.strip() for line in ("1." + (completion or "")).splitlines() if line.strip()]
    return "\n".join(lines[:3])[:max_chars]


def with_plan(problem: Problem, prompt: str, plan: str) -> str:
    """Return the coder's `prompt` (it ends with the problem's code) followed by the plan as comment lines of the
    function's body (`    # Plan:` then `    # <line>`): the coder continues the body right after its plan."""
    lines = [line.strip() for line in plan.splitlines() if line.strip()] or ["(no plan)"]
    return prompt + PLAN_COMMENT + "".join(f"    # {line}\n" for line in lines)


def revise_target(breakdown: Any) -> str:
    """Return what `revise: decide` revises after a turn: `code` when the function is missing or does not parse,
    else `plan`."""
    return "code" if not (breakdown.main_defined and breakdown.syntax_ok) else "plan"


def planner_feedback(problem: Problem, history: Sequence[tuple[str, str]], breakdown: Any, code: str,
                     restate: bool) -> str:
    """Return the planner's next prompt: its last prompt and plan, the feedback on the code written from it, and a
    request to revise the plan (or, `restate`, to write it again unchanged), ending with `Plan:\\n1.`."""
    last_prompt, last_plan = history[-1]
    context = last_prompt[:-len(PLAN_START)] if last_prompt.endswith(PLAN_START) else last_prompt + "\n"
    lines = "\n".join(f"- {line}" if not line.startswith("  ") else line
                      for line in diagnostics(problem, "single", breakdown, code))
    ask = ("The coder will fix the code; write your plan again unchanged." if restate
           else "Revise your plan so that the code passes the tests.")
    return (
        f"{context}Plan:\n1.{last_plan}\n\nFeedback on the code written from your plan:\n{lines}\n{ask}\n{PLAN_START}"
    )


def build_planner_coder_task(run: Run) -> Task:
    """Return the planner+coder Task for `run`'s section and config (ConfigError if it cannot be built)."""
    trainer, section, cfg = run.trainer, run.section, run.config.task
    if section.num_agents != 2:
        raise ConfigError(f"{trainer}.num_agents={section.num_agents}: the planner+coder team has 2 agents")
    if cfg.aux_main.main_sees_aux:
        raise ConfigError("aux_main.main_sees_aux is for the code task's aux+main team, not this one")
    if cfg.code_prompt.open_body:
        raise ConfigError("code_prompt.open_body: the planner+coder's coder prompt already ends inside the function "
                          "(under the plan's comment lines); drop it")
    centralized = section.collaboration_mode == "centralized"
    if centralized:
        check_single_turn(run)
    team, external, max_chars = cfg.planner_coder, cfg.external, cfg.planner_coder.plan_max_chars
    reward_type = cfg.code_reward.type

    def coder_code(problem: Problem, text: str) -> str:
        return completion_to_code("single", problem, text)

    def score(items: Sequence[Problem], joints: Sequence[Sequence[str]]) -> list[Score]:
        return score_functions(items, [coder_code(p, joint[1]) for p, joint in zip(items, joints)], reward_type,
                               feedback_slice=feedback_slice_of(run))

    def follow_prompt(problem: Problem, agent: int, prompt: str, earlier: Sequence[str]) -> str:
        return with_plan(problem, prompt, plan_text(earlier[0], max_chars))

    def next_prompts(problem: Problem, histories: Sequence[Sequence[tuple[str, str]]], joint: Sequence[str],
                     score_: Score) -> list[str]:
        code = coder_code(problem, joint[1])
        breakdown = score_.details[2]
        sliced = feedback_problem(problem, external.sandbox_slice)
        if sliced.test != problem.test:   # the feedback shows (and runs) only the chosen asserts
            breakdown = code_reward(sliced, "", code, single_agent=True)
        target = revise_target(breakdown) if team.revise == "decide" else "both"
        plan_prompt = planner_feedback(problem, histories[0], breakdown, code, restate=target == "code")
        # the coder's history ends with the prompt it answered (its plan appended); the next plan is appended by
        # follow_prompt, so the prompt handed back ends with the bare code prefix
        coder_history = [(_without_plan(problem, p), c) for p, c in histories[1]]
        if target == "plan":
            coder = coder_prompt(problem)
        else:
            coder = next_prompt("level_feedback", problem, "single", coder_history, breakdown,
                                sandbox_slice=external.sandbox_slice)
        return [plan_prompt, coder]

    dataset = cfg.dataset
    task = Task(name=f"planner_coder:{dataset.name}", num_agents=2,
                train_items=load_problems(dataset, dataset.train_split),
                eval_items=load_problems(dataset, dataset.eval_split), item_id=lambda p: p.task_id,
                first_prompts=lambda p: [planner_prompt(p), coder_prompt(p)], score=score, next_prompts=next_prompts,
                max_reward=MAX_REWARD, stop_strings=[PLANNER_STOPS, tuple(stop_strings("single"))],
                follow_prompt=follow_prompt, demonstrations=planner_coder_demonstrations,
                joint_format=JointFormat(joint_prompt, split_joint_answer, tuple(stop_strings("single"))))
    return centralized_task(task) if centralized else task


def joint_prompt(problem: Problem) -> str:
    """Return the centralized prompt (one model plans and codes): the function, its plan first as comment lines;
    it ends with the problem's code and `    # Plan:` / `    # 1.`."""
    return (f"Implement the function `{problem.entry_point}` below: first a plan of at most three numbered steps in "
            f"plain English as comment lines, then the code. Write only the Python code, no explanation, no tests."
            f"\n\n{problem_code(problem)}{PLAN_COMMENT}    # 1.")


def split_joint_answer(problem: Problem, answer: str) -> list[str]:
    """Return [planner text, coder text] of a centralized answer: its leading comment lines are the plan (in the
    planner's form: the text after `1.`), the rest is the function body the code reward scores."""
    lines = ("    # 1." + (answer or "")).splitlines(keepends=True)
    k = 0
    while k < len(lines) and (not lines[k].strip() or lines[k].lstrip().startswith("#")):
        k += 1
    plan = "\n".join(line.strip().lstrip("#").strip() for line in lines[:k] if line.strip())
    return [plan[len("1."):], "".join(lines[k:])]


def coder_prompt(problem: Problem) -> str:
    """Return the coder's node prompt: implement the function following the plan (appended as comments by
    `with_plan`), code only; it ends with the problem's code."""
    return single_prompt(problem).replace(f"Implement the function `{problem.entry_point}` below.",
                                          f"Implement the function `{problem.entry_point}` below, following the plan.")


def _without_plan(problem: Problem, prompt: str) -> str:
    """Return a coder prompt without the plan comments `with_plan` appended (it ends with the code prefix again)."""
    at = prompt.rfind(PLAN_COMMENT)
    return prompt if at < 0 else prompt[:at]
