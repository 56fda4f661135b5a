"""What a task (environment) hands the trainers: items, prompts, a reward, and the transition between turns.

The library knows nothing about code: the code-generation environment builds a `Task` from plain callables,
and a new task needs no change in `cooprl/`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence


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

    def no_next_turn(*args: Any) -> list[str]:
        raise RuntimeError("centralized collaboration is single-turn: there is no next prompt")

    return replace(team, num_agents=1, first_prompts=lambda item: [joint.prompt(item)], score=score,
                   next_prompts=no_next_turn, stop_strings=[tuple(joint.stop_strings)], agent_rewards=False,
                   follow_prompt=None, demonstrations=None)
