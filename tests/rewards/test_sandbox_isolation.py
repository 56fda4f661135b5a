"""The sandbox's isolation, round 3 of the adversary (issue 27): no user namespaces, memory and processes bounded
per program as a whole, a CPU affinity that cannot be widened, no timestamps carried from one program to the next,
results that are not plain data failing their test whatever the test catches, and a zygote no program's signal can
end. (Finding the cgroups is test_sandbox_cgroup.py's.)

Each test plays the adversary against a one-slot pool (every program follows the last one on the same worker).
Where there is no cgroup to bound a program as a whole (not root), the sandbox falls back to per-process bounds
(RLIMIT_AS times RLIMIT_NPROC, memfds refused, tmpfs by its size); the memory tests say what they expect of each
mode from the pool's isolation report."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from rewards.sandbox import Sandbox, TestSuite  # noqa: E402
from rewards.sandbox_view import SCRATCH_DIRS  # noqa: E402
# the adversary's probes are round 1's (test_sandbox_leaks): a value read back through the assert's message
from tests.rewards.test_sandbox_leaks import HONEST, ONE, answer, honest_passes  # noqa: E402

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox's isolation is Linux's")

LIBC = "import ctypes, os, platform\nlibc = ctypes.CDLL(None, use_errno=True)\n"


@pytest.fixture(scope="module")
def box():
    with Sandbox(workers=1) as sandbox:
        yield sandbox


def has_cgroup(box) -> bool:
    return any("as a whole: cgroup" in h for h in box.isolation["have"])


# --------------------------------------------------------------------------------- no user namespace

NAMESPACES = LIBC + (
    "import subprocess, sys\n"
    "def f(x):\n"
    "    USER, NET, NS = 0x10000000, 0x40000000, 0x00020000\n"
    "    out = {}\n"
    "    out['unshare'] = [libc.unshare(USER | NET | NS), ctypes.get_errno()]\n"
    "    out['unshare_user'] = [libc.unshare(USER), ctypes.get_errno()]\n"
    "    try:\n"
    "        os.unshare(USER | NET)\n"        # Python 3.12+
    "        out['os.unshare'] = 'done'\n"
    "    except OSError as e:\n"
    "        out['os.unshare'] = e.errno\n"
    "    except AttributeError:\n"
    "        out['os.unshare'] = 'absent'\n"
    "    nr = {'x86_64': (56, 435), 'aarch64': (220, 435)}[platform.machine()]\n"
    "    r = libc.syscall(nr[0], USER | 17, 0, 0, 0, 0)\n"          # clone(CLONE_NEWUSER | SIGCHLD)
    "    if r == 0:\n"
    "        os._exit(0)\n"
    "    out['clone'] = [r, ctypes.get_errno()]\n"
    "    args = (ctypes.c_uint64 * 11)(USER | NET, 0, 0, 0, 17, 0, 0, 0, 0, 0, 0)\n"
    "    r = libc.syscall(nr[1], ctypes.byref(args), ctypes.sizeof(args))\n"   # clone3
    "    if r == 0:\n"
    "        os._exit(0)\n"
    "    out['clone3'] = [r, ctypes.get_errno()]\n"
    "    out['user_ns_visible'] = os.readlink('/proc/self/ns/user') if os.path.exists('/proc/self/ns/user') else ''\n"
    "    return out\n")


def test_no_program_can_create_a_user_namespace(box):
    out = answer(box, NAMESPACES)
    assert out["unshare"] == [-1, 1] and out["unshare_user"] == [-1, 1], out      # EPERM
    assert out["os.unshare"] in (1, "absent"), out
    assert out["clone"] == [-1, 1], out
    assert out["clone3"] == [-1, 38], out                                          # ENOSYS
    assert honest_passes(box)


def test_threads_fork_and_subprocess_still_work(box):
    # clone3 answers ENOSYS: the C library falls back to clone for threads and posix_spawn
    program = ("import os, subprocess, sys, threading\n"
               "def f(x):\n"
               "    box = []\n"
               "    t = threading.Thread(target=lambda: box.append(21 * 2))\n"
               "    t.start(); t.join()\n"
               "    try:\n"
               "        pid = os.fork()\n"
               "        if pid == 0:\n"
               "            os._exit(7)\n"
               "        forked = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])\n"
               "        sub = subprocess.run([sys.executable, '-c', 'print(6 * 7)'], capture_output=True,\n"
               "                             text=True).stdout.strip()\n"
               "    except OSError as e:\n"
               "        forked, sub = 'refused', e.errno\n"
               "    return [box, forked, sub]\n")
    assert answer(box, program) == [[42], 7, "42"]


# --------------------------------------------------------------------------------- memory and processes as a whole

HOLDER = (
    "import os, time\n"
    "def f(x):\n"
    "    r, w = os.pipe()\n"
    "    for _ in range(3):\n"                                   # 3 processes of 90 MiB each ...
    "        if os.fork() == 0:\n"
    "            a = bytearray(90 << 20)\n"
    "            for i in range(0, len(a), 4096):\n"
    "                a[i] = 1\n"
    "            os.write(w, b'k')\n"
    "            time.sleep(60)\n"
    "            os._exit(0)\n"
    "    fds = []\n"
    "    for _ in range(6):\n"                                   # ... and 6 memfds of 15 MiB (no address space)
    "        fd = os.memfd_create('m')\n"
    "        for _ in range(15):\n"
    "            os.write(fd, b'x' * (1 << 20))\n"
    "        fds.append(fd)\n"
    "    got = b''\n"
    "    while len(got) < 3:\n"
    "        got += os.read(r, 3)\n"
    "    return 'held 360 MiB'\n")


@pytest.mark.parametrize("program", [
    HOLDER,
    # one process: 100 MiB of bytes plus memfds written, never mapped (RLIMIT_AS sees none of them)
    "import os\ndef f(x):\n    a = b'1' * (100 << 20)\n    fds = []\n    for _ in range(6):\n"
    "        fd = os.memfd_create('m')\n        for _ in range(15):\n            os.write(fd, b'x' * (1 << 20))\n"
    "        fds.append(fd)\n    return 'held 190 MiB'\n",
    # tmpfs files in every scratch dir
    "import os\ndef f(x):\n    a = b'1' * (60 << 20)\n"
    f"    for d in {list(SCRATCH_DIRS)!r}:\n"
    "        for i in range(3):\n"
    "            with open(os.path.join(d, f'big{i}'), 'wb') as fh:\n"
    "                fh.write(b'x' * (15 << 20))\n"
    "    return 'held 240 MiB'\n",
], ids=["forks_and_memfds", "memfds_unmapped", "tmpfs_files"])
def test_memory_is_bounded_per_program_as_a_whole(program):
    # with a cgroup, everything the program holds counts against memory_mb; without one (the fallback), memfds
    # are refused and the scratch dirs hold what their tmpfs size allows (here 16 MiB each)
    tests = "def check(candidate):\n    assert candidate(0).startswith('held')\n"
    with Sandbox(workers=1, memory_mb=128) as probe:
        tmpfs_mb = 64 if has_cgroup(probe) else 16
    with Sandbox(workers=1, memory_mb=128, tmpfs_mb=tmpfs_mb) as small:
        # 8 s, not the 20 s the program gets below: unbounded it holds its memory within a second or two, and bounded
        # the fork holder's parent waits for children the bound killed until the time limit (it used to take 20 s)
        report = small.run_detailed(program, tests, 8.0, 1, entry_point="f")
        assert not report.outcomes[0].passed, report
        assert honest_passes(small)
        if has_cgroup(small):   # and the same program fits where the bound allows it
            with Sandbox(workers=1, memory_mb=1024) as big:
                assert big.run_detailed(program, tests, 20.0, 1, entry_point="f").outcomes[0].passed


def test_processes_are_bounded_per_program_as_a_whole():
    # each process stays far below the memory bound; together they may not pass `nproc`
    program = ("import os, time\ndef f(x):\n    n = 0\n    for _ in range(40):\n        try:\n"
               "            if os.fork() == 0:\n                time.sleep(60)\n                os._exit(0)\n"
               "            n += 1\n        except OSError:\n            break\n    return n\n")
    with Sandbox(workers=1, nproc=16) as small:
        n = answer(small, program)
        assert n < 16, n
        assert honest_passes(small)


def test_startup_line_says_how_programs_are_bounded(box, caplog):
    import logging
    with caplog.at_level(logging.INFO, logger="cooprl.sandbox"):
        Sandbox(workers=1).close()
    line = caplog.records[-1].getMessage()
    assert ("as a whole: cgroup v" in line) or ("fallback: memory per process (RLIMIT_AS)" in line), line
    if os.geteuid() == 0 and has_cgroup(box):
        assert "missing: nothing" in line, line


# --------------------------------------------------------------------------------- CPU affinity

@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="a pinned slot needs two CPUs to choose from")
def test_a_program_cannot_widen_its_cpu_affinity(box):
    program = LIBC + (
        "import threading\n"
        "def f(x):\n"
        "    every = set(range(os.cpu_count()))\n"
        "    for who in (0, os.getpid()):\n"
        "        try:\n"
        "            os.sched_setaffinity(who, every)\n"
        "        except OSError:\n"
        "            pass\n"
        "    mask = ctypes.c_uint64(-1)\n"
        "    nr = {'x86_64': 203, 'aarch64': 122}[platform.machine()]\n"
        "    libc.syscall(nr, 0, 8, ctypes.byref(mask))\n"
        "    seen = []\n"
        "    t = threading.Thread(target=lambda: (os.sched_setaffinity(0, every) if False else None,\n"
        "                                         seen.append(sorted(os.sched_getaffinity(0)))))\n"
        "    t.start(); t.join()\n"
        "    return [sorted(os.sched_getaffinity(0))] + seen\n")
    cpu = box._cpus[0]
    assert answer(box, program) == [[cpu], [cpu]]


# --------------------------------------------------------------------------------- nothing crosses, timestamps included

PATHS = list(SCRATCH_DIRS) + [".", "/dev/null", "/dev/zero", "/dev/full", "/dev/urandom", "/dev/random", "/dev",
                              "/", "/proc"]
MARK = 1_234_567_890_123_456_789   # ns: an unlikely time


def test_no_timestamps_cross_from_one_program_to_the_next(box):
    # program A marks every path it can reach (an explicit time where it may, else "now" where it may write);
    # program B, next on the same slot, must find none of those times
    mark = ("import os, time\ndef f(x):\n"
            "    done = {}\n"
            f"    for p in {PATHS!r}:\n"
            "        for times in ({'ns': (MARK, MARK)}, {}):\n"
            "            try:\n"
            "                os.utime(p, **times)\n"
            "                st = os.stat(p)\n"
            "                done[p] = [st.st_atime_ns, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]\n"
            "                break\n"
            "            except OSError:\n"
            "                pass\n"
            "    time.sleep(0.1)\n"   # file times are coarse (a clock tick): "now" must be a past tick for B
            "    return done\n").replace("MARK", str(MARK))
    look = ("import os\ndef f(x):\n"
            f"    return {{p: [s.st_atime_ns, s.st_mtime_ns, s.st_ctime_ns, s.st_ino] for p in {PATHS!r} "
            "for s in [os.stat(p)]}\n")
    marked = answer(box, mark)
    assert any(p in marked for p in SCRATCH_DIRS), marked   # a program may touch its scratch dirs
    seen = answer(box, look)
    for path, (atime, mtime, ctime, _) in marked.items():
        assert MARK not in seen[path][:2], (path, seen[path])
        assert seen[path][:3] != [atime, mtime, ctime], (path, marked[path], seen[path])
    assert not any(p.startswith("/dev/") and p not in SCRATCH_DIRS for p in marked), marked   # read-only binds


def test_devices_still_work_read_only_bound(box):
    program = ("def f(x):\n    with open('/dev/null', 'w') as n:\n        n.write('gone')\n"
               "    with open('/dev/zero', 'rb') as z:\n        zero = z.read(4)\n"
               "    with open('/dev/urandom', 'rb') as u:\n        rnd = len(u.read(8))\n"
               "    try:\n        open('/dev/full', 'w').write('x' * 10000)\n        full = 'no error'\n"
               "    except OSError as e:\n        full = e.errno\n"
               "    return [zero, rnd, full]\n")
    assert answer(box, program) == [b"\0\0\0\0", 8, 28]   # ENOSPC from /dev/full


def test_scratch_inode_numbers_do_not_count_earlier_programs(box):
    # a program that makes and removes many files leaves the scratch dirs empty; the next one's files must not
    # show it (the inode numbers of a reused tmpfs would)
    churn = ("import os\ndef f(x):\n"
             f"    for d in {list(SCRATCH_DIRS)!r}:\n"
             "        for i in range(300):\n"
             "            p = os.path.join(d, f'c{i}')\n"
             "            open(p, 'w').close()\n"
             "            os.unlink(p)\n"
             "    return True\n")
    probe = ("import os\ndef f(x):\n    out = []\n"
             f"    for d in {list(SCRATCH_DIRS)!r}:\n"
             "        p = os.path.join(d, 'probe')\n"
             "        open(p, 'w').close()\n"
             "        out.append(os.stat(p).st_ino)\n"
             "    return out\n")
    quiet = answer(box, probe)
    assert answer(box, churn) is True
    assert answer(box, probe) == quiet


# --------------------------------------------------------------------------------- results that are not plain data

@pytest.mark.parametrize("result", [
    "object()",
    "type('Eq', (), {'__eq__': lambda s, o: True, '__hash__': None})()",
    "type('I', (int,), {'__eq__': lambda s, o: True, '__hash__': int.__hash__})(3)",
    "type('S', (str,), {})('3')",
    "[1, 2, type('B', (), {'__bool__': lambda s: True, '__repr__': lambda s: '3'})()]",
    "{'k': {1: type('F', (float,), {})(3.0)}}",
    "(lambda: 3)",
    "iter([3])",
    "10 ** 5000",   # plain, but past what the encoder may write: no credit either
])
@pytest.mark.parametrize("catch", ["Exception", "BaseException", ""])
def test_a_result_that_is_not_plain_data_fails_whatever_the_test_catches(box, result, catch):
    program = f"def f(x):\n    return {result}\n"
    test = f"try:\n    assert candidate(1) == 3\nexcept {catch}:\n    pass\n".replace("except :", "except:")
    report = box.run_detailed(program, TestSuite("f", (("test", test, test),)), 5.0, 1)
    assert not report.outcomes[0].passed, report
    assert "plain data" in report.outcomes[0].error, report


def test_an_exception_the_test_expects_still_passes(box):
    # the candidate raising is not the same as a result that is not plain data: a test may expect it (the
    # worker sees the candidate's exception as an Exception, whatever its type in the program)
    program = "def f(x):\n    raise ValueError('negative')\n"
    test = "try:\n    candidate(-1)\n    assert False\nexcept AssertionError:\n    raise\nexcept Exception:\n    pass\n"
    assert box.run(program, TestSuite("f", (("test", test, test),)), 5.0, 1)[0].passed


# --------------------------------------------------------------------------------- signals cannot end the zygote

def test_signals_from_a_program_cannot_end_its_zygote(box):
    # the zygote is the init of the programs' PID namespace; where programs share its uid (unprivileged, in a user
    # namespace), its own handlers were the way in (SIGINT: KeyboardInterrupt)
    program = ("import os, signal\ndef f(x):\n    sent = []\n"
               "    for pid in [1, os.getppid()] + [int(p) for p in os.listdir('/proc') if p.isdigit()]:\n"
               "        if pid == os.getpid():\n            continue\n"
               "        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGQUIT,\n"
               "                    signal.SIGALRM):\n"
               "            try:\n                os.kill(pid, sig)\n                sent.append(pid)\n"
               "            except OSError:\n                pass\n"
               "    return x + 1\n")
    for _ in range(3):
        report = box.run_detailed(program, ONE, 5.0, 1, entry_point="f")
        assert report.error is None, report
        assert report.outcomes[0].passed, report
    assert honest_passes(box)
    assert box.run_detailed(HONEST, ONE, 5.0, 1, entry_point="f").error is None


def _pid_after(box, forks: int) -> int:
    """The pid the program after one that forked (and waited for) `forks` children sees."""
    fork = ("import os\ndef f(x):\n"
            f"    for _ in range({forks}):\n"
            "        pid = os.fork()\n"
            "        if pid == 0:\n"
            "            os._exit(0)\n"
            "        if os.path.isdir('/proc/self'):\n"   # a /proc entry in use would keep its pid number taken
            "            os.stat(f'/proc/{pid}')\n"
            "        os.waitpid(pid, 0)\n"
            "    return os.getpid()\n")
    answer(box, fork)
    return answer(box, "import os\ndef f(x):\n    return [os.getpid(), os.path.exists('/proc/loadavg') and "
                       "open('/proc/loadavg').read().split()[-1]]\n")


def test_pid_numbers_do_not_count_earlier_programs(box):
    # a program that forks many processes must not shift the pids (nor the last pid in /proc/loadavg) the next
    # program sees: otherwise it could pass a number to it
    quiet = _pid_after(box, 0)
    busy = _pid_after(box, 50)
    assert busy == quiet, (quiet, busy)
    assert _pid_after(box, 7) == quiet


def test_proc_lookup_times_do_not_cross_from_one_program_to_the_next(box):
    # /proc's inodes take their times at their first lookup: program A looks entries up (at a time of its choosing),
    # program B, next on the same slot, must find its own lookup times, not A's
    paths = ["/proc", "/proc/self", "/proc/1", "/proc/1/stat", "/proc/meminfo", "/proc/sys", "/proc/sys/kernel",
             "/proc/sys/kernel/hostname", "/proc/loadavg", "/proc/uptime", "/proc/self/status"]
    look = ("import os, time\ndef f(x):\n"
            "    seen = {}\n"
            f"    for p in {paths!r}:\n"
            "        try:\n"
            "            s = os.lstat(p)\n"
            "            seen[p] = [s.st_atime_ns, s.st_mtime_ns, s.st_ctime_ns]\n"
            "        except OSError:\n"
            "            pass\n"
            "    time.sleep(0.1)\n"   # file times are coarse (a clock tick): B's lookups fall on a later tick
            "    return seen\n")
    first = answer(box, look)
    no_proc = any("no /proc" in line for line in box.isolation["have"])
    if no_proc:   # (no PID namespace, or a host /proc partly masked) an empty read-only directory, made once
        assert list(first) == ["/proc"], first
    else:
        assert len(first) >= 6, first
    second = answer(box, look)
    same = [p for p in first if p in second and second[p] == first[p] and not no_proc]
    assert not same, {p: (first[p], second[p]) for p in same}


def test_the_zygote_tells_nothing_of_earlier_programs(box):
    # the zygote reaps every program: the times and page faults of its reaped children (its /proc/1/stat) must not
    # be readable by the next program, or a program could pass a number on by the CPU it burns
    read = ("def f(x):\n    try:\n        with open('/proc/1/stat') as s:\n"
            "            return s.read().rpartition(')')[2].split()[7:15]\n"
            "    except OSError:\n        return None\n")
    burn = "import time\ndef f(x):\n    end = time.process_time() + 0.3\n    while time.process_time() < end:\n" \
           "        [0] * 1000\n    return 0\n"
    before = answer(box, read)
    answer(box, burn)
    assert answer(box, read) == before


# --------------------------------------------------------------------------------- the judge is out of reach (42)

JUDGED = ["assert f(1) == 2", "assert f(2) == 3 and f(0) == 1"]

# forks a child (its pid tells whether a process of the slot took a number before it), lists the pids it can see,
# and sends SIGKILL to every pid up to 400 but its own (where programs share one uid with the worker's helpers:
# unprivileged, in a user namespace, this reached the judge)
REACH = ("import os, signal\ndef f(x):\n"
         "    child = os.fork()\n"
         "    if child == 0:\n        os._exit(0)\n"
         "    os.waitpid(child, 0)\n"
         "    seen = sorted(int(p) for p in os.listdir('/proc') if p.isdigit()) if os.path.isdir('/proc/1') else []\n"
         "    killed = []\n"
         "    for pid in range(1, 400):\n"
         "        if pid != os.getpid():\n"
         "            try:\n                os.kill(pid, signal.SIGKILL)\n                killed.append(pid)\n"
         "            except OSError:\n                pass\n"
         "    return [os.getpid(), child, seen, killed]\n")


def judged_verdicts(box) -> list[tuple[bool, bool]]:
    from rewards.judged_tests import judged_suite
    report = box.run_detailed(HONEST, judged_suite("f", JUDGED), 5.0, 2)
    assert report.error is None, report
    return [(o.passed, o.on_values) for o in report.outcomes]


def test_no_program_can_see_or_signal_the_judge(box):
    # the judge of judged tests lived in the programs' PID namespace: a program saw whether a judged job had run
    # before it (pid 3 taken: its children numbered from 4) and, unprivileged, killed it, after which every test
    # of the next judged job failed "on values" (another coder's row, or the reference's: -1 to a tester)
    before = answer(box, REACH)
    assert judged_verdicts(box) == [(True, True)] * 2   # a judge now exists
    pid, child, seen, killed = answer(box, REACH)
    assert [pid, child] == before[:2], (before, pid, child)   # no number taken by the judge
    assert set(seen) <= {1, pid, child} and set(killed) <= {1, child}, (seen, killed)
    assert judged_verdicts(box) == [(True, True)] * 2   # the same judge, alive


def _judge_processes(box) -> tuple[int, int]:
    """(the judge host's pid, the judge's pid) of the one-slot pool, as the host's /proc numbers them."""
    def children(pid: int) -> list[int]:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    worker = box._slots[0].proc.pid
    for host in children(worker):
        judges = [c for c in children(host) if not open(f"/proc/{c}/comm").read().startswith("sbx-")]
        if judges and not any(open(f"/proc/{c}/comm").read().startswith("sbx-") for c in children(host)):
            return host, judges[0]
    raise AssertionError("no judge found")


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="finds the judge through /proc")
def test_a_lost_judge_is_a_sandbox_error_and_a_retry_never_a_verdict(box):
    import signal
    import time
    assert judged_verdicts(box) == [(True, True)] * 2
    host, judge = _judge_processes(box)
    os.kill(judge, signal.SIGKILL)                       # lost between jobs (the OOM killer, say)
    time.sleep(0.1)
    assert judged_verdicts(box) == [(True, True)] * 2   # the job ran again on a fresh judge
    os.kill(host, signal.SIGKILL)                        # no judge can be had: a sandbox error, no verdict
    time.sleep(0.1)
    from rewards.judged_tests import judged_suite
    report = box.run_detailed(HONEST, judged_suite("f", JUDGED), 5.0, 2)
    assert report.error and "judge" in report.error, report
    assert [(o.passed, o.on_values) for o in report.outcomes] == [(False, False)] * 2
    assert judged_verdicts(box) == [(True, True)] * 2   # a fresh worker, and with it a judge host


