"""What a task (environment) hands the trainers: items, prompts, a reward, and the transition between turns.

The library knows nothing about code: the code-generation environment builds a `Task` from plain callables,
and a new task needs no change in `cooprl/`.
"""

from __future__ import annotations

import logging
import traceback
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

logger = logging.getLogger(__name__)


@dataclass
class Score:
    """The reward of one joint action, with what the logs and the next turn need to know about it.

    `total` is the team's reward: logs, early termination, evaluation and the preference trainers read it.
    `agent_rewards` (None: every agent is trained on `total`, a shared reward) gives each agent its own raw reward,
    in agent order, for a general-sum team: the rollout processes and returns each one, and MAGRPO and the
    actor-critics train each agent on its own. A task that fills it declares `Task.agent_rewards`.
    """

    total: float                                  # raw task reward (before the reward processor)
    metrics: dict[str, float] = field(default_factory=dict)   # numeric parts, averaged in the logs
    success: bool = False                         # solved (counts for pass@k)
    details: Any = None                           # task-private (e.g. the reward breakdown for feedback)
    agent_rewards: list[float] | None = None      # per agent raw rewards (None: shared, each agent gets `total`)
    error: str = ""                               # why scoring it raised ('' when it was scored): `SafeScore`


# first_prompts(item) -> one prompt per agent
FirstPrompts = Callable[[Any], list[str]]
# score(items, joint_completions) -> one Score per (item, joint completion); joint_completions[k][agent] is text.
# The rollout lists the joint actions of one node together, in a row, with the same item object: a reward that
# needs a node's whole group (its G samples, e.g. an execution matrix of codes against generated tests) groups
# consecutive entries whose item `is` the same object.
ScoreBatch = Callable[[Sequence[Any], Sequence[Sequence[str]]], list[Score]]
# (model name, max new tokens, base_url=..., api_key=...) -> client(messages) -> reply text (None: the URL and key
# from the environment); what an API comparator of the preference trainers talks to
ApiClientFactory = Callable[..., Callable[[list[dict]], str]]


@dataclass
class JointFormat:
    """How one model answers for every role at once: the joint prompt and how its answer splits into the roles'
    texts (a centralized comparator of the preference trainers writes such answers)."""

    prompt: Callable[[Any], str]               # item -> the joint prompt
    split: Callable[[Any, str], list[str]]     # (item, joint answer) -> one completion text per policy
    stop_strings: tuple[str, ...] = ()


# next_prompts(item, histories, joint_completion, score) -> one prompt per agent for the next turn, where
# histories[agent] is that agent's own list of (prompt, completion) pairs, the current turn's included
NextPrompts = Callable[[Any, Sequence[Sequence[tuple[str, str]]], Sequence[str], Score], list[str]]


# follow_prompt(item, agent, node prompt, texts of agents 0..agent-1 in this joint action) -> that agent's prompt:
# a sequential team, where agent a > 0 answers after (and sees) its predecessors, e.g. a coder after a planner
FollowPrompt = Callable[[Any, int, str, Sequence[str]], str]


# demonstrations(item) -> the completion each agent should write to its first prompt (agent a > 0 of a sequential team:
# after the earlier agents' demonstrated texts), built from the item's reference solution; None when it has none
Demonstrate = Callable[[Any], "list[str] | None"]


@dataclass
class Task:
    """Everything a trainer needs from an environment."""

    name: str
    num_agents: int
    train_items: list[Any]
    eval_items: list[Any]
    first_prompts: FirstPrompts
    score: ScoreBatch
    next_prompts: NextPrompts
    max_reward: float                                      # largest raw reward (default reward shift = -max)
    stop_strings: list[tuple[str, ...]] = field(default_factory=list)   # per agent; may be empty
    item_id: Callable[[Any], str] = str                    # for logs and preference files
    joint_format: JointFormat | None = None                # one model answering for every role (None: the task
                                                           # has no joint answer; centralized comparators refuse)
    api_client: ApiClientFactory | None = None             # the chat client of an API comparator (None: refused)
    agent_rewards: bool = False                            # scores may carry per-agent rewards (Score.agent_rewards);
                                                           # trainers that rank joint answers by one number refuse it
    follow_prompt: FollowPrompt | None = None              # a sequential team (None: the agents act at once)
    demonstrations: Demonstrate | None = None               # what each agent should answer (supervised fine-tuning;
                                                           # None: the task has no reference answers)
    reward_label: str = ""                                 # the reward in a few words, for the run's start-up
                                                           # summary ("": the task's name and max_reward)

    def __post_init__(self) -> None:
        # the one guard of every trainer's reward, however the task was built (`replace` included): a joint action
        # whose scoring raises scores 0 with a logged reason, and the run goes on
        if not isinstance(self.score, SafeScore):
            self.score = SafeScore(self.score)


def shared_items(task: Task) -> list[str]:
    """Return the ids (`task.item_id`) of the eval items that are training items too (overlapping splits), in eval
    order."""
    trained = {task.item_id(item) for item in task.train_items}
    return [task.item_id(item) for item in task.eval_items if task.item_id(item) in trained]


