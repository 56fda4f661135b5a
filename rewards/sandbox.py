"""The executor of generated code: a pool of isolated, warm worker processes that run programs against tests.

Nothing generated ever runs in the caller's process, and the caller is never forked (it may hold torch and
big models): `Sandbox` starts `workers` long-lived processes (`python -s -P rewards/_sandbox_worker.py`, hash seed
fixed: `WORKER_HASH_SEED`) through
`subprocess`, and feeds them jobs over pipes from threads, so up to `workers` programs run in parallel.
Each worker enters its own network namespace (no interfaces, not even loopback), mount, IPC and PID namespaces, and
a private root file system holding only what `rewards.sandbox_view.interpreter_view` allows (copies of the
interpreter, its standard library and shared libraries on a tmpfs, read-only), forks a *zygote* before it sees any
job, and asks the zygote for one fresh child per program. The child runs in its own session with rlimits (address
space, CPU, processes, file size, open files, no core), fresh scratch dirs, a fresh IPC namespace, a scrubbed
environment, no new privileges, a seccomp filter (no keyring syscalls, no user namespace, no widening of its CPU
affinity, no reach into another process) and, when we are root, its own unprivileged uid per worker slot, so it
cannot signal, ptrace or read the worker, the zygote or the trainer (all root), and a cgroup per slot that bounds its
memory and processes as a whole (`rewards.sandbox_cgroup`; without one, per process). The README's "What a program
can see" table and docs/sandbox.md sum this up. See `_sandbox_worker.py` for the judging protocol: the verdict of
every test is decided in the worker from plain data (exact builtin types), never from what the program prints or how
it exits.

When we are not root the worker tries a user namespace (`unshare(CLONE_NEWUSER|CLONE_NEWNET|CLONE_NEWNS)`),
then runs without namespaces; the one log line at pool start says which isolation is in force and what is
missing.

Tests: a `TestSuite` is a list of units, each `setup` (runs, no verdict) or `test` (one verdict); see
`TestSuite.from_check`. Trusted tests (from a data set) run in the worker with `candidate` replaced by a remote
call; untrusted tests (`trusted=False`, e.g. tests written by a model) run inside the child, where only "did it
raise" is reported.
"""

from __future__ import annotations

import ast
import atexit
import fcntl
import json
import logging
import marshal
import math
import os
import queue
import select
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import CodeType
from typing import Any, Iterable, Sequence

from rewards._sandbox_worker import frame, unframe
from rewards.assert_units import check_units
from rewards.cleaning import PARSE_ERRORS, parse_python
from rewards.sandbox_cgroup import SlotCgroups, make_slot_cgroups
from rewards.sandbox_view import INTERPRETER, SCRATCH_DIRS, InterpreterView, interpreter_view

logger = logging.getLogger("cooprl.sandbox")

WORKER_SCRIPT = Path(__file__).with_name("_sandbox_worker.py")
# Every worker (and so every program: children are forks) hashes str, bytes and datetimes with one fixed seed, so
# no verdict depends on which worker ran it (`str({'a', 'b'})`, `list(a_set)`, a dict built from a set). `-I`
# would ignore PYTHONHASHSEED (it implies -E), so the worker runs with the other two flags -I stands for (-s: no
# user site; -P: no script directory on sys.path) and an environment that holds nothing else of ours (`_start`).
WORKER_HASH_SEED = "0"
WORKER_FLAGS = ("-s", "-P")
UID_BASE = 3_000_000   # slot uids: UID_BASE + 64 * block + slot; blocks are claimed with a lock file per process
UIDS_PER_BLOCK = 64
_COMPOUND = (ast.For, ast.AsyncFor, ast.While, ast.If, ast.With, ast.AsyncWith, ast.Try)


@dataclass(frozen=True)
class TestOutcome:
    """The verdict of one test: its source text, whether it passed, the error, whether it timed out, and whether
    the test itself decided on the values the program returned (`on_values`: it held, or its assert or an
    operation on the values failed), not the program (it raised, ended, ran out of time or returned something
    that is not plain data; any test that calls it that way fails, a tautology too) or the sandbox."""

    __test__ = False   # not a pytest class

    test: str
    passed: bool
    error: str = ""
    timed_out: bool = False
    on_values: bool = False