# --------------------------------------------------------------------------------- limits are each program's (42)

LIMITS = ("import os, resource\ndef f(x):\n"
          "    names = ('RLIMIT_AS', 'RLIMIT_STACK', 'RLIMIT_NOFILE', 'RLIMIT_FSIZE', 'RLIMIT_NPROC', 'RLIMIT_DATA')\n"
          "    block = bytearray(400 << 20)\n"   # more than the 300 MiB a program set on the zygote before
          "    return [[n, list(resource.getrlimit(getattr(resource, n)))] for n in names] + [\n"
          "        os.getpriority(os.PRIO_PROCESS, 0), os.sched_getscheduler(0), len(block) >> 20]\n")

# every way a program may reach another process's limits, priority, scheduling or memory, each on the zygote
# (pid 1) and on its parent; with its errno (0: done). Unprivileged, the programs share the zygote's uid: a
# prlimit on it bounded every later program of the slot (MemoryError at 300 MiB, a 64 KiB stack).
REACH_OTHERS = LIBC + (
    "import resource\nSYS = {'x86_64': {'ptrace': 101, 'vm_readv': 310, 'vm_writev': 311, 'ioprio_set': 251,\n"
    "       'kcmp': 312, 'pidfd_getfd': 438}, 'aarch64': {'ptrace': 117, 'vm_readv': 270, 'vm_writev': 271,\n"
    "       'ioprio_set': 30, 'kcmp': 272, 'pidfd_getfd': 438}}[platform.machine()]\n"
    "def errno(call):\n"
    "    try:\n        call()\n        return 0\n    except OSError as e:\n        return e.errno\n"
    "def raw(name, *args):\n"
    "    return 0 if libc.syscall(SYS[name], *args) >= 0 else ctypes.get_errno()\n"
    "def f(x):\n"
    "    out = {}\n"
    "    for pid in sorted({1, os.getppid()}):\n"
    "        out[f'prlimit AS {pid}'] = errno(lambda: resource.prlimit(pid, resource.RLIMIT_AS, (300 << 20,) * 2))\n"
    "        out[f'prlimit STACK {pid}'] = errno(\n"
    "            lambda: resource.prlimit(pid, resource.RLIMIT_STACK, (1 << 16,) * 2))\n"
    "        out[f'setpriority {pid}'] = errno(lambda: os.setpriority(os.PRIO_PROCESS, pid, 19))\n"
    "        out[f'sched_setscheduler {pid}'] = errno(\n"
    "            lambda: os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0)))\n"
    "        out[f'sched_setparam {pid}'] = errno(lambda: os.sched_setparam(pid, os.sched_param(0)))\n"
    "        out[f'ioprio_set {pid}'] = raw('ioprio_set', 1, pid, 3 << 13)\n"
    "        out[f'ptrace {pid}'] = raw('ptrace', 16, pid, 0, 0)\n"      # PTRACE_ATTACH
    "        buf = ctypes.create_string_buffer(8)\n"
    "        iov = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 8)\n"
    "        out[f'process_vm_writev {pid}'] = raw('vm_writev', pid, iov, 1, iov, 1, 0)\n"
    "        out[f'process_vm_readv {pid}'] = raw('vm_readv', pid, iov, 1, iov, 1, 0)\n"
    "        out[f'kcmp {pid}'] = raw('kcmp', os.getpid(), pid, 0, 0, 0)\n"
    "    out['setpriority of the uid'] = errno(lambda: os.setpriority(os.PRIO_USER, 0, 19))\n"
    "    out['own: nice'] = errno(lambda: os.nice(1))\n"
    "    out['own: setrlimit'] = errno(lambda: resource.setrlimit(resource.RLIMIT_CORE, (0, 0)))\n"
    "    out['own: prlimit 0'] = errno(lambda: resource.prlimit(0, resource.RLIMIT_NOFILE))\n"
    "    out['own: sched_setscheduler 0'] = errno(\n"
    "        lambda: os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0)))\n"
    "    out['own: ioprio_set 0'] = raw('ioprio_set', 1, 0, (2 << 13) | 4)\n"
    "    return out\n")


