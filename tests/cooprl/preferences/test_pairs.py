"""Preference machinery: pair selection on a scripted reward table, JSONL files, the pair store, replay weights."""

import random

import pytest

from cooprl.preferences.pairs import (Candidate, CandidateSources, PairStore, PreferencePair, collect_pairs,
                                      pairs_from_candidates, read_pairs, replay_weights, select_pairs,
                                      split_candidates, write_pairs)
from tests.scripted import scripted_task

REWARDS = [0.5, 2.0, 0.5, 1.0]   # gaps: (1,0)=1.5 (1,2)=1.5 (1,3)=1.0 (3,0)=0.5 (3,2)=0.5; (0,2) is a tie


def test_reward_gap_takes_the_largest_gaps_first():
    assert select_pairs(REWARDS, "reward_gap", 3, 0.0, random.Random(0)) == [(1, 0), (1, 2), (1, 3)]
    assert select_pairs(REWARDS, "reward_gap", 1, 0.0, random.Random(0)) == [(1, 0)]


def test_all_keeps_every_pair_above_the_gap_and_never_a_tie():
    assert select_pairs(REWARDS, "all", 1, 0.0, random.Random(0)) == [(1, 0), (1, 2), (1, 3), (3, 0), (3, 2)]
    assert select_pairs(REWARDS, "all", 1, 0.5, random.Random(0)) == [(1, 0), (1, 2), (1, 3)]
    assert select_pairs([1.0, 1.0, 1.0], "all", 3, 0.0, random.Random(0)) == []


def test_random_draws_from_the_valid_pairs_with_the_given_rng():
    picks = select_pairs(REWARDS, "random", 2, 0.6, random.Random(3))
    assert len(picks) == 2 and set(picks) <= {(1, 0), (1, 2), (1, 3)}
    assert picks == select_pairs(REWARDS, "random", 2, 0.6, random.Random(3))
    assert len(select_pairs(REWARDS, "random", 10, 0.0, random.Random(0))) == 5   # no more than exist
    with pytest.raises(ValueError):
        select_pairs(REWARDS, "best", 1, 0.0, random.Random(0))


def pair(item, iteration, step=1, reward=1.0):
    return PreferencePair(item, ["p0", "p1"], ["w0", "w1"], ["l0", "l1"], reward, 0.0, iteration, step=step)


def test_replay_weights():
    by_iter = {0: [pair("a", 0)], 1: [pair("b", 1), pair("c", 1)], 2: [pair("d", 2)], 3: [pair("future", 3)]}
    weights = lambda mode, lam=0.5: [(p.item_id, w) for p, w in replay_weights(by_iter, mode, lam, 2)]
    assert weights("current") == [("d", 1.0)]
    assert weights("all_history") == [("a", 1.0), ("b", 1.0), ("c", 1.0), ("d", 1.0)]
    # upstream's sampling weights: iteration shares (1 - lam) lam^age, normalized -> 0.25 : 0.5 : 1 of 1.75, each
    # spread over its pairs; scaled so the 4 weights average 1
    share = {"a": 0.25 / 1.75, "b": 0.5 / 1.75 / 2, "c": 0.5 / 1.75 / 2, "d": 1 / 1.75}
    assert weights("lambda_decay") == [(k, pytest.approx(4 * v)) for k, v in share.items()]
    assert sum(w for _, w in weights("lambda_decay")) == pytest.approx(4)
    assert weights("lambda_decay", 0.0) == [("d", 1.0 * 1)]   # lambda 0 = current only (0 ** 0 = 1)
    # lambda 1: every iteration the same share (iteration 1's two pairs half a share each)
    assert weights("lambda_decay", 1.0) == [(k, pytest.approx(v)) for k, v in
                                             [("a", 4 / 3), ("b", 2 / 3), ("c", 2 / 3), ("d", 4 / 3)]]


def test_jsonl_round_trip_and_a_cut_off_last_line(tmp_path):
    pairs = [pair("a", 0), PreferencePair("b", ["joint"], ["ü <main>"], ["x"], 4.0, 1.5, 2, "policy>comparator", 7,
                                          [[1, 2, 3]], [None])]
    path = tmp_path / "prefs" / "iteration_0.jsonl"
    write_pairs(path, pairs)
    assert read_pairs(path) == pairs
    with open(path, "a") as f:
        f.write('{"item_id": "c", "prom')           # a crash in the middle of a write
    assert read_pairs(path) == pairs
    assert read_pairs(tmp_path / "missing.jsonl") == []


@pytest.mark.parametrize("damage", [b"\xff\xfe\x00binary\n{}\n", b'not json\n{"item_id": "x"}\n', b"[1, 2]\n\n{}\n",
                                    b"[" * 100_000 + b"\n{}\n"])
