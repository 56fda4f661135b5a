"""Preference pairs built from task rewards: sampling candidates, picking pairs, JSONL files, replay weights.

Shared by the preference trainers (MADPO, MARLHF and their iterative variants):
1. `collect_candidates`: for each item, sample joint candidates from the policies (one rollout turn) and,
   optionally, from a comparator (another model, an API, one centralized writer...), all scored with the
   task reward;
2. `select_pairs` / `comparator_pairs` / `pairs_from_candidates`: pick (winner, loser) pairs by reward (largest
   gaps, random, all), or `comparator_reward`: the policy's candidate i against the comparator's i;
3. `write_pairs` / `read_pairs` / `PairStore`: JSONL files in the run folder (inspectable, reused on resume);
4. `replay_weights`: which earlier iterations' pairs are trained on again, and with what weight.

A "joint" answer has one text per policy: [agent 0's, agent 1's] for two decentralized agents, [joint answer] for one
centralized policy. Pairs keep the sampled token ids when the policy's own tokenizer produced them, so that a
DPO update scores exactly the sampled tokens; texts from another tokenizer (an API) have ids None.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

from cooprl.checkpoint import save_model
from cooprl.config import IterativeFields, PreferenceFields, TrainerSection
from cooprl.errors import UserError
from cooprl.parallel.context import SINGLE, Parallel
from cooprl.parallel.order import Ranks, data_order, shard_order
from cooprl.rollout.tree import Node, RolloutSettings, Sampler, rollout

log = logging.getLogger(__name__)

PAIR_SELECTIONS = ("reward_gap", "random", "all", "comparator_reward")
REPLAY_MODES = ("current", "nearest_k", "all_history", "lambda_decay")


@dataclass
class PreferencePair:
    """One comparison of two joint answers to the same item (the winner has the higher task reward)."""

    item_id: str
    prompts: list[str]           # per policy (decentralized: one per agent; centralized: [joint prompt])
    chosen: list[str]            # per policy: completion texts of the winner
    rejected: list[str]          # per policy: completion texts of the loser
    chosen_reward: float         # raw task rewards (before the reward processor)
    rejected_reward: float
    iteration: int = 0
    source: str = "policy"       # who wrote them: policy, comparator, or winner>loser (policy>comparator, ...)
    step: int = 0                # training step that generated the pair (resume drops pairs of later steps)
    chosen_ids: list[list[int] | None] | None = None    # per policy: sampled token ids, None = tokenize the text
    rejected_ids: list[list[int] | None] | None = None
    # per policy: the loser's prompts where they differ from the winner's (`prompts`): a sequential team's follower
    # answered its predecessors' texts, which differ between the two joint answers; None = `prompts`
    rejected_prompts: list[str] | None = None

    @property
    def loser_prompts(self) -> list[str]:
        """Return the prompts the loser's completions answered, per policy."""
        return self.rejected_prompts if self.rejected_prompts is not None else self.prompts

    @property
    def reward_gap(self) -> float:
        """Return chosen_reward - rejected_reward (> 0)."""
        return self.chosen_reward - self.rejected_reward


@dataclass
class Candidate:
    """One joint answer to an item: text (and sampled ids, when known) per policy, its reward and its writer."""

    texts: list[str]
    ids: list[list[int] | None]
    reward: float = 0.0
    source: str = "policy"
    prompts: list[str] | None = None   # per policy, the prompt each text answered (a sequential team); None: the item's


class Comparator(Protocol):
    """Writes comparison candidates for the policies' items (see cooprl.preferences.comparators)."""

    max_candidates: int | None   # at most this many candidates per item (None = no limit; an API at T=0: 1)

    def sample(self, items: Sequence[Any], n: int) -> list[list[Candidate]]: ...   # n unscored per item