def test_no_program_can_change_another_processes_limits_priority_or_memory(box):
    before = answer(box, LIMITS)
    assert before[-1] == 400
    reached = answer(box, REACH_OTHERS)
    own = {k: v for k, v in reached.items() if k.startswith("own: ")}
    assert own == dict.fromkeys(own, 0), own                  # a program still sets its own
    others = {k: v for k, v in reached.items() if k not in own}
    assert others == dict.fromkeys(others, 1), others         # EPERM, every one (seccomp)
    assert answer(box, LIMITS) == before                       # the next program has its limits and priority


def _zygote_pid(box) -> int:
    """The zygote of the one-slot pool, as the host's /proc numbers it (pid 1 of the programs' namespace)."""
    worker = box._slots[0].proc.pid
    with open(f"/proc/{worker}/task/{worker}/children") as f:
        for pid in map(int, f.read().split()):
            with open(f"/proc/{pid}/status") as status:
                if any(line.split()[1:] and line.split()[-1] == "1" for line in status if line.startswith("NSpid:")):
                    return pid
    pytest.skip("no PID namespace: the zygote is not pid 1 of one")


def test_each_program_sets_every_limit_after_the_fork(box):
    # whatever became of the zygote's own limits (lowered here from outside, as only the trainer's user may), each
    # program has those of the configuration: the child sets them all again
    import resource
    before = answer(box, LIMITS)
    zygote = _zygote_pid(box)
    # (low enough to matter to a program, not so low that the zygote itself could not fork)
    lowered = {resource.RLIMIT_AS: 360 << 20, resource.RLIMIT_STACK: 1 << 20, resource.RLIMIT_NOFILE: 40}
    saved = {res: resource.prlimit(zygote, res) for res in lowered}
    try:
        for res, soft in lowered.items():
            resource.prlimit(zygote, res, (soft, saved[res][1]))
        assert answer(box, LIMITS) == before
    finally:
        for res, value in saved.items():
            try:
                resource.prlimit(zygote, res, value)
            except ProcessLookupError:   # (the zygote did not take it: the slot was restarted)
                pass
