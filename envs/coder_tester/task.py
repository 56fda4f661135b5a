"""The coder+tester Task: agent 0 writes the function, agent 1 writes unit tests; they act at once.

The coder answers the single-agent code prompt (it ends with the problem's code). The tester answers
`tester_prompt`, which ends with `assert <entry>(`: its tests are the first `coder_tester.max_tests` one-line asserts
calling the entry point in `assert <entry>(` + its completion (`rewards.self_tests.generated_asserts`). Generated
tests run in the sandbox as untrusted code (`TestSuite(trusted=False)`).

Rewards of joint action k of a node (its group: the node's G joint actions, consecutive in the scoring batch):
    coder_k  = the single-agent code reward of the coder's code (max 2.1): hidden tests, or with
               `code_reward.type: self_tests` its support among the problem's examples and every tester test of the
               group, weighted by reliability (rewards/self_tests.py); no hidden verdict then.
    tester_k = mean over its tests t of   0.5 + 0.5 * kill(t)  when the reference solution passes t,
                                          -1                   when the reference fails t,
               kill(t) = share of the group's wrong codes (codes that parse and fail some hidden test) that fail t
               (0 when the group has none); 0 when it wrote no test or the problem has no reference solution
               (HumanEval's canonical_solution, the coop set's reference_aux + reference_main). Range [-1, 1]. The
               tester's reward always uses the reference and the hidden verdicts: ground truth, never shown.
`reward_sharing: shared`: both agents are trained on total = coder_k + tester_k (max 3.1).
`reward_sharing: individual`: Score.agent_rewards = [coder_k, tester_k] (each agent its own; total as in shared, for
the logs and early termination). MADPO and MARLHF refuse it; MAAC takes it single-turn only (cooprl/ says why).
Later turns: the coder gets the code task's level feedback, the tester how many of its tests the reference passed
and how many wrong codes they caught.
Centralized (`collaboration_mode: centralized`, one turn, shared reward): one model writes the function and then its
asserts in one answer (`joint_prompt`); `split_joint_answer` cuts it into the coder's and the tester's texts, scored
as above (`cooprl.task.centralized_task`). The group of a node is then the one model's G answers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from cooprl.config import Config, ConfigError
from cooprl.task import JointFormat, Score, Task, centralized_task
from envs.code_generation.data import Problem
from envs.code_generation.prompts import completion_to_code, problem_code, single_prompt, stop_strings
from envs.code_generation.task import check_single_turn, task_problems
from envs.code_generation.self_tests import groups, score_functions
from envs.code_generation.transitions import feedback_problem, next_prompt
from envs.coder_tester.demonstrations import coder_tester_demonstrations
from rewards.code_rewards import code_reward
from rewards.sandbox import default_sandbox
from rewards.self_tests import discrimination_reward, generated_asserts, reference_code, untrusted_suite

CODER_MAX, TESTER_MAX = 2.1, 1.0
TESTER_STOPS = ("```", "\ndef ", "\n\n\n", "\nprint(")
JOINT_STOPS = ("\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\n```", "\n\n\n")   # the code's, but asserts go on


@dataclass
class TesterVerdict:
    """What the tester's tests did: the tests, the reference's pass row, each wrong code's pass row."""

    tests: list[str]
    reference_row: list[int]
    wrong_rows: list[list[int]]
    has_reference: bool

    @property
    def reward(self) -> float:
        """Return the tester's reward (module docstring); 0 without a reference."""
        return discrimination_reward(self.reference_row, self.wrong_rows) if self.has_reference else 0.0


def tester_prompt(problem: Problem, max_tests: int) -> str:
    """Return the tester's prompt: the problem and a request for one-line asserts; ends with `assert <entry>(`."""
    entry = problem.entry_point
    return (f"Problem:\n{problem.prompt.strip(chr(10))}\n\n"
            f"Write {max_tests} unit tests for `{entry}`, one per line, each of the form "
            f"`assert {entry}(...) == expected`. Cover edge cases. Write only the asserts.\n"
            f"assert {entry}(")


