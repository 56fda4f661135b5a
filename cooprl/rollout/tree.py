"""The rollout tree of one episode per item: nodes, joint actions, rewards, early termination, returns, metrics.

At every node each agent samples `samples_per_node` completions for its own prompt. `aligned` pairs the
g-th samples of all agents (G joint actions per node); `cross` takes their Cartesian product (G^N). Each
joint action gets the shared reward and, while turns remain and the node was not terminated early, spawns
a child node whose prompts the task's transition builds. The return of a joint action is its reward plus
`discount` times the mean return of its child node. A general-sum task (`Score.agent_rewards`) gives each agent its
own reward: `agent_rewards` and `agent_returns` hold them per joint action and agent, by the same rule (with a
shared reward they equal `rewards` and `returns` exactly); trainers read an agent's through `sample_returns`. All
nodes of a turn are generated and scored together (one batched `generate` per agent per turn, one parallel scoring
batch per turn); `tree_metrics` reads a tree's per-turn rewards, returns and terminations for the logs.

Sequential teams (`Task.follow_prompt`): agent 0 samples G completions of its node prompt; agent a > 0 then samples
one completion for each joint action g, from the prompt `follow_prompt` builds out of its node prompt and the g-th
texts of agents 0..a-1. Joint actions are aligned; `Node.sample_prompts` keeps the prompt each sample answered.

Pipelining (`reward.pipeline_nodes`, `reward.pipeline`): a turn's nodes can instead be sampled in chunks of
`nodes_per_generation` nodes (1 = node by node). With `pipeline` on, each chunk's joint
actions are scored on a background thread while the next chunk generates: a task whose reward runs in other
processes (the code task's sandbox) then overlaps generation (torch, this process) and scoring. The turn's next
prompts and early terminations wait for all of its scores, as without pipelining. The results are identical:
generation runs in the same order on this thread, the scoring thread never draws from torch's generator, and
the chunks are scored in order, one at a time, with the caller's grad mode.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from cooprl.rollout.generation import Completion
from cooprl.task import Score, Task

# sample(agent, prompts, n) -> for each prompt, n completions
Sampler = Callable[[int, Sequence[str], int], list[list[Completion]]]


@dataclass
class Node:
    """One decision point: every agent's prompt, its samples, and the joint actions built from them."""

    item: Any
    turn: int
    prompts: list[str]                                   # per agent
    histories: list[list[tuple[str, str]]]               # per agent: earlier (prompt, completion) pairs
    samples: list[list[Completion]] = field(default_factory=list)   # [agent][g]
    joint: list[tuple[int, ...]] = field(default_factory=list)      # per joint action: sample index per agent
    scores: list[Score] = field(default_factory=list)               # per joint action
    rewards: list[float] = field(default_factory=list)              # processed rewards per joint action
    children: list["Node | None"] = field(default_factory=list)     # per joint action
    returns: list[float] = field(default_factory=list)              # per joint action
    agent_rewards: list[list[float]] = field(default_factory=list)  # [joint action][agent]: processed, own reward
    agent_returns: list[list[float]] = field(default_factory=list)  # [joint action][agent]: own return
    terminated_early: bool = False
    sample_prompts: list[list[str]] = field(default_factory=list)  # [agent][g]: a sequential team's own prompts

    def prompt_of(self, agent: int, g: int) -> str:
        """Return the prompt `agent`'s sample g answered: its node prompt, or in a sequential team its own."""
        return self.sample_prompts[agent][g] if self.sample_prompts else self.prompts[agent]

    def joint_texts(self, j: int) -> list[str]:
        """Return the completion texts of joint action j, one per agent."""
        return [self.samples[a][g].text for a, g in enumerate(self.joint[j])]


def joint_actions(num_samples: int, num_agents: int, mode: str) -> list[tuple[int, ...]]:
    """Return the joint actions as sample indices per agent: aligned (g, g, ...) or the cross product."""
    if mode == "aligned":
        return [(g,) * num_agents for g in range(num_samples)]
    if mode == "cross":
        return list(itertools.product(range(num_samples), repeat=num_agents))
    raise ValueError(f"joint_mode {mode!r}: expected 'aligned' or 'cross'")


@dataclass
class RolloutSettings:
    num_turns: int
    samples_per_turn: list[int]           # samples per agent per node at each turn (training: G every turn)
    joint_mode: str = "aligned"
    discount: float = 1.0
    early_termination_threshold: float | None = None
    process_reward: Callable[[float], float] = lambda r: r
    nodes_per_generation: int | None = None   # nodes of a turn sampled per generate call (None = the whole turn)
    pipeline: bool = True                     # score a chunk on a background thread while the next one generates
    # run_agents(call, num_agents) -> [call(0), call(1), ...]: how the agents' sampling calls run (None = in order;
    # parallel_training mp passes cooprl.trainers.team.AgentRunner.sample, which may run them on one thread each)
    run_agents: Callable[[Callable[[int], Any], int], list[Any]] | None = None