# ---------------------------------------------------------------------------------------------- selection
def select_pairs(rewards: Sequence[float], mode: str, pairs_per_sample: int, min_gap: float,
                 rng: random.Random) -> list[tuple[int, int]]:
    """Return (winner index, loser index) pairs among candidates with these rewards.

    Only pairs whose reward gap exceeds `min_gap` qualify (ties never do). `reward_gap`: the largest gaps
    first, `pairs_per_sample` of them; `random`: `pairs_per_sample` drawn with `rng`; `all`: every
    qualifying pair, largest gaps first. Equal gaps keep index order, so the result is deterministic.
    """
    if mode not in PAIR_SELECTIONS or mode == "comparator_reward":  # comparator_reward: see comparator_pairs
        raise ValueError(f"pair_selection {mode!r}: expected one of {', '.join(PAIR_SELECTIONS)}")
    valid = []
    for i in range(len(rewards)):
        for j in range(i + 1, len(rewards)):
            winner, loser = (i, j) if rewards[i] >= rewards[j] else (j, i)
            if rewards[winner] - rewards[loser] > min_gap:
                valid.append((winner, loser))
    if mode == "random":
        return rng.sample(valid, min(pairs_per_sample, len(valid)))
    valid.sort(key=lambda p: rewards[p[1]] - rewards[p[0]])  # stable: largest gap first, ties in index order
    return valid if mode == "all" else valid[:pairs_per_sample]


def comparator_pairs(policy_rewards: Sequence[float], comparator_rewards: Sequence[float], pairs_per_sample: int | None,
                     min_gap: float) -> list[tuple[int, int]]:
    """Return the `comparator_reward` pairs as (winner, loser) indices into policy + comparator candidates
    (the comparator's candidate j has index len(policy_rewards) + j).

    The policy's candidate i is compared with the comparator's candidate i (cycling through the comparator's when it
    wrote fewer, e.g. an API's single answer); a comparison is a pair when the gap exceeds `min_gap` (ties never
    pair), whichever side won. Pairs come best comparator reward first, then largest gap first (ties in index
    order), `pairs_per_sample` of them (None = all).
    """
    if not policy_rewards or not comparator_rewards:
        return []
    found = []
    for i, mine in enumerate(policy_rewards):
        j = i % len(comparator_rewards)
        theirs = comparator_rewards[j]
        if abs(mine - theirs) > min_gap:
            k = len(policy_rewards) + j
            found.append(((i, k) if mine > theirs else (k, i), theirs, abs(mine - theirs)))
    found.sort(key=lambda f: (-f[1], -f[2]))   # stable: equal keys keep index order
    return [pair for pair, _, _ in found][:pairs_per_sample]


def _pair_source(winner: Candidate, loser: Candidate) -> str:
    return winner.source if winner.source == loser.source else f"{winner.source}>{loser.source}"


