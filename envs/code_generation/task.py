"""The code-generation task for the trainers: problems, role prompts, the sandboxed reward, transitions.

`build_code_task(run)` reads the run's trainer section and returns one of two tasks:
- decentralized (default): one policy per role. Two agents are [aux, main]; one agent is [single] (the
  GRPO/AC baselines). Every completion is turned back into code with the role's prefix (the prompt ends
  with the start of the code), scored by `rewards.code_rewards` in parallel, and, between turns, turned into
  the next prompt by `transitions.next_prompt` in the configured `external.mode`.
- centralized (`collaboration_mode: centralized`): ONE policy plays both roles, so the Task has
  `num_agents=1`. Its single joint answer holds `<auxiliary>...</auxiliary>` and `<main>...</main>`;
  `parse_joint_answer` splits it and the two-agent reward scores the parts (max 4.0), with the same metrics
  as decentralized plus how the parse went. Single-turn.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from cooprl.config import ConfigError, Run
from cooprl.task import Score, Task, no_next_turn
from envs.code_generation.comparator import api_client, code_joint_format
from envs.code_generation.demonstrations import code_demonstrations
from envs.code_generation.data import Problem, load_problems
from envs.code_generation.prompts import (JointAnswer, agent_prompts, open_body, centralized_prompt,
                                          centralized_stop_strings,
                                          completion_to_code, parse_joint_answer, stop_strings, with_aux_code)
from envs.code_generation.scoring import score_code_pairs
from envs.code_generation.self_tests import feedback_slice_of, score_functions
from envs.code_generation.transitions import feedback_problem, make_expert_client, next_prompt
from rewards.code_rewards import code_rewards_batch

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


def parse_metrics(answer: JointAnswer) -> dict[str, float]:
    """Return how a joint answer was split, as 0/1 numbers (averaged into rates in the logs).

    `parse_fallback`: some part came from a fallback (labels, fenced blocks, function name) instead of its
    tag; `parse_missing_aux` / `parse_missing_main`: that part was found nowhere and was scored as empty.
    """
    return {"parse_fallback": float(answer.used_fallback), "parse_missing_aux": float(not answer.aux),
            "parse_missing_main": float(not answer.main)}


def score_joint_answers(items: Sequence[Problem], answers: Sequence[str], answer_style: str = "open",
                        prompt_style: str = "concat", cooperation: str = "seed") -> list[Score]:
    """Return the Score of each joint answer (one text holding aux and main) for its problem.

    The answer is split by `parse_joint_answer` (`answer_style` "bounded" when its prompt ended with the start
    of the answer, `centralized_answer_prefix(prompt_style, answer_style)`) and scored with the two-agent reward
    (max 4.0) in one sandbox batch. A part the parser cannot find is scored as empty; `parse_metrics` says how
    the split went.
    """
    parsed = [parse_joint_answer(text, problem, answer_style, prompt_style) for problem, text in zip(items, answers)]
    scores = score_code_pairs(items, [(p.aux, p.main) for p in parsed], single_agent=False, cooperation=cooperation)
    for score, joint in zip(scores, parsed):
        score.metrics.update(parse_metrics(joint))
    return scores


def check_section(run: Run) -> None:
    """Raise ConfigError when `run`'s section asks for what the code task cannot do."""
    trainer, section = run.trainer, run.section
    if section.num_agents not in MAX_REWARD:
        raise ConfigError(f"{trainer}.num_agents={section.num_agents}: the code task has 1 agent (single) "
                          f"or 2 agents (aux, main)")
    if section.collaboration_mode != "centralized":
        return
    if section.num_agents != 2:
        raise ConfigError(f"{trainer}.collaboration_mode=centralized: one model plays the two roles (aux, main), "
                          f"so {trainer}.num_agents must be 2, got {section.num_agents}")
    check_single_turn(run)


def check_single_turn(run: Run) -> None:
    """Raise ConfigError unless `run`'s section plays one turn (what centralized collaboration needs)."""
    trainer, section = run.trainer, run.section
    if section.num_turns != 1:
        raise ConfigError(f"{trainer}.collaboration_mode=centralized is single-turn: set {trainer}.num_turns=1 "
                          f"(got {section.num_turns})")


def build_code_task(run: Run) -> Task:
    """Return the code-generation Task for `run`'s section and config (ConfigError if it cannot be built).

    `task.num_agents` is the number of policies to train: one per role when decentralized, one in all when
    centralized. Trainers size their team from it.
    """
    check_section(run)
    if run.section.collaboration_mode == "centralized":
        return _centralized_task(run)
    return _decentralized_task(run)


def task_problems(cfg: Any, split: str) -> list[Problem]:
    """Return the problems of `split` as the code prompts see them: the dataset's (`cfg` is the config's task
    sections), each prompt ending inside its function when `code_prompt.open_body` is set (prompts.open_body)."""
    problems = load_problems(cfg.dataset, split)
    return [open_body(p) for p in problems] if cfg.code_prompt.open_body else problems


