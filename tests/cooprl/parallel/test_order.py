"""Unit tests of cooprl/parallel/order.py: each process's share of the data order, its seeds, the merged metrics, the
end of an epoch."""

from cooprl.parallel.order import Ranks, StepPlan, ends_epoch, item_seed, shard_order


def test_shard_order_gives_each_rank_its_slice_of_every_step():
    order = [5, 3, 0, 1, 4, 2, 10, 8, 6, 7, 9, 11]   # two epochs of 6 items (ids are what the order holds)
    r0 = shard_order(order, 6, Ranks(0, 4))
    r1 = shard_order(order, 6, Ranks(1, 4))
    # 6 items, 4 ranks: one step per epoch, the last 2 items of each epoch left out (drop_last)
    assert r0 == ([5, 10], [0, 6], 1) and r1 == ([3, 8], [1, 7], 1)
    assert shard_order(order, 6, Ranks(0, 1)) == (order, list(range(12)), 6)


def test_item_seed_depends_on_seed_and_position_only():
    assert item_seed(42, 3) == item_seed(42, 3)
    assert len({item_seed(42, p) for p in range(100)} | {item_seed(43, 0)}) == 101
    assert 0 <= item_seed(42, 3) < 2 ** 63


def test_a_step_plan_gives_each_steps_item_position_and_epoch_end():
    plan = StepPlan(order=[2, 0, 1, 1, 2], positions=[0, 2, 4, 6, 8], epoch_length=3, steps_per_round=4, rounds=2)
    assert plan.total_steps == 8
    assert [plan.item(s) for s in range(1, 9)] == [2, 0, 1, 1, 2, 0, 1, 1]   # the round repeats
    assert [plan.position(s) for s in (1, 4, 5)] == [0, 6, 0]
    assert [s for s in range(1, 9) if plan.ends_epoch(s)] == [3, 4, 7, 8]
    assert StepPlan([0, 1], None, 2, 2).position(1) is None   # one process: no position seeds an item


def test_ends_epoch_marks_each_epochs_last_step_and_each_iterations_last():
    # 3 items, 2 epochs cut at 5 steps, 2 rounds (iterations): epochs end at 3, 5 (the iteration's end), 8, 10
    assert [s for s in range(1, 11) if ends_epoch(s, 5, 3, rounds=2)] == [3, 5, 8, 10]
    # one round: a plan cut at max_steps does not end an epoch (an extended run must equal the longer plan)
    assert [s for s in range(1, 6) if ends_epoch(s, 5, 3)] == [3]