def tester_tests(problem: Problem, completion: str, max_tests: int) -> list[str]:
    """Return the tests of a tester completion: the asserts of `assert <entry>(` + completion (at most max_tests)."""
    return generated_asserts(problem.entry_point, f"assert {problem.entry_point}(" + (completion or ""), max_tests)


def is_wrong(score: Score) -> bool:
    """Return whether a coder's code counts as wrong for the tester: it parses and fails some hidden test."""
    b = score.details[2]
    return bool(b.syntax_ok and b.tests_total and b.tests_passed < b.tests_total)


def tester_verdicts(items: Sequence[Problem], codes: Sequence[str], coder_scores: Sequence[Score],
                    tests: Sequence[list[str]]) -> list[TesterVerdict]:
    """Return each joint action's TesterVerdict: its tests run (untrusted) on the reference and on its group's
    wrong codes, every group's runs in one sandbox batch."""
    jobs, plans = [], []
    for run in groups(items):
        problem = items[run.start]
        reference = reference_code(problem)
        wrong = [codes[k] for k in run if is_wrong(coder_scores[k])]
        for k in run:
            if reference is None or not tests[k]:
                plans.append((k, 0, reference is not None))
                continue
            suite = untrusted_suite(problem, tests[k])
            jobs += [(program, suite, 2.0, 2) for program in [reference] + wrong]
            plans.append((k, 1 + len(wrong), True))
    outcomes = default_sandbox().run_many(jobs) if jobs else []
    verdicts, at = [], 0
    for k, width, has_reference in plans:
        rows = [[int(o.passed) for o in outcomes[at + i]] for i in range(width)]
        at += width
        verdicts.append(TesterVerdict(tests[k], rows[0] if rows else [], rows[1:], has_reference))
    return verdicts


def tester_metrics(verdict: TesterVerdict) -> dict[str, float]:
    """Return the tester's numbers for the logs: tests written, share the reference passes, mean kill of those."""
    n = len(verdict.tests)
    valid = [j for j, ok in enumerate(verdict.reference_row) if ok]
    kills = [sum(1 for row in verdict.wrong_rows if not row[j]) / len(verdict.wrong_rows)
             for j in valid] if verdict.wrong_rows else []
    return {"tester_reward": verdict.reward, "tests_written": float(n),
            "tests_valid": len(valid) / n if n and verdict.reference_row else 0.0,
            "tests_kill": sum(kills) / len(kills) if kills else 0.0,
            "tester_no_reference": float(not verdict.has_reference)}