@dataclass(frozen=True)
class RunReport:
    """Everything one run returns: the outcomes, the program's captured output (capped) and its load error."""

    outcomes: list[TestOutcome]
    output: str = ""
    load_error: str | None = None
    error: str | None = None      # set when the sandbox itself failed (worker died); every test then failed
    elapsed_s: float = 0.0        # the run's wall time on its worker (waiting for a free worker not included)
    cpu_s: float = 0.0            # the CPU time of the run's program (its processes the worker saw), about 10 ms steps


@dataclass(frozen=True)
class TestSuite:
    """Tests for one entry point. `units` are (kind, source, text) with kind 'setup' or 'test'.

    `context` is code run (in the judge, for trusted suites) before the units, e.g. the helpers of the prompt
    and the top level of the test file. `param` is the name the tests call the entry point by. `judged`: the
    tests are judged tests a model wrote (`rewards.judged_tests`), which the worker evaluates in a fork bounded
    as a program is (CPU, memory, each test's deadline), not in itself.
    """

    __test__ = False   # not a pytest class

    entry_point: str
    units: tuple[tuple[str, str, str], ...]
    context: tuple[str, ...] = ()
    param: str = "candidate"
    trusted: bool = True
    judged: bool = False

    @property
    def total(self) -> int:
        return sum(1 for kind, _, _ in self.units if kind == "test")

    @property
    def tests(self) -> list[str]:
        return [text for kind, _, text in self.units if kind == "test"]

    @classmethod
    def from_check(cls, test_source: str, entry_point: str, context: Sequence[str] = (),
                   trusted: bool = True) -> "TestSuite":
        """Split a HumanEval `check(candidate)` into units (`rewards.assert_units.check_units` has the rules).

        A test is an assert, or a statement holding asserts (a loop, say: HumanEval/32, 38, 44, 50, 53, 151),
        that can run and exercises the candidate: it calls the candidate (by the check's parameter, the entry
        point's name, an alias or a helper that calls it) or uses a value computed by calling it, and its
        condition is not constant. `assert True, "..."` (36 HumanEval checks), `assert 1 == 1` and the like
        are setup: every other statement is a `setup` unit, run in order with no verdict. Tests that are not
        inside a `check` function (MBPP style: top-level asserts calling the entry point by name) are accepted
        too. The rest of the test file (e.g. METADATA) joins the context. A file that does not parse gives a
        suite with no tests.
        """
        try:
            module = parse_python(test_source)
            param, parts, rest = check_units(module, entry_point, context)
        except PARSE_ERRORS:   # garbage tests (model-written, say), or nesting a recursive walk cannot take
            return cls(entry_point, (), tuple(context), "candidate", trusted)
        units = []
        for kind, stmt in parts:
            src = ast.unparse(stmt)
            units.append((kind, src, src))
        extra = [ast.unparse(n) for n in rest]
        return cls(entry_point, tuple(units), tuple(context) + tuple(s for s in extra if s), param, trusted)


# ------------------------------------------------------------------------------------------------ the pool


def _claim_uid_block() -> tuple[int, Any]:
    """Claim a block of uids no other live sandbox on this machine uses (flock on a file per block)."""
    lock_dir = Path("/tmp/cooprl-sandbox-uids")
    lock_dir.mkdir(mode=0o700, exist_ok=True)
    for block in range(4096):
        f = open(lock_dir / f"{block}.lock", "a+")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            continue
        return UID_BASE + UIDS_PER_BLOCK * block, f
    raise RuntimeError("no free uid block for the sandbox")


def _short_isolation(isolation: dict[str, Any]) -> str:
    """Return the start-up line's summary of an isolation report: each layer's name (its words before the first
    parenthesis, colon or path), how memory and processes are bounded (`... as a whole: cgroup vN` or the fallback), and
    what is missing."""
    names, bound = [], ""
    for layer in isolation.get("have", []):
        if layer.startswith(("memory and processes", "no cgroup")):
            bound = layer.split(" /", 1)[0]   # without the cgroup's path
        else:
            names.append(layer.split(" (", 1)[0].split(":", 1)[0].split(" /", 1)[0])
    missing = "; ".join(isolation.get("missing", [])) or "nothing"
    return f"isolation: {', '.join(names) or 'none'}; {bound or 'rlimits per process'}; missing: {missing}"


