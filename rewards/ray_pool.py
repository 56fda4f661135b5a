"""Rewards beyond one machine: sandbox pools on the CPU nodes of a Ray cluster.

Code execution is CPU work that can stall a GPU trainer for minutes. `RaySandbox` keeps the reward's interface of
`rewards.sandbox.Sandbox` (`run_detailed`, `run`, `map_detailed`, `close`) but sends each program to one of
`actors` Ray actors, each of which owns an ordinary local `Sandbox` pool on its node. So the isolation and the
verdicts are exactly the local ones (the same worker judges the same job); what Ray adds is placement (actors
spread over the cluster's nodes), back-pressure (at most `in_flight` programs queued on an actor at once, the
caller's threads wait for a free place) and fault tolerance (an actor whose node died is replaced and its
program retried, `retries` times, so a lost node costs retries, not a crashed run).

Ray is an optional dependency (`pip install cooprl[ray]`); it is imported when a `RaySandbox` is made.

Pools that cannot be placed never leave a run waiting in silence: on a local Ray (one node, this machine) the pools
are fitted to its free CPUs, with a log line saying so; on a cluster, pools that are not all placed within
`placement_timeout_s` are a `PlacementError` (the command line's one `error:` line names the config keys).

    ray.init(address="auto")                  # or let RaySandbox start/join one (RAY_ADDRESS is honoured)
    pool = RaySandbox(actors=8, workers_per_actor=4)
    use_sandbox(pool)                         # every reward of this process now runs on the cluster
"""

from __future__ import annotations

import logging
import marshal
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from types import CodeType
from typing import Any, Sequence

from rewards import sandbox as local
from rewards.sandbox import IsolationError, RunReport, TestOutcome, TestSuite

logger = logging.getLogger("cooprl.sandbox")

PLACEMENT_TIMEOUT_S = 45.0   # a cluster that has not placed every pool by then will not (the run stops, not waits)


class PlacementError(RuntimeError):
    """The Ray cluster could not place the sandbox pools (too few CPUs on its nodes)."""