def build_coder_tester_task(config: Config, trainer: str) -> Task:
    """Return the coder+tester Task for `trainer`'s section of `config` (ConfigError if it cannot be built)."""
    section, cfg = config.trainer(trainer), config.task
    if section.num_agents != 2:
        raise ConfigError(f"{trainer}.num_agents={section.num_agents}: the coder+tester team has 2 agents")
    if cfg.aux_main.main_sees_aux:
        raise ConfigError("aux_main.main_sees_aux is for the code task's aux+main team, not this one")
    team, external, reward_type = cfg.coder_tester, cfg.external, cfg.code_reward.type
    individual = team.reward_sharing == "individual"
    centralized = getattr(section, "collaboration_mode", "decentralized") == "centralized"
    if centralized:
        check_single_turn(section, trainer)
        if individual:
            raise ConfigError(f"{trainer}.collaboration_mode=centralized: one model writes both parts and is trained "
                              f"on one reward; set coder_tester.reward_sharing=shared")

    def parts(problem: Problem, joint: Sequence[str]) -> tuple[str, list[str]]:
        return completion_to_code("single", problem, joint[0]), tester_tests(problem, joint[1], team.max_tests)

    def score(items: Sequence[Problem], joints: Sequence[Sequence[str]]) -> list[Score]:
        codes, tests = zip(*(parts(p, joint) for p, joint in zip(items, joints))) if joints else ((), ())
        coder = score_functions(items, list(codes), reward_type, group_tests=list(tests))
        verdicts = tester_verdicts(items, list(codes), coder, list(tests))
        out = []
        for c, v in zip(coder, verdicts):
            t = v.reward
            total = round(c.total + t, 6)
            metrics = {**c.metrics, **tester_metrics(v), "coder_reward": c.total}
            out.append(Score(total, metrics, c.success, details=(c.details, v),
                             agent_rewards=[c.total, t] if individual else None))
        return out

    def next_prompts(problem: Problem, histories: Sequence[Sequence[tuple[str, str]]], joint: Sequence[str],
                     score_: Score) -> list[str]:
        (_, code, breakdown), verdict = score_.details
        sliced = feedback_problem(problem, external.sandbox_slice)
        if sliced.test != problem.test:   # the feedback shows (and runs) only the chosen asserts
            breakdown = code_reward(sliced, "", code, single_agent=True)
        coder = next_prompt("level_feedback", problem, "single", list(histories[0]), breakdown,
                            sandbox_slice=external.sandbox_slice)
        return [coder, tester_feedback(problem, histories[1], verdict)]

    dataset = cfg.dataset
    task = Task(name=f"coder_tester:{dataset.name}", num_agents=2,
                train_items=task_problems(cfg, dataset.train_split),
                eval_items=task_problems(cfg, dataset.eval_split), item_id=lambda p: p.task_id,
                first_prompts=lambda p: [single_prompt(p), tester_prompt(p, team.max_tests)], score=score,
                next_prompts=next_prompts, max_reward=CODER_MAX + TESTER_MAX,
                stop_strings=[tuple(stop_strings("single")), TESTER_STOPS], agent_rewards=individual,
                demonstrations=lambda p: coder_tester_demonstrations(p, team.max_tests),
                joint_format=JointFormat(lambda p: joint_prompt(p, team.max_tests), split_joint_answer, JOINT_STOPS))
    return centralized_task(task) if centralized else task


def joint_prompt(problem: Problem, max_tests: int) -> str:
    """Return the centralized prompt (one model codes and tests): the function, then one-line asserts after it; it
    ends with the problem's code."""
    entry = problem.entry_point
    return (f"Implement the function `{entry}` below, then write {max_tests} unit tests for it after the function, "
            f"one per line, each of the form `assert {entry}(...) == expected`. Write only the Python code, no "
            f"explanation.\n\n{problem_code(problem)}")


def split_joint_answer(problem: Problem, answer: str) -> list[str]:
    """Return [coder text, tester text] of a centralized answer: the function body up to the first column-0
    `assert `, and the asserts from there (the tester's text continues its prompt's `assert <entry>(`: a leading
    newline leaves that line unparseable, so only the answer's own asserts count)."""
    start = re.search(r"^assert ", answer or "", re.MULTILINE)
    if start is None:
        return [answer or "", ""]
    return [answer[:start.start()], "\n" + answer[start.start():]]


def tester_feedback(problem: Problem, history: Sequence[tuple[str, str]], verdict: TesterVerdict) -> str:
    """Return the tester's next prompt: its last prompt and tests, what they did, and a request for better tests
    (ending with `assert <entry>(` again)."""
    last_prompt, _ = history[-1]
    start = f"assert {problem.entry_point}("
    context = last_prompt[:-len(start)] if last_prompt.endswith(start) else last_prompt + "\n"
    n, valid = len(verdict.tests), sum(verdict.reference_row)
    caught = sum(1 for row in verdict.wrong_rows if not all(row))
    said = "\n".join(verdict.tests) or "(no test)"
    return (f"{context}{said}\n\nFeedback: {valid} of your {n} tests accept a correct solution; "
            f"they catch {caught} of {len(verdict.wrong_rows)} wrong solutions. Write the tests again, fixing wrong "
            f"expected values and adding tests that catch mistakes.\n{start}")