def _slot_cpus(allowed: list[int], workers: int, uid_base: int | None) -> list[int | None]:
    """The CPU each worker slot is pinned to (its worker, zygote and programs), or None where there is no choice.

    A slot is a chain of hand-offs (trainer -> worker -> program -> worker -> zygote -> ...) with about one
    runnable process at a time. Left to the scheduler, a freshly forked child waits on its parent's busy CPU
    while the other one idles (measured: 7-13% idle on 2 cores, up to 4 ms per stall); pinned, every hand-off
    stays on one CPU and the slots fill all of them (0% idle, 8-15% more programs per second on HumanEval).
    Slots go round the allowed CPUs from an offset that differs between sandboxes on one machine (their uid
    blocks, else their pids), so that several trainers do not all pile onto the first CPUs."""
    if len(allowed) < 2:
        return [None] * workers
    block = (uid_base - UID_BASE) // UIDS_PER_BLOCK if uid_base is not None else os.getpid()
    return [allowed[(block * workers + i) % len(allowed)] for i in range(workers)]


def as_suite(tests: TestSuite | str, entry_point: str | None = None) -> TestSuite:
    """Return `tests` as a TestSuite (a test file is split with `TestSuite.from_check`), calling `entry_point`
    when one is given."""
    suite = tests if isinstance(tests, TestSuite) else TestSuite.from_check(tests, entry_point or "")
    if entry_point and entry_point != suite.entry_point:
        suite = TestSuite(entry_point, suite.units, suite.context, suite.param, suite.trusted)
    return suite


def failed_report(suite: TestSuite, why: str) -> RunReport:
    """Return the report of a run the sandbox itself could not finish: every test failed with "sandbox error"."""
    msg = f"sandbox error: {why}"
    return RunReport([TestOutcome(t, False, msg) for t in suite.tests], error=msg)


def _printable(text: Any) -> str:
    """`text` as a str that encodes to UTF-8: lone surrogates (a program may raise `ValueError('\\ud800')`) are
    written as escapes, since tokenizers, logs and terminals raise on them."""
    text = str(text)
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _write_message(proc: subprocess.Popen, obj: dict) -> None:
    """Send one framed message to a worker (4-byte length, then marshal data; see `Sandbox._read_reply`)."""
    proc.stdin.write(frame(marshal.dumps(obj)))
    proc.stdin.flush()


def _program_fields(program: str | CodeType) -> dict:
    """The job's program: compiled here, on the caller's thread, and sent marshalled, so the worker (the pool's
    bottleneck) does not compile; source that does not compile goes as source, and the worker reports the error
    as the program's load error. A code object marshal refuses gives {"load_error": why}: no worker can load it."""
    if isinstance(program, str):
        try:
            program = compile(program, "<program>", "exec", dont_inherit=True)
        except PARSE_ERRORS:
            return {"program": program}
    try:
        return {"code": marshal.dumps(program)}
    except ValueError as e:   # it compiles, yet nests deeper than marshal goes (1,000 nested lambdas): it cannot run
        return {"load_error": f"the program cannot be loaded: {e}"}


def load_failed_report(suite: TestSuite, why: str) -> RunReport:
    """Return the report of a program that did not load, as the worker gives it: every test failed with `why`."""
    return RunReport([TestOutcome(t, False, why) for t in suite.tests], load_error=why)


class IsolationError(RuntimeError):
    """A Sandbox made with `require_full_isolation` could not isolate its programs fully (the message says how)."""


class _Slot:
    def __init__(self, index: int):
        self.index = index
        self.proc: subprocess.Popen | None = None
        self.buf = bytearray()