def pipeline_settings(config: Any) -> dict[str, Any]:
    """Return the RolloutSettings keyword arguments of a config's `reward.pipeline_nodes` and `reward.pipeline`."""
    return {"nodes_per_generation": config.reward.pipeline_nodes, "pipeline": config.reward.pipeline}


def rollout(items: Sequence[Any], task: Task, sample: Sampler, settings: RolloutSettings) -> list[Node]:
    """Return the root node of a fully expanded and scored rollout tree for each item, returns computed."""
    roots = [Node(item, 0, task.first_prompts(item), [[] for _ in range(task.num_agents)]) for item in items]
    frontier = roots
    for turn in range(settings.num_turns):
        if not frontier:
            break
        _generate_and_score(frontier, settings.samples_per_turn[turn], task, sample, settings)
        frontier = _expand(frontier, task, settings, last_turn=turn == settings.num_turns - 1)
    for root in roots:
        compute_returns(root, settings.discount)
    return roots


def _generate_and_score(frontier: list[Node], n: int, task: Task, sample: Sampler, settings: RolloutSettings) -> None:
    """Sample n completions per agent at every node of `frontier` and score their joint actions, chunk by chunk
    (`nodes_per_generation`); with `pipeline`, a chunk is scored on a background thread while the next generates."""
    size = settings.nodes_per_generation or len(frontier)
    chunks = [frontier[start:start + size] for start in range(0, len(frontier), size)]
    if not settings.pipeline or len(chunks) == 1:
        for chunk in chunks:
            _sample_nodes(chunk, n, task, sample, settings)
            _score_frontier(chunk, task, settings)
        return
    grad_enabled = torch.is_grad_enabled()   # grad mode is per thread: the scorer takes the caller's

    def score(chunk: list[Node]) -> None:
        with torch.set_grad_enabled(grad_enabled):
            _score_frontier(chunk, task, settings)

    # one worker: chunks are scored in order, one at a time, as without pipelining
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cooprl-scoring")
    pending: list[Future] = []
    try:
        for chunk in chunks:
            _sample_nodes(chunk, n, task, sample, settings)
            pending.append(executor.submit(score, chunk))
        for future in pending:
            future.result()   # the first scoring error is raised here, on the caller's thread
    finally:
        executor.shutdown(wait=True, cancel_futures=True)


def _sample_nodes(nodes: list[Node], n: int, task: Task, sample: Sampler, settings: RolloutSettings) -> None:
    """Sample n completions per agent at each of `nodes` (one sampling call per agent) and set their joint actions."""
    if task.follow_prompt is not None:
        _sample_sequential(nodes, n, task, sample, settings)
        return

    def sample_agent(a: int) -> list[list[Completion]]:
        return sample(a, [node.prompts[a] for node in nodes], n)

    if settings.run_agents is None:
        per_agent = [sample_agent(a) for a in range(task.num_agents)]
    else:
        per_agent = settings.run_agents(sample_agent, task.num_agents)
    for k, node in enumerate(nodes):
        node.samples = [per_agent[a][k] for a in range(task.num_agents)]
        node.joint = joint_actions(n, task.num_agents, settings.joint_mode)


def _sample_sequential(nodes: list[Node], n: int, task: Task, sample: Sampler, settings: RolloutSettings) -> None:
    """Sample a sequential team at each of `nodes`: agent 0 n times from its node prompt, then each later agent once
    per joint action g from its follow prompt of the g-th texts of the agents before it (one call per agent, in
    order: a follower waits for its predecessors)."""
    if settings.joint_mode != "aligned":
        raise ValueError(f"joint_mode {settings.joint_mode!r}: a sequential team's joint actions are aligned "
                         f"(agent a's g-th sample answers the g-th samples before it)")
    first = sample(0, [node.prompts[0] for node in nodes], n)
    for k, node in enumerate(nodes):
        node.samples = [first[k]]
        node.sample_prompts = [[node.prompts[0]] * n]
    for a in range(1, task.num_agents):
        prompts = [task.follow_prompt(node.item, a, node.prompts[a], [node.samples[b][g].text for b in range(a)])
                   for node in nodes for g in range(n)]
        answers = sample(a, prompts, 1)
        for k, node in enumerate(nodes):
            node.samples.append([answers[k * n + g][0] for g in range(n)])
            node.sample_prompts.append(prompts[k * n:(k + 1) * n])
    for node in nodes:
        node.joint = joint_actions(n, task.num_agents, "aligned")


def _score_frontier(frontier: list[Node], task: Task, settings: RolloutSettings) -> None:
    items, joints, owners = [], [], []
    for node in frontier:
        for j in range(len(node.joint)):
            items.append(node.item)
            joints.append(node.joint_texts(j))
            owners.append(node)
    scores = task.score(items, joints)
    for node in frontier:
        node.scores, node.rewards, node.agent_rewards = [], [], []
    for node, score in zip(owners, scores):
        node.scores.append(score)
        reward = settings.process_reward(score.total)
        node.rewards.append(reward)
        node.agent_rewards.append(agent_rewards(score, reward, task.num_agents, settings.process_reward))