def pairs_from_candidates(item_id: str, prompts: list[str], candidates: Sequence[Candidate], section: PreferenceFields,
                          iteration: int, step: int, rng: random.Random) -> list[PreferencePair]:
    """Return the preference pairs of one item's scored candidates, picked as `section` says.

    `comparator_reward` compares the policy's candidates with the comparator's; without comparator candidates (no
    comparator: `current` with `comparator_candidate_budget: shared`) the policy's first half plays the comparator.
    """
    if section.pair_selection == "comparator_reward":
        mine = [c for c in candidates if c.source != "comparator"]
        theirs = [c for c in candidates if c.source == "comparator"]
        if not theirs:
            mine, theirs = mine[len(mine) // 2:], mine[:len(mine) // 2]
        candidates = mine + theirs
        chosen = comparator_pairs([c.reward for c in mine], [c.reward for c in theirs],
                                  section.preference_pairs_per_sample, section.min_reward_gap)
    else:
        chosen = select_pairs([c.reward for c in candidates], section.pair_selection,
                              section.preference_pairs_per_sample, section.min_reward_gap, rng)
    def prompts_of(candidate: Candidate) -> list[str]:
        return list(candidate.prompts if candidate.prompts is not None else prompts)

    pairs = []
    for w, l in chosen:
        winner, loser = candidates[w], candidates[l]
        winner_prompts, loser_prompts = prompts_of(winner), prompts_of(loser)
        pairs.append(PreferencePair(item_id, winner_prompts, list(winner.texts), list(loser.texts), winner.reward,
                                    loser.reward, iteration, _pair_source(winner, loser), step, list(winner.ids),
                                    list(loser.ids), loser_prompts if loser_prompts != winner_prompts else None))
    return pairs


# ---------------------------------------------------------------------------------------------- sampling
def split_candidates(total: int, comparator: Comparator | None) -> tuple[int, int]:
    """Return (policy candidates, comparator candidates) per item: with the comparator's own `num_candidates`
    (comparator_num_candidates, else with budget `separate` preference_num_candidates) the policies write `total`
    and it that many (at most its `max_candidates`); without (`comparator_candidate_budget: shared`) it writes up to
    half of `total`."""
    if comparator is None:
        return total, 0
    if getattr(comparator, "num_candidates", None):   # its own count: the policies' set and the comparator's
        n_comp = comparator.num_candidates
        if comparator.max_candidates is not None:
            n_comp = min(n_comp, comparator.max_candidates)
        return total, n_comp
    n_comp = max(1, total // 2)
    if comparator.max_candidates is not None:
        n_comp = min(n_comp, comparator.max_candidates)
    return total - n_comp, n_comp


def collect_candidates(items: Sequence[Any], task: Any, sample_fn: Sampler, num_candidates: int,
                       comparator: Comparator | None = None, process_reward: Callable[[float], float] = lambda r: r,
                       ) -> tuple[list[Node], list[list[Candidate]]]:
    """Return (rollout roots of the policies' samples, scored candidates per item: the policies' then the comparator's).

    The policies' candidates are one rollout turn with aligned joint actions (so the roots feed `tree_metrics`);
    the comparator's are scored in one extra batch.
    """
    n_policy, n_comp = split_candidates(num_candidates, comparator)
    settings = RolloutSettings(num_turns=1, samples_per_turn=[n_policy], joint_mode="aligned",
                               process_reward=process_reward)
    roots = rollout(items, task, sample_fn, settings)
    candidates = [[Candidate(root.joint_texts(j), [root.samples[a][g].completion_ids.tolist() for a,
                                                   g in enumerate(joint)],
                             root.scores[j].total, "policy",
                             [root.prompt_of(a, g) for a, g in enumerate(joint)] if root.sample_prompts else None)
                   for j, joint in enumerate(root.joint)]
                  for root in roots]
    if n_comp:
        extra = comparator.sample(items, n_comp)
        flat = [(k, c) for k, per_item in enumerate(extra) for c in per_item]
        scores = task.score([items[k] for k, _ in flat], [c.texts for _, c in flat])
        for (k, cand), score in zip(flat, scores):
            cand.reward, cand.source = score.total, "comparator"
            candidates[k].append(cand)
    return roots, candidates


@dataclass(frozen=True)
class CandidateSources:
    """Who writes a problem's joint candidates and what scores them: the policies (`sample_fn`), the comparator
    (None: the policies write them all) and the task (its reward)."""

    task: Any
    sample_fn: Sampler
    comparator: Comparator | None = None


def collect_pairs(items: Sequence[Any], sources: CandidateSources, section: PreferenceFields, iteration: int,
                  rng: random.Random, step: int = 0,
                  record: Callable[[Sequence[Candidate]], None] | None = None) -> list[PreferencePair]:
    """Return preference pairs for `items`: `section.preference_num_candidates` joint candidates per item from
    `sources`, scored, paired by `section.pair_selection`; `record` sees each item's scored candidates
    (log_reward_distribution)."""
    task = sources.task
    _, candidates = collect_candidates(items, task, sources.sample_fn, section.preference_num_candidates,
                                       sources.comparator)
    pairs = []
    for item, cands in zip(items, candidates):
        if record is not None:
            record(cands)
        pairs += pairs_from_candidates(task.item_id(item), task.first_prompts(item), cands, section, iteration, step,
                                       rng)
    return pairs


ITEMS_PER_COLLECTION = 16   # items whose candidates are sampled in one batch (bounds generation memory)


def plan_chunks(task: Any, section: TrainerSection, seed: int, steps_per_round: int,
                parallel: Parallel = SINGLE) -> list[list[Any]]:
    """Return the training items a preference iteration's step plan takes, each once, in plan order, cut into
    sampling batches of ITEMS_PER_COLLECTION: the first `steps_per_round` of the data order, or under data-parallel
    training (`parallel`) every process's first `steps_per_round` (cooprl.parallel.order.shard_order)."""
    order = data_order(len(task.train_items), section.num_train_epochs, seed)
    world = parallel.ranks.world_size if parallel.data_parallel else 1
    positions = sorted(position for rank in range(world) for position in shard_order(
        order, len(task.train_items), Ranks(rank, world))[1][:steps_per_round])
    items = [task.train_items[i] for i in dict.fromkeys(order[position] for position in positions)]
    return [items[start:start + ITEMS_PER_COLLECTION] for start in range(0, len(items), ITEMS_PER_COLLECTION)]


# ---------------------------------------------------------------------------------------------- files
def pair_to_json(pair: PreferencePair) -> str:
    """Return the pair as one JSON line (no newline)."""
    return json.dumps(dataclasses.asdict(pair), ensure_ascii=False)


def write_pairs(path: str | Path, pairs: Iterable[PreferencePair]) -> None:
    """Write `pairs` as JSONL to `path`, atomically (a temporary file renamed over it)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(pair_to_json(p) + "\n" for p in pairs), encoding="utf-8")
    os.replace(tmp, path)


class PreferenceFileError(UserError, ValueError):
    """A run's preference-pair file is damaged (not UTF-8, not JSON lines, a line that is not a pair)."""


def read_pairs(path: str | Path) -> list[PreferencePair]:
    """Return the pairs of a JSONL file ([] when it is missing); a cut-off last line (a crash mid-write) is dropped.
    Raises PreferenceFileError, naming the file and line, for any other damage."""
    path = Path(path)
    if not path.is_file():
        return []
    pairs = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as e:   # it said only "UnicodeDecodeError"
        raise PreferenceFileError(f"preference pairs {path} are damaged: not UTF-8 text (byte "
                                  f"0x{e.object[e.start]:02x} at offset {e.start})") from None
    except OSError as e:
        raise PreferenceFileError(f"preference pairs {path} cannot be read: {e.strerror or e}") from None
    for n, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            pairs.append(PreferencePair(**json.loads(line)))
        except (ValueError, TypeError, RecursionError):
            if n < len(lines) - 1:
                raise PreferenceFileError(
                    f"preference pairs {path}:{n + 1} are damaged: not a preference pair"
                ) from None
            log.warning("%s: dropping a cut-off last line", path)
    return pairs


def open_pair_store(run_dir: Path, step: int) -> "PairStore":
    """Return the PairStore of the run folder `run_dir`. A fresh run (`step` 0) must collect its own pairs, while a
    resumed one reads its files back: a fresh run first moves an earlier run's pairs aside (`move_pairs_aside`)."""
    if step == 0:
        move_pairs_aside(run_dir)
    return PairStore(run_dir / "preferences")


def move_pairs_aside(run_dir: Path) -> Path | None:
    """Rename a non-empty `preferences/` of `run_dir` to `preferences.old-<timestamp>/` (renamed, not deleted: the
    user may want it); return the new path, or None when there was nothing to move."""
    path = run_dir / "preferences"
    if not path.is_dir() or not any(path.iterdir()):
        return None
    stamp = f"{datetime.datetime.now():%Y%m%d-%H%M%S}"
    target, n = path.with_name(f"{path.name}.old-{stamp}"), 1
    while target.exists():  # two fresh runs within a second
        target, n = path.with_name(f"{path.name}.old-{stamp}-{n}"), n + 1
    path.rename(target)
    log.warning("%s holds an earlier run's preference pairs: moved to %s, this run collects its own (to continue "
                "that run, --resume %s)", path, target.name, path.parent)
    return target


class PairStore:
    """A run's pairs, one JSONL file per iteration: `<folder>/iteration_<k>.jsonl`, appended step by step."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)

    def path(self, iteration: int) -> Path:
        """Return the file of `iteration`."""
        return self.folder / f"iteration_{iteration}.jsonl"

    def load(self, up_to_step: int | None = None) -> dict[int, list[PreferencePair]]:
        """Return the stored pairs by iteration; with `up_to_step`, pairs of later steps are dropped from the files
        too (a resumed run regenerates those steps, like the loop re-logs their metrics)."""
        found: dict[int, list[PreferencePair]] = {}
        for path in sorted(self.folder.glob("iteration_*.jsonl")):
            iteration = int(path.stem.rsplit("_", 1)[1])
            pairs = read_pairs(path)
            if up_to_step is not None:
                kept = [p for p in pairs if p.step <= up_to_step]
                if len(kept) != len(pairs):
                    write_pairs(path, kept)
                pairs = kept
            found[iteration] = pairs
        return found

    def append(self, iteration: int, pairs: Sequence[PreferencePair]) -> None:
        """Append `pairs` (all of `iteration`) to its file in one write; the file exists afterwards even when
        `pairs` is empty (an iteration whose candidates all tied has an empty file, not a missing one)."""
        assert all(p.iteration == iteration for p in pairs), "pairs of another iteration"
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.path(iteration), "a", encoding="utf-8") as f:
            f.write("".join(pair_to_json(p) + "\n" for p in pairs))


# ---------------------------------------------------------------------------------------------- replay
@dataclass(frozen=True)
class IterationPlan:
    """How a preference trainer iterates: passes over the step plan, and which earlier pairs it replays."""

    rounds: int = 1                 # the loop repeats its step plan this often (one iteration per pass)
    replay_mode: str = "current"    # current | nearest_k | all_history | lambda_decay
    replay_lambda: float = 1.0
    replay_k: int = 1               # nearest_k: the k newest iterations, the current one included
    replay_sample_size: int | None = None   # earlier pairs drawn per iteration (None: every earlier pair)

    @classmethod
    def of(cls, section: TrainerSection) -> "IterationPlan":
        """Return the plan of a trainer section: its iterative keys, or one pass without replay."""
        if not isinstance(section, IterativeFields):
            return cls()
        return cls(section.num_iterations, section.preference_replay_mode, section.replay_lambda,
                   section.preference_replay_k or 1, section.preference_replay_sample_size)

    def replayed(self, pairs_by_iteration: Mapping[int, Sequence[PreferencePair]], current_iteration: int,
                 rng: random.Random, draws: int | None = None) -> list[tuple[PreferencePair, float]]:
        """Return (pair, weight) to train on: `replay_weights` of the plan's mode; with `replay_sample_size`, the
        current iteration's pairs (weight 1) plus `draws` earlier pairs (default: replay_sample_size) drawn with
        `rng` in proportion to their replay weights, each of weight 1 (the weights only decide the draw)."""
        weighted = replay_weights(pairs_by_iteration, self.replay_mode, self.replay_lambda, current_iteration,
                                  nearest=self.replay_k)
        if self.replay_sample_size is None:
            return weighted
        current = [(p, 1.0) for p in pairs_by_iteration.get(current_iteration, [])]
        earlier = [(p, w) for p, w in weighted if p.iteration != current_iteration and w > 0]
        count = self.replay_sample_size if draws is None else draws
        return current + [(p, 1.0) for p in draw_weighted(earlier, count, rng)]


class RewardDistribution:
    """log_reward_distribution: each iteration's raw task rewards of the candidates, by writer (the policies' and the
    comparator's), in `<folder>/iteration_<k>.json` (16-bin histograms over [0, max reward], counts, means) and as
    metrics `reward_dist/{policy,comparator}_mean` and `reward_dist/policy_beats_comparator` (the share of the
    policies' candidates above the comparator's mean)."""

    BINS = 16

    def __init__(self, folder: str | Path, max_reward: float):
        self.folder, self.max_reward = Path(folder), max_reward
        self.rewards: dict[int, dict[str, list[float]]] = {}

    def add(self, iteration: int, candidates: Sequence[Candidate]) -> None:
        """Record one problem's scored candidates and rewrite the iteration's file."""
        by_source = self.rewards.setdefault(iteration, {"policy": [], "comparator": []})
        for c in candidates:
            by_source["comparator" if c.source == "comparator" else "policy"].append(c.reward)
        self.folder.mkdir(parents=True, exist_ok=True)
        summary = {"iteration": iteration, "range": [0.0, self.max_reward], "bins": self.BINS}
        for source, values in by_source.items():
            summary[source] = {"count": len(values), "mean": sum(values) / len(values) if values else None,
                               "histogram": self.histogram(values)}
        tmp = self.folder / f"iteration_{iteration}.json.tmp"
        tmp.write_text(json.dumps(summary), encoding="utf-8")
        os.replace(tmp, self.folder / f"iteration_{iteration}.json")

    def histogram(self, values: Sequence[float]) -> list[int]:
        """Return the counts of `values` in BINS equal bins over [0, max reward] (values outside go to the ends)."""
        counts = [0] * self.BINS
        width = (self.max_reward or 1.0) / self.BINS
        for v in values:
            counts[min(max(int(v // width), 0), self.BINS - 1)] += 1
        return counts

    def metrics(self, iteration: int) -> dict[str, float]:
        """Return the iteration's distribution metrics so far."""
        by_source = self.rewards.get(iteration, {})
        mine, theirs = by_source.get("policy", []), by_source.get("comparator", [])
        out = {}
        if mine:
            out["reward_dist/policy_mean"] = sum(mine) / len(mine)
        if theirs:
            out["reward_dist/comparator_mean"] = sum(theirs) / len(theirs)
        if mine and theirs:
            out["reward_dist/policy_beats_comparator"] = sum(
                m > out["reward_dist/comparator_mean"] for m in mine
            ) / len(mine)
        return out


def save_policy_checkpoint(section: TrainerSection, models: Sequence[Any], label: str,
                           parallel: Parallel = SINGLE) -> Path | None:
    """policy_checkpoint_dir: save every policy (`save_pretrained`: the LoRA adapters, or the whole model) in
    `<policy_checkpoint_dir>/<label>/agent_<i>` (label `initial` or `iteration_<k>`); a snapshot that
    is already there (a resumed run) is kept; rank 0 writes. Every process calls it (sharded policies are gathered).
    Return its folder, or None when the key is not set (or the trainer has none: not an iterative one)."""
    folder = section.policy_checkpoint_dir if isinstance(section, IterativeFields) else None
    if not folder:
        return None
    target = Path(folder) / label
    weights = list(parallel.whole_state_dicts(models))   # sharded policies are gathered (every process takes part)
    if parallel.is_main and not all((target / f"agent_{i}").is_dir() for i in range(len(models))):
        for i, model in enumerate(models):
            save_model(model, target / f"agent_{i}", weights[i])
    return target


def policy_checkpoints(section: TrainerSection, models: Sequence[Any], step: int, steps_per_round: int,
                       before: bool, parallel: Parallel = SINGLE) -> None:
    """Save the policy snapshots a step boundary calls for: `initial` before the first step of the run, and
    `iteration_<k>` after the last step of iteration k."""
    if before and step == 1:
        save_policy_checkpoint(section, models, "initial", parallel)
    elif not before and step % steps_per_round == 0:
        save_policy_checkpoint(section, models, f"iteration_{(step - 1) // steps_per_round}", parallel)


def draw_weighted(weighted: Sequence[tuple[Any, float]], count: int, rng: random.Random) -> list[Any]:
    """Return `count` items drawn from (item, weight) in proportion to the weights: without replacement while
    items remain, then again from all."""
    drawn: list[Any] = []
    while weighted and len(drawn) < count:
        pool = list(weighted)
        while pool and len(drawn) < count:
            k = rng.choices(range(len(pool)), weights=[w for _, w in pool])[0]
            drawn.append(pool.pop(k)[0])
    return drawn


def replay_weights(pairs_by_iteration: Mapping[int, Sequence[PreferencePair]], mode: str, lam: float,
                   current_iteration: int, nearest: int = 1) -> list[tuple[PreferencePair, float]]:
    """Return (pair, weight) for the pairs to train on at `current_iteration`.

    `current`: only the current iteration's pairs (weight 1); `all_history`: every iteration up to the
    current one (weight 1); `lambda_decay`: sampling weights. Iteration k (age = current - k) gets the
    share (1 - lam) * lam^age of the replayed weight, normalized over the iterations that have pairs (so the
    (1 - lam) factor cancels: share = lam^age / sum of lam^age), spread evenly over its pairs and scaled so that
    the weights average 1 (a pair's weight is its chance to be drawn, relative to a uniform draw). With lam = 0 only
    the current iteration counts; with lam = 1 every iteration gets the same share. `nearest_k`: the `nearest`
    newest iterations, the current one included (weight 1). Later iterations are ignored.
    """
    if mode not in REPLAY_MODES:
        raise ValueError(f"preference_replay_mode {mode!r}: expected one of {', '.join(REPLAY_MODES)}")
    kept = {k: list(pairs) for k, pairs in pairs_by_iteration.items()
            if pairs and 0 <= current_iteration - k and (mode != "current" or k == current_iteration)
            and (mode != "nearest_k" or current_iteration - k < nearest)}   # nearest_k: age < nearest
    if mode != "lambda_decay":
        return [(pair, 1.0) for k in sorted(kept) for pair in kept[k]]
    shares = {k: lam ** (current_iteration - k) for k in kept}   # 0 ** 0 = 1: the current iteration
    shares = {k: share for k, share in shares.items() if share > 0}
    total_share, total_pairs = sum(shares.values()), sum(len(kept[k]) for k in shares)
    return [(pair, shares[k] / total_share / len(kept[k]) * total_pairs) for k in sorted(shares) for pair in kept[k]]
