"""The reward's Ray executor against the local pool: the same verdicts on the hostile suite and on HumanEval's
canonical solutions, back-pressure, and a lost actor that costs a retry, not the run. Ray runs locally here
(`ray.init(num_cpus=4)`), which exercises the same actor code as a cluster."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

ray = pytest.importorskip("ray", reason="the ray extra is part of the dev install (make test)")

from envs.code_generation.data import load_problems  # noqa: E402
from rewards.code_rewards import code_rewards_batch  # noqa: E402
from rewards.ray_pool import RaySandbox, make_sandbox, use_sandbox  # noqa: E402
from rewards.sandbox import Sandbox, default_sandbox  # noqa: E402
from tests.rewards.test_sandbox import HOSTILE, ONE  # noqa: E402

pytestmark = pytest.mark.slow   # end to end (trainers, command lines, subprocesses): not in `make test-fast`

SLEEPY = "import time\ndef f(x):\n    time.sleep(0.5)\n    return x + 1\n"


@pytest.fixture(scope="module")
def pools():
    # four logical CPUs on two cores: the fixture's two one-CPU actors plus one the config test makes
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False, configure_logging=False)
    remote = RaySandbox(actors=2, workers_per_actor=1, in_flight=1)
    here = Sandbox(workers=2)
    yield here, remote
    remote.close()
    here.close()
    ray.shutdown()


def _hostile(name: str) -> str:
    return HOSTILE[name].replace("TRAINER", str(os.getpid())).replace("OUTSIDE", repr("/opt/cooprl-ray-none"))


def test_same_verdicts_as_the_local_pool_on_the_hostile_suite(pools):
    here, remote = pools
    names = sorted(HOSTILE)
    jobs = [(_hostile(n), ONE) for n in names] + [("def f(x):\n    return x + 1\n", ONE)]

    def verdicts(pool):
        return pool.map_detailed(lambda job: [o.passed for o in pool.run(job[0], job[1], 1.0, 1, entry_point="f")],
                                 jobs)

    local_verdicts, ray_verdicts = verdicts(here), verdicts(remote)
    assert ray_verdicts == local_verdicts
    assert local_verdicts[-1] == [True]   # the honest program passes on both


def test_same_rewards_on_humaneval_canonical_solutions(pools):
    here, remote = pools
    problems = load_problems({"name": "humaneval", "type": "humaneval"}, "test")
    mains = [p.prompt + p.extra["canonical_solution"] for p in problems]
    scores = {}
    for name, pool in (("local", here), ("ray", remote)):
        t0 = time.monotonic()
        scores[name] = [r.total for r in code_rewards_batch(problems, [""] * len(problems), mains,
                                                            single_agent=True, sandbox=pool)]
        print(f"{name}: {len(problems)} programs in {time.monotonic() - t0:.2f} s")
    assert scores["ray"] == scores["local"]
    assert scores["ray"] == [2.1] * len(problems)


def test_back_pressure_bounds_the_programs_queued_on_each_actor(pools):
    _, remote = pools
    peak = []
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            peak.append(max(remote._busy))
            time.sleep(0.01)

    watcher = threading.Thread(target=watch)
    watcher.start()
    t0 = time.monotonic()
    results = remote.map_detailed(lambda _: remote.run(SLEEPY, ONE, 5.0, 1, entry_point="f")[0].passed, range(6))
    elapsed = time.monotonic() - t0
    stop.set()
    watcher.join()
    assert results == [True] * 6
    assert max(peak) == remote.in_flight == 1
    assert elapsed >= 3 * 0.5 * 0.9   # 6 programs of 0.5 s, two actors taking one at a time


def test_a_lost_actor_costs_a_retry_not_the_run(pools):
    _, remote = pools
    result = {}
    thread = threading.Thread(target=lambda: result.update(
        out=remote.run(SLEEPY, ONE, 5.0, 1, entry_point="f")))
    thread.start()
    deadline = time.monotonic() + 10
    while max(remote._busy) == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    victim = remote._busy.index(1)
    ray.kill(remote._actors[victim])   # as if its node died mid-run
    thread.join(60)
    assert result["out"][0].passed
    assert remote.run("def f(x):\n    return x + 1\n", ONE, 5.0, 1, entry_point="f")[0].passed


def test_executor_choice_and_process_default(pools):
    with pytest.raises(ValueError, match="local or ray"):
        make_sandbox("slurm")
    _, remote = pools
    previous = default_sandbox()
    use_sandbox(remote)
    try:
        assert default_sandbox() is remote
    finally:
        from rewards import sandbox as local
        with local._default_lock:
            local._default = None   # the next default_sandbox() makes a fresh local pool
    assert previous._closed


def test_the_config_chooses_the_executor(pools):
    from cooprl.config import load_config
    from rewards import sandbox as local
    from rewards.ray_pool import use_configured_executor
    use_configured_executor(load_config(None, ["reward.executor=ray", "reward.ray_actors=1",
                                               "reward.ray_workers_per_actor=1"]).reward)
    try:
        pool = default_sandbox()
        assert isinstance(pool, RaySandbox) and pool.workers == 1
        assert pool.run("def f(x):\n    return x + 1\n", ONE, 5.0, 1, entry_point="f")[0].passed
    finally:
        pool.close()
        with local._default_lock:
            local._default = None