def test_damaged_pair_file_is_a_user_error_naming_it(tmp_path, damage):
    from cooprl.errors import UserError
    path = tmp_path / "iteration_0.jsonl"
    path.write_bytes(damage)
    with pytest.raises(UserError, match="iteration_0.jsonl.*damaged") as err:
        read_pairs(path)
    if damage.startswith(b"\xff"):
        assert str(err.value).endswith("iteration_0.jsonl are damaged: not UTF-8 text (byte 0xff at offset 0)")


def test_store_appends_by_iteration_and_drops_later_steps_on_resume(tmp_path):
    store = PairStore(tmp_path / "preferences")
    store.append(0, [pair("a", 0, step=1), pair("b", 0, step=2)])
    store.append(1, [pair("c", 1, step=3), pair("d", 1, step=4)])
    store.append(2, [])
    assert store.path(2).is_file() and read_pairs(store.path(2)) == []
    assert {k: [p.item_id for p in v] for k, v in store.load().items()} == {0: ["a", "b"], 1: ["c", "d"], 2: []}
    assert {k: [p.item_id for p in v] for k, v in store.load(up_to_step=3).items()} == {0: ["a", "b"], 1: ["c"], 2: []}
    assert [p.item_id for p in read_pairs(store.path(1))] == ["c"]   # the file itself was truncated


class Section:
    preference_num_candidates, pair_selection, preference_pairs_per_sample, min_reward_gap = 4, "all", 2, 0.0


def test_pairs_from_candidates_carry_texts_ids_and_sources():
    cands = [Candidate(["a", "b"], [[1], [2]], 1.0, "policy"), Candidate(["c", "d"], [None, None], 3.0, "comparator"),
             Candidate(["e", "f"], [[5], [6]], 0.0, "policy")]
    pairs = pairs_from_candidates("item", ["p0", "p1"], cands, Section, iteration=1, step=5, rng=random.Random(0))
    assert [(p.chosen, p.rejected, p.source) for p in pairs] == [
        (["c", "d"], ["e", "f"], "comparator>policy"), (["c", "d"], ["a", "b"], "comparator>policy"),
        (["a", "b"], ["e", "f"], "policy")]
    assert pairs[0].chosen_ids == [None, None] and pairs[0].rejected_ids == [[5], [6]]
    assert all(p.iteration == 1 and p.step == 5 and p.reward_gap > 0 for p in pairs)


class HalfComparator:
    max_candidates = None

    def sample(self, items, n):
        return [[Candidate(["aaaaaaaa", "aaaaaaaa"], [None, None]) for _ in range(n)] for _ in items]


def test_collect_pairs_scores_policy_and_comparator_candidates():
    task = scripted_task()
    seen = []

    def sample_fn(agent, prompts, n):
        from cooprl.rollout.generation import Completion
        import torch
        seen.append(n)
        return [[Completion("b" * (g + 1), torch.tensor([1]), torch.tensor([g]),
                            False) for g in range(n)] for _ in prompts]

    pairs = collect_pairs(task.train_items[:2], CandidateSources(task, sample_fn, HalfComparator()), Section, 0,
                          random.Random(0))
    assert seen == [2, 2] and split_candidates(4, HalfComparator()) == (2, 2)
    # the comparator's all-'a' answers (reward 1) beat the policy's (reward 0); ties between them never pair
    assert len(pairs) == 8 and all(p.source == "comparator>policy" and p.chosen_reward == 1.0 for p in pairs)
    assert pairs[0].prompts == task.first_prompts(task.train_items[0]) and pairs[0].rejected_ids[0] in ([0], [1])


def test_a_sequential_teams_pairs_keep_each_sides_own_prompts(tmp_path):
    # agent 1 reads agent 0's answer: its prompt differs between the winner and the loser, and each pair keeps both
    import dataclasses
    import torch
    from cooprl.rollout.generation import Completion
    task = dataclasses.replace(scripted_task(), follow_prompt=lambda item, a, prompt, earlier: f"{prompt}|{earlier[0]}")

    def sample_fn(agent, prompts, n):
        return [[Completion("a" * (g + 1) if agent == 0 else "b", torch.tensor([1]), torch.tensor([g]), False)
                 for g in range(n)] for _ in prompts]

    pairs = collect_pairs(task.train_items[:1], CandidateSources(task, sample_fn), Section, 0, random.Random(0))
    first = task.first_prompts(task.train_items[0])
    assert pairs and all(p.prompts[0] == p.loser_prompts[0] == first[0] for p in pairs)
    for p in pairs:   # the follower's prompt ends with the text of its own side's agent 0
        assert p.prompts[1] == f"{first[1]}|{p.chosen[0]}" and p.loser_prompts[1] == f"{first[1]}|{p.rejected[0]}"
        assert p.rejected_prompts is not None
    path = tmp_path / "pairs.jsonl"
    write_pairs(path, pairs)
    assert read_pairs(path) == pairs
    # a pair file written before `rejected_prompts` existed reads as the same prompts for both sides
    old = PreferencePair("x", ["p"], ["c"], ["r"], 1.0, 0.0)
    assert old.rejected_prompts is None and old.loser_prompts == ["p"]
