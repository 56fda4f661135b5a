"""Unit tests of cooprl/rollout/evaluation.py: the evaluation sharded over processes reports the metrics of one
process."""

import torch

from cooprl.rollout.generation import Completion
from cooprl.task import Score, Task


def test_sharded_evaluation_reports_the_metrics_of_one_process(monkeypatch):
    # Evaluation under ddp: rank r rolls out batches r, r + W, ... and gathers the others' trees. Two ranks simulated
    # in one process (rank 1 first, stopped at the gather with its share kept; then rank 0 receives it) must report
    # exactly the metrics of one process, on a reward that depends on every sampled token.
    from types import SimpleNamespace
    from cooprl.parallel import distributed
    from cooprl.rollout.evaluation import evaluate_team

    def random_sampler(agent, prompts, n):
        return [[Completion(str(torch.randint(0, 100, ()).item()), torch.tensor([1]), torch.tensor([2]), False)
                 for _ in range(n)] for _ in prompts]

    task = Task("random", 2, [], [], lambda item: ["p", "p"],
                lambda items, joints: [Score(float(j[0]) + float(j[1]) / 100, success=int(j[0]) > 50) for j in joints],
                lambda item, histories, joint, score_: ["q", "q"], max_reward=200.0)
    section = SimpleNamespace(num_turns=2, eval_num_generations=3, discount=0.9, early_termination_threshold=None,
                              eval_batch_size=2, eval_pass_k=[1, 2])
    items = list(range(7))   # 4 batches: rank 0 takes 0 and 2, rank 1 takes 1 and 3

    class Gathered(Exception):   # rank 1 of the simulation has sent its share: the rest is rank 0's
        pass

    def run(rank, world, others=()):
        shares = []

        def gather(value):
            shares.append(value)
            if rank == 1:
                raise Gathered
            return [value, *others]
        monkeypatch.setattr(distributed, "current", lambda: distributed.Ranks(rank, world))
        monkeypatch.setattr(distributed, "gather", gather)
        torch.manual_seed(1234)
        try:
            return evaluate_team(items, task, random_sampler, section, lambda r: r), shares
        except Gathered:
            return None, shares

    alone, _ = run(0, 1)
    _, [rank1_share] = run(1, 2)
    assert sorted(rank1_share) == [1, 3] and all(root.samples == [] for roots in rank1_share.values() for root in roots)
    sharded, [rank0_share] = run(0, 2, others=[rank1_share])
    assert sorted(rank0_share) == [0, 2]
    assert sharded == alone and alone["eval/turn_1/reward_mean"] > 0
    # the test sees the seeds: with every batch seeded alike the metrics differ
    monkeypatch.setattr(distributed, "item_seed", lambda seed, position: seed)
    assert run(0, 1)[0] != alone