def fit_pools(actors: int, workers_per_actor: int, cpus: int) -> tuple[int, int]:
    """Return (actors, workers per actor) that fit `cpus` CPUs: each pool keeps as many of its workers as fit, then
    as many pools as fit; the request itself when it fits. PlacementError when there is no CPU at all."""
    if cpus < 1:
        raise PlacementError("the local Ray has no free CPU for a sandbox pool")
    workers = min(workers_per_actor, cpus)
    return min(actors, cpus // workers), workers


def _local_ray(ray: Any) -> bool:
    """Return whether the Ray this process is connected to is this machine alone (one node, at this address)."""
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    return len(nodes) == 1 and nodes[0].get("NodeManagerAddress") == ray.util.get_node_ip_address()


class _SandboxActor:
    """The body of one Ray actor: a local Sandbox pool and the one call the trainer makes of it."""

    def __init__(self, workers: int, options: dict):
        self.pool = local.Sandbox(workers=workers, **options)

    def isolation(self) -> dict:
        return self.pool.isolation

    def run_detailed(self, program: Any, suite: TestSuite, timeout_s: float, max_timeouts: int,
                     total_s: float | None = None, cpu_budget_s: float | None = None) -> RunReport:
        if isinstance(program, bytes):   # a code object travels marshalled (see RaySandbox.run_detailed)
            program = marshal.loads(program)
        return self.pool.run_detailed(program, suite, timeout_s, max_timeouts, total_s=total_s,
                                      cpu_budget_s=cpu_budget_s)


class RaySandbox:
    """Sandbox pools on a Ray cluster with the local pool's interface. `actors` pools of `workers_per_actor`
    workers each (Ray reserves that many CPUs per actor and spreads the actors over the nodes); `in_flight`
    programs at most per actor at once; `retries` reruns of a program whose actor died; `options` go to each
    actor's `Sandbox` (memory_mb, nproc, ...). `address`: the cluster to join when Ray is not initialized yet
    (None: RAY_ADDRESS, else a local Ray started here). `fit_local`: on a local Ray, fewer or smaller pools when
    the request does not fit its free CPUs (logged); `placement_timeout_s`: PlacementError when the pools are not
    all placed by then (a cluster without the CPUs, or a local Ray with fitting off)."""

    def __init__(self, actors: int = 2, workers_per_actor: int = 1, *, in_flight: int | None = None,
                 retries: int = 2, address: str | None = None, fit_local: bool = True,
                 placement_timeout_s: float = PLACEMENT_TIMEOUT_S, **options: Any):
        import ray   # optional: only the ray executor needs it

        self._ray = ray
        if not ray.is_initialized():
            ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
        actors, workers_per_actor = int(actors), int(workers_per_actor)
        if fit_local and _local_ray(ray):
            cpus = int(ray.available_resources().get("CPU", 0))
            fitted = fit_pools(actors, workers_per_actor, cpus)
            if fitted != (actors, workers_per_actor):
                logger.warning("ray sandbox: %d pools x %d workers need %d CPUs, the local Ray has %d free: using %d "
                               "pool(s) x %d workers (reward.ray_actors, reward.ray_workers_per_actor)", actors,
                               workers_per_actor, actors * workers_per_actor, cpus, *fitted)
            actors, workers_per_actor = fitted
        self.workers_per_actor = workers_per_actor
        self.workers = int(actors) * self.workers_per_actor
        self.in_flight = int(in_flight or 2 * self.workers_per_actor)
        self.retries = int(retries)
        self._options = options
        self._remote = ray.remote(num_cpus=self.workers_per_actor, max_restarts=0,
                                  scheduling_strategy="SPREAD")(_SandboxActor)
        self._actors = [self._new_actor() for _ in range(int(actors))]
        self._busy = [0] * len(self._actors)   # programs sent to each actor and not answered yet
        self._free = threading.Condition()
        self._closed = False
        self._pid = os.getpid()   # `rewards.sandbox.default_sandbox` checks both
        self._executor = ThreadPoolExecutor(len(self._actors) * self.in_flight, thread_name_prefix="ray-sandbox")
        self.isolation = self._placed(placement_timeout_s)
        logger.info("ray sandbox: %d actors x %d workers on %d nodes", len(self._actors), self.workers_per_actor,
                    len({n["NodeID"] for n in ray.nodes() if n.get("Alive")}))

    def _placed(self, timeout_s: float) -> dict:
        """Return the isolation of the pools once every one is placed and started; PlacementError (the actors
        stopped) when they are not all placed within `timeout_s`."""
        try:
            return self._ray.get([actor.isolation.remote() for actor in self._actors], timeout=timeout_s)[0]
        except self._ray.exceptions.GetTimeoutError:
            cpus = [int(n.get("Resources", {}).get("CPU", 0)) for n in self._ray.nodes() if n.get("Alive")]
            self.close()
            raise PlacementError(
                f"{len(self._actors)} pool(s) of {self.workers_per_actor} CPUs were not placed within {timeout_s:g} s "
                f"(the cluster's nodes have {', '.join(map(str, cpus)) or 'no'} CPUs, "
                f"{int(self._ray.available_resources().get('CPU', 0))} free)") from None

    def _new_actor(self):
        return self._remote.remote(self.workers_per_actor, self._options)

    # -- placing a program: the least busy actor with a free place; wait when every actor is full
    def _acquire(self) -> int:
        with self._free:
            while True:
                if self._closed:
                    raise RuntimeError("the sandbox is closed")
                index = min(range(len(self._busy)), key=self._busy.__getitem__)
                if self._busy[index] < self.in_flight:
                    self._busy[index] += 1
                    return index
                self._free.wait()

    def _release(self, index: int) -> None:
        with self._free:
            self._busy[index] -= 1
            self._free.notify()

    def _replace(self, index: int, dead, kill: bool = False) -> None:
        with self._free:
            if self._actors[index] is dead:   # another thread may have replaced it already
                logger.warning("ray sandbox: actor %d is gone or hangs; starting a new one", index)
                self._actors[index] = self._new_actor()
        if kill:
            self._ray.kill(dead)

    def run_detailed(self, program: str | CodeType, tests: TestSuite | str, timeout_s: float = 10.0,
                     max_timeouts: int = 3, *, entry_point: str | None = None, total_s: float | None = None,
                     cpu_budget_s: float | None = None) -> RunReport:
        """Run `program` against `tests` on one of the cluster's pools; the same report as `Sandbox.run_detailed`
        (a program whose actors kept dying fails its tests with "sandbox error"; `total_s` and `cpu_budget_s`
        bound the whole run as there)."""
        suite = local.as_suite(tests, entry_point)
        try:
            payload = marshal.dumps(program) if isinstance(program, CodeType) else program
        except ValueError as e:   # nested deeper than marshal goes: no actor can load it (as `Sandbox.run_detailed`)
            return local.load_failed_report(suite, f"the program cannot be loaded: {e}")
        budget = timeout_s * max(1, len(suite.units)) + 60   # the actor's own pool bounds the run itself
        why = ""
        for _ in range(self.retries + 1):
            index = self._acquire()
            actor = self._actors[index]
            try:
                ref = actor.run_detailed.remote(payload, suite, timeout_s, max_timeouts, total_s, cpu_budget_s)
                return self._ray.get(ref, timeout=budget)
            except self._ray.exceptions.GetTimeoutError:   # the actor's own pool ends every run sooner: it hangs
                why = "no reply in time"
                self._replace(index, actor, kill=True)
                break
            except (self._ray.exceptions.RayActorError, self._ray.exceptions.WorkerCrashedError,
                    self._ray.exceptions.NodeDiedError) as e:
                why = f"actor lost ({type(e).__name__})"
                self._replace(index, actor)
            finally:
                self._release(index)
        return local.failed_report(suite, why)

    def run(self, program: str | CodeType, tests: TestSuite | str, timeout_s: float = 10.0, max_timeouts: int = 3,
            *, entry_point: str | None = None) -> list[TestOutcome]:
        """Like `run_detailed`, the outcomes only."""
        return self.run_detailed(program, tests, timeout_s, max_timeouts, entry_point=entry_point).outcomes

    def map_detailed(self, fn, items: Sequence[Any]) -> list[Any]:
        """Apply `fn` to items on this pool's threads (fn may call `run_detailed`); results in order."""
        return list(self._executor.map(fn, items))

    def close(self) -> None:
        """Stop the actors (each closes its pool, which leaves no process behind)."""
        with self._free:
            if self._closed:
                return
            self._closed = True
            self._free.notify_all()
        self._executor.shutdown(wait=False)
        for actor in self._actors:
            try:
                self._ray.kill(actor)
            except Exception:   # noqa: BLE001 - Ray already shut down
                pass

    def __enter__(self) -> "RaySandbox":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def make_sandbox(executor: str = "local", **options: Any):
    """Return the reward's executor: `local` (a `Sandbox` on this machine) or `ray` (a `RaySandbox`). The options go
    to the one chosen (for ray: actors, workers_per_actor, in_flight, retries, address, and the Sandbox limits)."""
    if executor == "local":
        return local.Sandbox(**options)
    if executor == "ray":
        return RaySandbox(**options)
    raise ValueError(f"reward executor {executor!r}: expected local or ray")


def use_sandbox(pool) -> None:
    """Make `pool` the process-wide executor of the reward (what `rewards.sandbox.default_sandbox()` returns)."""
    with local._default_lock:
        previous, local._default = local._default, pool
    if previous is not None and previous is not pool and previous._pid == os.getpid():
        previous.close()



def use_configured_executor(reward: Any) -> None:
    """Make the process-wide executor of the reward as a config's `reward` section says: local or on Ray, refused
    (ConfigError naming the key) when `require_full_isolation` is set and the sandbox cannot isolate fully, or when
    Ray is missing."""
    from cooprl.config import ConfigError
    options: dict[str, Any] = {"require_full_isolation": reward.require_full_isolation}
    if reward.executor == "ray":
        options.update(actors=reward.ray_actors, address=reward.ray_address,
                       workers_per_actor=reward.ray_workers_per_actor,
                       placement_timeout_s=reward.ray_placement_timeout_s)
    try:
        use_sandbox(make_sandbox(reward.executor, **options))
    except ImportError as e:
        raise ConfigError(f"reward.executor: ray needs the ray extra (pip install 'cooprl[ray]'): {e}") from None
    except PlacementError as e:
        raise ConfigError(f"reward.ray_actors={reward.ray_actors} x reward.ray_workers_per_actor="
                          f"{reward.ray_workers_per_actor}: the Ray cluster cannot place these sandbox pools: {e}; "
                          "lower them, or add CPU nodes (reward.ray_placement_timeout_s: how long to wait)") from None
    except IsolationError as e:
        raise ConfigError(f"reward.require_full_isolation: {e}") from None
