"""The code-generation task for the trainers: problems, role prompts, the sandboxed reward, transitions.

Roles: two agents are [aux, main]; one agent is [single] (the GRPO/AC baselines). Every completion is
turned back into code with the role's prefix (the prompt ends with the start of the code), scored by
`rewards.code_rewards.code_reward` in parallel, and, between turns, turned into the next prompt by
`transitions.next_prompt` in the configured `external.mode`.
"""

from __future__ import annotations

from typing import Any, Sequence

from cooprl.config import Config
from cooprl.task import Score, Task
from envs.code_generation.data import Problem, load_problems
from envs.code_generation.prompts import agent_prompts, completion_to_code, stop_strings
from envs.code_generation.transitions import feedback_problem, make_expert_client, next_prompt
from rewards.code_rewards import code_reward, code_rewards_batch

MAX_REWARD = {2: 4.0, 1: 2.1}


def roles_for(num_agents: int) -> list[str]:
    """Return the role of each agent: ['aux', 'main'] for two, ['single'] for one."""
    if num_agents not in MAX_REWARD:
        raise ValueError(f"the code task has 1 agent (single) or 2 agents (aux, main), not {num_agents}")
    return ["aux", "main"] if num_agents == 2 else ["single"]


def joint_code(problem: Problem, roles: Sequence[str], completions: Sequence[str]) -> tuple[str, str]:
    """Return (aux code, main code) of a joint completion; aux is '' for a single agent."""
    codes = {role: completion_to_code(role, problem, text) for role, text in zip(roles, completions)}
    return codes.get("aux", ""), codes.get("main", codes.get("single", ""))


def breakdown_metrics(b: Any, single_agent: bool) -> dict[str, float]:
    """Return the reward's levels and cooperation statistics as numbers for the logs."""
    level1 = 0.6 * b.main_defined + (0.0 if single_agent else 0.4 * b.aux_defined)
    level2 = 0.5 * b.syntax_ok
    pass_rate = b.tests_passed / b.tests_total if b.tests_total else 0.0
    metrics = {"level1_definitions": level1, "level2_syntax": level2, "level3_tests": pass_rate if b.syntax_ok else 0.0,
               "pass_rate": pass_rate, "syntax_ok": float(b.syntax_ok), "main_defined": float(b.main_defined),
               "timeouts": float(b.timeouts)}
    if not single_agent:
        metrics.update(aux_defined=float(b.aux_defined), uses_aux=float(b.uses_aux),
                       thin_wrapper=float(b.uses_aux and not b.not_wrapper),
                       ignored_aux_return=float(b.ignored_aux_return),
                       cooperation_bonus=b.total - level1 - level2 - metrics["level3_tests"])
    return metrics


def build_code_task(config: Config, trainer: str) -> Task:
    """Return the code-generation Task for `trainer`'s section of `config`."""
    section = config.trainer(trainer)
    roles = roles_for(section.num_agents)
    single = len(roles) == 1
    train_items = load_problems(config.dataset, config.dataset.train_split)
    eval_items = load_problems(config.dataset, config.dataset.eval_split)
    external = config.external
    expert = make_expert_client(external.expert_model) if external.mode == "expert_edits" else None

    def score(items: Sequence[Problem], joints: Sequence[Sequence[str]]) -> list[Score]:
        codes = [joint_code(problem, roles, joint) for problem, joint in zip(items, joints)]
        breakdowns = code_rewards_batch(items, [c[0] for c in codes], [c[1] for c in codes], single_agent=single)
        return [Score(b.total, breakdown_metrics(b, single), b.tests_total > 0 and b.tests_passed == b.tests_total,
                      details=(aux, main, b)) for (aux, main), b in zip(codes, breakdowns)]

    def next_prompts(problem: Problem, histories: Sequence[Sequence[tuple[str, str]]], joint: Sequence[str],
                     score_: Score) -> list[str]:
        aux, main, breakdown = score_.details
        if external.mode == "level_feedback":
            # the feedback shows (and runs) only the chosen asserts; re-score only when some were dropped
            sliced = feedback_problem(problem, external.sandbox_slice)
            if sliced.test != problem.test:
                breakdown = code_reward(sliced, aux, main, single_agent=single)
        partner = {"aux": main, "main": aux, "single": ""}  # shown to the expert only, never to the agents
        return [next_prompt(external.mode, problem, role, list(history), breakdown, expert_client=expert,
                            sandbox_slice=external.sandbox_slice, passthrough=external.external_prompt_passthrough,
                            partner_code=partner[role])
                for role, history in zip(roles, histories)]

    return Task(name=f"code:{config.dataset.name}", num_agents=len(roles), train_items=train_items,
                eval_items=eval_items, first_prompts=lambda p: agent_prompts(p, len(roles)), score=score,
                next_prompts=next_prompts, max_reward=MAX_REWARD[len(roles)],
                stop_strings=[tuple(stop_strings(role)) for role in roles], item_id=lambda p: p.task_id)