def all_first_prompts(task: Task) -> list[str]:
    """Return every agent's first prompt of every train and eval item of `task` (what bounds a run's prompts in its
    memory plan)."""
    return [prompt for item in (*task.train_items, *task.eval_items) for prompt in task.first_prompts(item)]


def no_next_turn(*args: Any) -> list[str]:
    """The `next_prompts` of a centralized (one-policy) task: it is single-turn, so asking for a next turn raises."""
    raise RuntimeError("centralized collaboration is single-turn: there is no next prompt")


def centralized_task(team: Task) -> Task:
    """Return the one-policy version of `team` (centralized collaboration): one model answers the team's
    `joint_format` prompt for every agent at once; its answer is split into the agents' texts and scored by the team's
    own `score`, so both modes share one reward. Single-turn (a joint answer has no per-agent history to continue);
    per-agent rewards fold into the total (one policy, one reward). ValueError when `team` has no joint format."""
    joint = team.joint_format
    if joint is None:
        raise ValueError(f"task {team.name!r} has no joint answer format, so it has no centralized mode")

    def score(items: Sequence[Any], joints: Sequence[Sequence[str]]) -> list[Score]:
        scores = team.score(items, [joint.split(item, answer[0]) for item, answer in zip(items, joints)])
        return [replace(s, agent_rewards=None) for s in scores]

    return replace(team, num_agents=1, first_prompts=lambda item: [joint.prompt(item)], score=score,
                   next_prompts=no_next_turn, stop_strings=[tuple(joint.stop_strings)], agent_rewards=False,
                   follow_prompt=None, demonstrations=None)


class SafeScore:
    """A task's reward (`ScoreBatch`) that no joint action can make raise: one whose scoring raises gets a zero
    reward, `Score(0.0, error=why)`, logged, and no next turn (its branch of the tree ends there). Every score
    carries the metric `reward_errors` (1.0 for such a one, else 0.0), which the logs sum per turn. `Task` wraps
    its `score` in one, so every trainer's reward is guarded, whoever built the task.

    The whole batch is scored at once, as the task expects. Only when that raises is it scored again node group by
    node group (the consecutive entries with the same item object: a reward may need a node's whole group), and a
    group that raises sample by sample to find the joint actions that raise alone; the group is then scored once
    more with their texts emptied, so that the others keep their group. A group where no sample raises alone, or
    that still raises, is wholly zero (every sample with the reason). A reward that raises on an empty answer too is
    broken, whatever the completions: its error is raised."""

    def __init__(self, score: ScoreBatch):
        self.raw = score

    def __call__(self, items: Sequence[Any], joints: Sequence[Sequence[str]]) -> list[Score]:
        """Return one Score per joint action (see the class doc)."""
        try:
            scores = list(self.raw(items, joints))
        except Exception:   # noqa: BLE001 - one completion must not end a run; found and logged per sample below
            if not joints or self._broken(items[0], len(joints[0])):
                raise
            scores = [score for run in node_groups(items)
                      for score in self._score_group(items[run.start], [joints[k] for k in run])]
        for score in scores:
            score.metrics = {**score.metrics, "reward_errors": float(bool(score.error))}
        return scores

    def _broken(self, item: Any, num_texts: int) -> bool:
        """Return whether the reward itself is broken: it raises on an empty answer too (an executor that is down,
        a bug), which no completion caused: the run must stop then, not train on zeros."""
        try:
            self.raw([item], [[""] * num_texts])
        except Exception:   # noqa: BLE001
            return True
        return False

    def _score_group(self, item: Any, joints: list[Sequence[str]]) -> list[Score]:
        """Return the scores of one node group, whose joint actions all answer `item` (see the class doc)."""
        items = [item] * len(joints)
        try:
            return list(self.raw(items, joints))
        except Exception as e:   # noqa: BLE001
            group_error = _describe(e)
        errors = {}
        for k, joint in enumerate(joints):
            try:
                self.raw([item], [joint])
            except Exception as e:   # noqa: BLE001
                errors[k] = _describe(e)
        scores = None
        if errors:
            try:
                scores = list(self.raw(items, [[""] * len(joint) if k in errors else joint
                                               for k, joint in enumerate(joints)]))
            except Exception as e:   # noqa: BLE001
                group_error = _describe(e)
        if scores is None:
            errors = {k: errors.get(k, f"its group's reward raised {group_error}") for k in range(len(joints))}
            scores = [Score(0.0) for _ in joints]
        for k, why in errors.items():
            logger.warning("the reward of joint action %d of %.80r raised; it scores 0: %s", k, item, why)
            scores[k] = Score(0.0, error=why)
        return scores


def node_groups(items: Sequence[Any]) -> list[range]:
    """Return the runs of consecutive entries whose item is the same object (one node's joint actions)."""
    runs, start = [], 0
    for k in range(1, len(items) + 1):
        if k == len(items) or items[k] is not items[start]:
            runs.append(range(start, k))
            start = k
    return runs


def _describe(e: BaseException) -> str:
    """The exception and where it was raised, in one line for the logs."""
    where = traceback.extract_tb(e.__traceback__)[-1:] if e.__traceback__ else []
    at = f" (at {where[0].filename}:{where[0].lineno} in {where[0].name})" if where else ""
    return f"{type(e).__name__}: {str(e)[:300]}{at}"