def _code_task(run: Run, **parts: Any) -> Task:
    # what both modes share: the problems, the task's name, the problem id for logs, and what the preference
    # trainers' comparators need (the joint answer of one model for both roles, the API client)
    config = run.config
    dataset = config.task.dataset
    reward = config.task.code_reward
    label = f"code reward: {reward.type}, cooperation {reward.cooperation}, at most {parts['max_reward']:g}"
    return Task(name=f"code:{dataset.name}", train_items=task_problems(config.task, dataset.train_split),
                eval_items=task_problems(config.task, dataset.eval_split), item_id=lambda p: p.task_id,
                joint_format=code_joint_format(run.section), api_client=api_client, reward_label=label, **parts)


def _decentralized_task(run: Run) -> Task:
    config = run.config
    roles = roles_for(run.section.num_agents)
    single = len(roles) == 1
    external = config.task.external
    try:
        expert = make_expert_client(external.expert_model) if external.mode == "expert_edits" else None
    except ValueError as err:   # before any model loads: a traceback after them was the old way
        raise ConfigError(f"external.mode=expert_edits: the expert model {external.expert_model!r} (external."
                          f"expert_model, an OpenAI-compatible chat API) has {err}; or use external.mode="
                          f"level_feedback, which needs no API") from None

    reward_type, cooperation = config.task.code_reward.type, config.task.code_reward.cooperation
    feedback_slice = feedback_slice_of(run)   # the asserts later turns show leave the self-tests' held-out pool
    if reward_type == "self_tests" and not single:
        raise ConfigError("code_reward.type=self_tests scores one function (a single agent): the aux/main team's "
                          "cooperation bonus needs hidden-test verdicts; use num_agents 1 or hidden_tests")

    def score(items: Sequence[Problem], joints: Sequence[Sequence[str]]) -> list[Score]:
        codes = [joint_code(problem, roles, joint) for problem, joint in zip(items, joints)]
        if reward_type == "self_tests":
            return score_functions(items, [main for _, main in codes], reward_type, feedback_slice=feedback_slice)
        scores = score_code_pairs(items, codes, single, cooperation)
        if external.mode == "level_feedback":
            scores = with_feedback_scores(items, codes, scores, external.sandbox_slice, single)
        return scores

    def next_prompts(problem: Problem, histories: Sequence[Sequence[tuple[str, str]]], joint: Sequence[str],
                     score_: Score) -> list[str]:
        aux, main, breakdown = score_.details[:3]
        if len(score_.details) > 3:   # the feedback's own run: the asserts it shows (`with_feedback_scores`)
            breakdown = score_.details[3]
        partner = {"aux": main, "main": aux, "single": ""}  # shown to the expert only, never to the agents
        return [next_prompt(external.mode, problem, role, list(history), breakdown, expert_client=expert,
                            sandbox_slice=external.sandbox_slice, passthrough=external.external_prompt_passthrough,
                            partner_code=partner[role])
                for role, history in zip(roles, histories)]

    def main_reads_aux(problem: Problem, agent: int, prompt: str, earlier: Sequence[str]) -> str:
        return with_aux_code(prompt, completion_to_code("aux", problem, earlier[0]))

    sequential = config.task.aux_main.main_sees_aux
    if sequential and single:
        raise ConfigError("aux_main.main_sees_aux needs the aux+main team (num_agents 2)")
    return _code_task(run, num_agents=len(roles), first_prompts=lambda p: agent_prompts(p, len(roles)),
                      score=score, next_prompts=next_prompts, max_reward=MAX_REWARD[len(roles)],
                      stop_strings=[tuple(stop_strings(role)) for role in roles],
                      follow_prompt=main_reads_aux if sequential else None,
                      demonstrations=lambda p: code_demonstrations(p, len(roles)))


def with_feedback_scores(items: Sequence[Problem], codes: Sequence[tuple[str, str]], scores: Sequence[Score],
                         sandbox_slice: Any, single: bool) -> list[Score]:
    """`scores` with the breakdown of the asserts level feedback shows and runs appended to each one's details,
    where the slice drops some: all of a turn's pairs in one sandbox batch, inside the task's scoring (its guard,
    `cooprl.task.SafeScore`), and without the cooperation probes (seed mode: the feedback reports the levels and the
    tests, and a one-assert slice cannot show what aux does)."""
    sliced = [feedback_problem(problem, sandbox_slice) for problem in items]
    redo = [i for i, (problem, cut) in enumerate(zip(items, sliced)) if cut.test != problem.test]
    out = list(scores)
    if redo:
        breakdowns = code_rewards_batch([sliced[i] for i in redo], [codes[i][0] for i in redo],
                                        [codes[i][1] for i in redo], single_agent=single, cooperation="seed")
        for i, b in zip(redo, breakdowns):
            out[i] = dataclasses.replace(out[i], details=tuple(out[i].details) + (b,))
    return out


def _centralized_task(run: Run) -> Task:
    style, answer_style = run.section.centralized_prompt, run.section.centralized_answer
    cooperation = run.config.task.code_reward.cooperation

    def score(items: Sequence[Problem], joints: Sequence[Sequence[str]]) -> list[Score]:
        return score_joint_answers(items, [joint[0] for joint in joints], answer_style, style,  # the one policy's
                                   cooperation)

    return _code_task(run, num_agents=1, first_prompts=lambda p: [centralized_prompt(p, style, answer_style)],
                      score=score, next_prompts=no_next_turn, max_reward=MAX_REWARD[2],
                      stop_strings=[tuple(centralized_stop_strings(answer_style))])