def agent_rewards(score: Score, shared: float, num_agents: int, process: Callable[[float], float]) -> list[float]:
    """Return each agent's processed reward of one joint action: `shared` (the processed total) for every agent, or
    each of the score's own `agent_rewards` processed (ValueError when it does not hold one per agent)."""
    if score.agent_rewards is None:
        return [shared] * num_agents
    if len(score.agent_rewards) != num_agents:
        raise ValueError(f"a score holds {len(score.agent_rewards)} agent rewards for {num_agents} agents")
    return [process(r) for r in score.agent_rewards]


def _expand(frontier: list[Node], task: Task, settings: RolloutSettings, last_turn: bool) -> list[Node]:
    children_all = []
    for node in frontier:
        threshold = settings.early_termination_threshold
        mean_reward = sum(node.rewards) / len(node.rewards)
        node.terminated_early = not last_turn and threshold is not None and mean_reward > threshold
        node.children = [None] * len(node.joint)
        if last_turn or node.terminated_early:
            continue
        for j, (g_per_agent, score) in enumerate(zip(node.joint, node.scores)):
            if score.error:   # its reward raised (`cooprl.task.SafeScore`): the task has no feedback to build on
                continue
            histories = [node.histories[a] + [(node.prompt_of(a, g), node.samples[a][g].text)]
                         for a, g in enumerate(g_per_agent)]
            prompts = task.next_prompts(node.item, histories, node.joint_texts(j), score)
            child = Node(node.item, node.turn + 1, prompts, histories)
            node.children[j] = child
            children_all.append(child)
    return children_all


def compute_returns(node: Node, discount: float) -> None:
    """Fill `node.returns` and `node.agent_returns` (and its descendants'): reward + discount * mean return of the
    child node, the team's and each agent's own (an agent's rewards default to the shared ones)."""
    node.returns, node.agent_returns = [], []
    own = node.agent_rewards or [[r] * len(node.prompts) for r in node.rewards]
    for reward, agent_rewards_, child in zip(node.rewards, own, node.children):
        if child is None:
            node.returns.append(reward)
            node.agent_returns.append(list(agent_rewards_))
        else:
            compute_returns(child, discount)
            node.returns.append(reward + discount * sum(child.returns) / len(child.returns))
            node.agent_returns.append(
                [
                    r + discount * sum(ret[a] for ret in child.agent_returns) / len(child.agent_returns)
                    for a, r in enumerate(agent_rewards_)
                ]
            )


def iter_nodes(root: Node):
    """Yield every node of the tree under `root` (root first, breadth-first)."""
    queue = [root]
    while queue:
        node = queue.pop(0)
        yield node
        queue.extend(c for c in node.children if c is not None)


def sample_returns(node: Node, agent: int, reduce: str = "mean") -> list[float]:
    """Return, for each of `agent`'s samples at `node`, the agent's own returns of the joint actions that contain it
    (the shared returns unless the task gives per-agent rewards), reduced:
    `mean` (the same scale as an aligned tree's returns) or `sum` (what `cross_return` defaults to). In aligned mode
    each sample is in one joint action, so both give its return."""
    if reduce not in ("mean", "sum"):
        raise ValueError(f"cross_return {reduce!r}: expected 'mean' or 'sum'")
    totals = [0.0] * len(node.samples[agent])
    counts = [0] * len(node.samples[agent])
    own = [ret[agent] for ret in node.agent_returns] if node.agent_returns else node.returns
    for indices, ret in zip(node.joint, own):
        totals[indices[agent]] += ret
        counts[indices[agent]] += 1
    if reduce == "sum":
        return totals
    return [t / c if c else 0.0 for t, c in zip(totals, counts)]


SUMMED = ("/reward_errors",)   # score metrics logged as counts (per turn), not means


def tree_metrics(roots: Sequence[Node], num_turns: int, prefix: str = "") -> dict[str, float]:
    """Return per-turn means of reward, processed reward, return and every score metric (but the counts of
    `SUMMED`: how many joint actions' rewards raised), plus terminations."""
    sums: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    terminations = [0] * num_turns
    nodes = [0] * num_turns

    def add(key: str, value: float) -> None:
        sums[key] += value
        counts[key] += 1

    for root in roots:
        for node in iter_nodes(root):
            t = node.turn
            nodes[t] += 1
            terminations[t] += int(node.terminated_early)
            for score, reward, ret in zip(node.scores, node.rewards, node.returns):
                add(f"turn_{t + 1}/reward_mean", score.total)
                add(f"turn_{t + 1}/processed_reward_mean", reward)
                add(f"turn_{t + 1}/expected_return", ret)
                add(f"turn_{t + 1}/success_rate", float(score.success))
                for key, value in score.metrics.items():
                    add(f"turn_{t + 1}/{key}", float(value))
    metrics = {f"{prefix}{k}": v if k.endswith(SUMMED) else v / counts[k] for k, v in sums.items()}
    for t in range(num_turns):
        if nodes[t]:
            metrics[f"{prefix}turn_{t + 1}/nodes"] = float(nodes[t])
            metrics[f"{prefix}turn_{t + 1}/early_terminations"] = float(terminations[t])
    return metrics