class Sandbox:
    """A pool of isolated workers. Thread-safe; a context manager; `close()` kills the workers.

    `run(program, tests, timeout_s, max_timeouts)` runs one program against a `TestSuite` (or a test file
    with `entry_point=`) and returns one `TestOutcome` per test; `run_many(jobs)` runs many in parallel.
    `workers` defaults to the CPUs this process may use; with `pin_cpus` each worker slot (its worker, zygote and
    programs) is pinned to one of them (`_slot_cpus` says why). Where some isolation is missing (not root and no
    user namespaces, say) the pool logs a warning naming it, or with `require_full_isolation` refuses to start
    (`IsolationError`).
    """

    def __init__(self, workers: int | None = None, *, memory_mb: int = 1024, nproc: int = 64,
                 fsize_mb: int = 16, nofile: int = 64, tmpfs_mb: int = 64, tmpfs_inodes: int = 4096,
                 expose_paths: Iterable[str] = (), pin_cpus: bool = True, require_full_isolation: bool = False,
                 debug: bool = False):
        allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        self.workers = max(1, int(workers or len(allowed) or os.cpu_count() or 1))
        self.limits = {"memory_mb": int(memory_mb), "nproc": int(nproc), "fsize_mb": int(fsize_mb),
                       "nofile": int(nofile)}
        self.tmpfs_mb, self.tmpfs_inodes = int(tmpfs_mb), int(tmpfs_inodes)
        view = interpreter_view()
        extra = [os.path.abspath(p) for p in expose_paths]   # e.g. a site-packages with numpy, read-only
        self._copied = view.expose   # copied into each worker's root; the extra paths are bound (`_start`)
        self._bound = tuple(extra)
        self.view = InterpreterView(tuple(sorted(set(view.expose) | set(extra))), view.cover, view.links)
        self.debug = debug
        self._pid = os.getpid()
        self._closed = False
        self._lock = threading.Lock()
        self._uid_base, self._uid_lock = (None, None)
        if os.geteuid() == 0:
            if self.workers > UIDS_PER_BLOCK:
                self.workers = UIDS_PER_BLOCK
            self._uid_base, self._uid_lock = _claim_uid_block()
        self._cpus = _slot_cpus(allowed, self.workers, self._uid_base) if pin_cpus else [None] * self.workers
        # memory and processes per program as a whole (a cgroup per slot; `rewards.sandbox_cgroup`)
        self._cgroups: SlotCgroups | None = None
        self._cgroup_why = "not root"
        if self._uid_base is not None:
            block = (self._uid_base - UID_BASE) // UIDS_PER_BLOCK
            self._cgroups, self._cgroup_why = make_slot_cgroups(f"cooprl-sandbox-b{block}", self.workers,
                                                                int(memory_mb), int(nproc) + 1)   # + the zygote
        self.isolation: dict[str, Any] = {}
        self._slots = [_Slot(i) for i in range(self.workers)]
        self._idle: queue.Queue[_Slot] = queue.Queue()
        with ThreadPoolExecutor(self.workers) as pool:   # start the workers concurrently
            list(pool.map(self._start, self._slots))
        for slot in self._slots:
            self._idle.put(slot)
        # twice as many threads as workers: while one thread waits for its worker, another prepares the next
        # job (cleaning, AST checks in `code_rewards`), so a worker never idles for the trainer's part; the
        # slots (`_idle`) still bound the programs running at once to `workers`
        self._executor = ThreadPoolExecutor(2 * self.workers, thread_name_prefix="sandbox")
        have = "; ".join(self.isolation.get("have", [])) or "none"
        missing = "; ".join(self.isolation.get("missing", [])) or "nothing"
        pinned = f", pinned to CPUs {','.join(map(str, self._cpus))}" if self._cpus[0] is not None else ""
        line = (f"sandbox: {self.workers} workers{pinned}, isolation: {have}; rlimits AS "
                f"{memory_mb} MiB, CPU, NPROC {nproc}, FSIZE {fsize_mb} MiB, NOFILE {nofile}, no core; "
                f"missing: {missing}")
        logger.debug(line)   # the whole report: in the run's train.log (cooprl.console), ~900 characters
        short = f"sandbox: {self.workers} workers{pinned}; {_short_isolation(self.isolation)}"
        (logger.warning if self.isolation.get("missing") else logger.info)(short)
        if require_full_isolation and self.isolation.get("missing"):
            self.close()
            raise IsolationError(f"the sandbox lacks {missing} (full isolation needs root, or unprivileged user "
                                 f"namespaces; see the README's sandbox table)")

    # -- workers
    def _start(self, slot: _Slot) -> None:
        uid = None if self._uid_base is None else self._uid_base + slot.index
        cfg = {"slot": slot.index, "cpu": self._cpus[slot.index], "uid": uid, "gid": uid,
               "copy": list(self._copied), "expose": list(self._bound), "cover": list(self.view.cover),
               "links": [list(link) for link in self.view.links], "scratch": list(SCRATCH_DIRS),
               "tmpfs_mb": self.tmpfs_mb, "tmpfs_inodes": self.tmpfs_inodes, "limits": self.limits,
               "cgroup_kind": self._cgroups.kind if self._cgroups else None, "cgroup_why": self._cgroup_why}
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LD_BIND_NOW": "1", "PYTHONHASHSEED": WORKER_HASH_SEED}
        fds: list[int] = []
        try:
            with self._lock:   # `close` sees every worker that was started: none starts after it
                if self._closed:
                    raise RuntimeError("the sandbox is closed")
                if self._cgroups is not None:
                    try:
                        fds = self._cgroups.open_procs(slot.index)
                    except OSError as e:   # gone since the start (removed by hand?): the fallback, said in the log
                        cfg["cgroup_why"] = f"the slot's cgroup cannot be opened ({e.strerror})"
                cfg["cgroup_fds"] = fds
                slot.proc = subprocess.Popen([INTERPRETER, *WORKER_FLAGS, str(WORKER_SCRIPT), json.dumps(cfg)],
                                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                             stderr=None if self.debug else subprocess.DEVNULL,
                                             env=env, close_fds=True, pass_fds=fds, start_new_session=True)
        finally:
            for fd in fds:
                os.close(fd)
        slot.buf = bytearray()
        ready = self._read_reply(slot, time.monotonic() + 60)
        if not ready or not ready.get("ready"):
            self._kill(slot)
            raise RuntimeError("sandbox worker failed to start")
        self.isolation = ready.get("isolation", {})

    def _kill(self, slot: _Slot) -> None:
        proc = slot.proc
        if proc is None:
            return
        try:
            proc.kill()
        except OSError:
            pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        for f in (proc.stdin, proc.stdout):
            try:
                f.close()
            except OSError:
                pass
        slot.proc = None

    def _read_reply(self, slot: _Slot, deadline: float) -> dict | None:
        """One framed reply of the worker (4-byte length, then marshal data), or None at EOF or the deadline.

        marshal, not JSON: both ends are our own code (the programs never reach the worker's pipes), and it
        encodes and decodes several times faster, on a path every program takes."""
        fd = slot.proc.stdout.fileno()
        while (body := unframe(slot.buf)) is None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return None
            slot.buf += chunk
        try:
            reply = marshal.loads(body)
        except (EOFError, ValueError, TypeError):
            return None
        return reply if isinstance(reply, dict) else None

    # -- running
    def run(self, program: str | CodeType, tests: TestSuite | str, timeout_s: float = 10.0, max_timeouts: int = 3,
            *, entry_point: str | None = None) -> list[TestOutcome]:
        """Run `program` against `tests` (a TestSuite, or a test file with `entry_point`); one outcome per test.

        `program` is source, or a code object from `compile(source, "<program>", "exec")` (the reward compiles
        its programs for its syntax check and hands them over as they are)."""
        return self.run_detailed(program, tests, timeout_s, max_timeouts, entry_point=entry_point).outcomes

    def run_detailed(self, program: str | CodeType, tests: TestSuite | str, timeout_s: float = 10.0,
                     max_timeouts: int = 3, *, entry_point: str | None = None, total_s: float | None = None,
                     cpu_budget_s: float | None = None) -> RunReport:
        """Like `run`, with the program's captured output, load error and time. `total_s` bounds the whole run
        besides each test (wall time), and `cpu_budget_s` the program's CPU time in all (what the machine's load
        does not change): the tests either cuts, and those after them, count as timed out."""
        if os.getpid() != self._pid:
            raise RuntimeError("a Sandbox cannot be used from a forked copy of its process; create a new one")
        if self._closed:
            raise RuntimeError("the sandbox is closed")
        suite = as_suite(tests, entry_point)
        n_units = max(1, len(suite.units))
        fields = _program_fields(program)
        if "load_error" in fields:
            return load_failed_report(suite, fields["load_error"])
        job = {**fields, "entry_point": suite.entry_point, "param": suite.param,
               "context": list(suite.context), "units": [list(u) for u in suite.units],
               "trusted": suite.trusted, "judged": suite.judged,
               "timeout_s": float(timeout_s), "max_timeouts": int(max_timeouts),
               "cpu_s": min(3600, math.ceil(timeout_s * n_units) + 1),
               "total_s": None if total_s is None else float(total_s),
               "cpu_budget_s": None if cpu_budget_s is None else float(cpu_budget_s)}
        slot = self._idle.get()
        try:
            return self._run_on(slot, job, suite, timeout_s * n_units + 30)
        finally:
            self._idle.put(slot)

    def _run_on(self, slot: _Slot, job: dict, suite: TestSuite, budget: float) -> RunReport:
        """Run one job on a slot's worker and return its report. A worker that is gone (found dead, or dead with
        no answer) is replaced and the job runs once more on the new one; a second failure fails the job's tests
        with "sandbox error". After `close` nothing is restarted."""
        why = ""
        started = time.monotonic()
        for attempt in range(2):
            reply = None
            try:
                if slot.proc is None or slot.proc.poll() is not None:
                    self._kill(slot)
                    self._start(slot)
                _write_message(slot.proc, job)
                reply = self._read_reply(slot, time.monotonic() + budget)
                why = "no reply in time" if reply is None else reply.get("error", "")
            except Exception as e:   # noqa: BLE001 - a broken pipe, a closed pool, a worker that did not start
                why = f"{type(e).__name__}: {e}"
            if reply is not None and "outcomes" in reply:
                outcomes = [TestOutcome(_printable(t), bool(p), _printable(e), bool(to), bool(values))
                            for t, p, e, to, values in reply["outcomes"]]
                load_error = reply.get("load_error")
                return RunReport(outcomes, _printable(reply.get("output", "")),
                                 None if load_error is None else _printable(load_error),
                                 elapsed_s=time.monotonic() - started, cpu_s=float(reply.get("cpu_s", 0.0)))
            if self._closed:
                why = "the sandbox was closed"
                break
            died = slot.proc is None or slot.proc.poll() is not None
            logger.warning("sandbox worker %d failed (%s); restarting it", slot.index, why)
            self._kill(slot)
            if not died or attempt:
                break
        try:
            if not self._closed:
                self._start(slot)
        except Exception as e:  # noqa: BLE001 - the next run retries the start
            logger.warning("sandbox worker %d did not restart: %s", slot.index, e)
        return failed_report(suite, _printable(why) or "worker died")

    def run_many(self, jobs: Sequence[Any], timeout_s: float = 10.0, max_timeouts: int = 3
                 ) -> list[list[TestOutcome]]:
        """Run many jobs in parallel on all workers; each job is (program, tests[, timeout_s[, max_timeouts]])
        or a dict with those keys (and optionally entry_point). Results come back in order."""
        def one(job):
            if isinstance(job, dict):
                return self.run(job["program"], job["tests"], job.get("timeout_s", timeout_s),
                                job.get("max_timeouts", max_timeouts), entry_point=job.get("entry_point"))
            program, tests, *rest = job
            return self.run(program, tests, *(list(rest) + [timeout_s, max_timeouts][len(rest):]))
        return list(self._executor.map(one, jobs))

    def map_detailed(self, fn, items: Sequence[Any]) -> list[Any]:
        """Apply `fn` to items on the pool's threads (fn may call `run`); results in order."""
        return list(self._executor.map(fn, items))

    # -- lifetime
    def close(self) -> None:
        """Stop every worker, and with each its zygote and programs (they die with it: the zygote by its
        parent-death signal, the programs with the PID namespace the zygote leads). Runs still in flight end with
        "sandbox error"; nothing is restarted after this."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if os.getpid() != self._pid:
            return
        self._executor.shutdown(wait=False)
        for slot in self._slots:
            proc = slot.proc
            if proc is not None and proc.poll() is None:
                try:
                    _write_message(proc, {"cmd": "exit"})   # an idle worker sweeps its slot and exits
                    proc.wait(timeout=0.5)
                except (OSError, ValueError, subprocess.TimeoutExpired):
                    pass   # a busy one is killed
            self._kill(slot)
        if self._cgroups is not None:
            self._cgroups.remove()
        if self._uid_lock is not None:
            self._uid_lock.close()

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


_default: Sandbox | None = None
_default_lock = threading.Lock()


def default_sandbox() -> Sandbox:
    """The process-wide sandbox (created on first use, one worker per core, closed at exit)."""
    global _default
    with _default_lock:
        if _default is None or _default._closed or _default._pid != os.getpid():
            _default = Sandbox()
        return _default


@atexit.register
def _close_default() -> None:
    if _default is not None and _default._pid == os.getpid():
        _default.close()
