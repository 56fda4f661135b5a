"""The sandbox, round 4 (issue 34, item 5): every process and thread of a program ends with it, and the dentry
cache carries no bits from one program to the next.

A program that leaves something running behind can reach the next program on its slot (the same uid, the same
PID namespace) and kill it: one sample then zeroes the samples after it. Each hostile program here leaves a
"killer" thread or process named `sbx-killer` that sends SIGKILL to every process it may signal, then the test
checks that (1) the next honest program on the slot passes and (2) no task named `sbx-killer` is left anywhere on
the host. The same file runs as `nobody` through `test_sandbox_nonroot.py` (a user namespace, one uid for every
program: the mode where the zombie group leader of the first variant used to survive the sweep)."""

from __future__ import annotations

import glob
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from rewards.sandbox import Sandbox  # noqa: E402
from tests.rewards.test_sandbox_leaks import HONEST, ONE, answer  # noqa: E402

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox's isolation is Linux's")


@pytest.fixture(scope="module")
def box():
    with Sandbox(workers=1) as sandbox:   # one slot: every program follows the last one on the same worker
        yield sandbox


# The killer: names itself (the tests look for it on the host), then, for 3 s, kills every program that starts
# after the hostile one (by its process name and start time: every program is pid 2), or where there is no /proc,
# everything it may signal.
KILLER = (
    "import ctypes, os, signal, threading, time\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "def started(pid):\n"
    "    with open(f'/proc/{pid}/stat') as s:\n"
    "        return s.read().rpartition(')')[2].split()[19]\n"
    "HOSTILE = (os.getpid(), started(os.getpid()) if os.path.exists('/proc/self/stat') else None)\n"
    "def victims():\n"
    "    for d in os.listdir('/proc'):\n"
    "        try:\n"
    "            pid = int(d)\n"
    "            with open(f'/proc/{d}/comm') as c:\n"
    "                if c.read().strip() == 'sbx-program' and pid != os.getpid() and (pid, started(pid)) != HOSTILE:\n"
    "                    yield pid\n"
    "        except (OSError, ValueError, IndexError):\n"
    "            pass\n"
    "def killer():\n"
    "    libc.prctl(15, b'sbx-killer', 0, 0, 0)\n"      # PR_SET_NAME: this thread's name
    "    end = time.monotonic() + 3\n"
    "    while time.monotonic() < end:\n"
    "        try:\n"
    "            for pid in (victims() if HOSTILE[1] else [-1]):\n"
    "                os.kill(pid, signal.SIGKILL)\n"
    "        except OSError:\n"
    "            pass\n"
    "        time.sleep(0.001)\n"
    "def end_main_thread():\n"
    "    libc.syscall(60 if os.uname().machine == 'x86_64' else 93, 0)\n"   # exit, not exit_group: threads live on
    "def f(x):\n"
    "    return x + 1\n")

# Each variant leaves the killer behind in another shape, then returns normally (the job ends, the worker kills
# the program, the next program starts).
SURVIVORS = {
    # the program: a forked child leaves the session, starts a thread, ends its main thread (a zombie
    # group leader with a live thread)
    "setsid_thread_zombie_leader": (
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    threading.Thread(target=killer).start()\n"
        "    end_main_thread()\n"),
    # double fork, setsid: an orphan whose parent is gone, in a session of its own
    "double_fork_setsid": (
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        killer()\n"
        "    os._exit(0)\n"
        "time.sleep(0.05)\n"),
    # double fork, the grandchild a zombie leader with a live thread
    "double_fork_thread_zombie_leader": (
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        threading.Thread(target=killer).start()\n"
        "        end_main_thread()\n"
        "    os._exit(0)\n"
        "time.sleep(0.05)\n"),
    # a process group of its own in the program's session
    "setpgid_thread_zombie_leader": (
        "if os.fork() == 0:\n"
        "    os.setpgid(0, 0)\n"
        "    threading.Thread(target=killer).start()\n"
        "    end_main_thread()\n"),
    # the program a subreaper of its own: orphans come back to it, not to the zygote, until it ends
    "own_subreaper": (
        "libc.prctl(36, 1, 0, 0, 0)\n"                       # PR_SET_CHILD_SUBREAPER
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        threading.Thread(target=killer).start()\n"
        "        end_main_thread()\n"
        "    os._exit(0)\n"
        "time.sleep(0.05)\n"),
    # the program's own main thread ends at load, its killer thread runs on (the job times out)
    "main_thread_ends": (
        "threading.Thread(target=killer).start()\n"
        "end_main_thread()\n"),
    # a stopped process (SIGSTOP): it cannot act until someone continues it, but it must not survive either
    "stopped_orphan": (
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        libc.prctl(15, b'sbx-killer', 0, 0, 0)\n"
        "        os.kill(os.getpid(), signal.SIGSTOP)\n"
        "        killer()\n"
        "    os._exit(0)\n"
        "time.sleep(0.05)\n"),
}


def killers_left() -> list[str]:
    """The host's tasks (threads included) named `sbx-killer`."""
    found = []
    for path in glob.glob("/proc/[0-9]*/task/[0-9]*/comm"):
        try:
            with open(path) as f:
                if f.read().strip() == "sbx-killer":
                    found.append(path)
        except OSError:
            pass
    return found


@pytest.mark.parametrize("variant", sorted(SURVIVORS))
def test_every_process_and_thread_of_a_program_ends_with_it(box, variant):
    hostile = KILLER + SURVIVORS[variant]
    box.run(hostile, ONE, 1.0, 1, entry_point="f")
    # the next honest programs must not be killed: each passes both of its tests
    two = "def check(candidate):\n    assert candidate(1) == 2\n    assert candidate(2) == 3\n"
    for _ in range(3):
        outcomes = box.run(HONEST, two, 5.0, 1, entry_point="f")
        assert [o.passed for o in outcomes] == [True, True], (variant, outcomes)
        time.sleep(0.05)   # the killer, were it alive, kills every millisecond
    assert killers_left() == [], variant


# --------------------------------------------------------------------------------- the dentry cache

# Where the two programs look names up: inside the sandbox, each is a directory of the programs' view
DENTRY_DIRS = {
    "stdlib": "os.path.dirname(os.__file__)",
    "lib_dynload": "os.path.dirname(__import__('_ctypes').__file__)",
    "prefix_lib": "os.path.join(sys.prefix, 'lib')",
    "libc_dir": "[l.split()[-1].rpartition('/')[0] for l in open('/proc/self/maps') if 'libc.so' in l][0]",
    "root": "'/'",
}
NAMES_PER_BIT = 8
BITS = 16


def _dentry_programs(where: str, nonce: str, pattern: list[int]) -> tuple[str, str]:
    """The sender (looks up the names of the bits set: each lookup of a missing name may leave a negative dentry)
    and the receiver (times one lookup of every name, first lookups all, and returns the times in ns)."""
    head = (f"import os, sys, time\nD = {where}\n"
            f"NAMES = [[os.path.join(D, f'cooprl-dentry-{nonce}-{{i}}-{{k}}') for k in range({NAMES_PER_BIT})] "
            f"for i in range({BITS})]\n")
    send = head + (f"def f(x):\n    for bit, names in zip({pattern!r}, NAMES):\n        if bit:\n"
                   "            for n in names:\n                os.path.exists(n)\n    return 0\n")
    receive = head + ("def f(x):\n    times = []\n    for names in NAMES:\n        row = []\n"
                      "        for n in names:\n            t = time.perf_counter_ns()\n            os.path.exists(n)\n"
                      "            row.append(time.perf_counter_ns() - t)\n        times.append(row)\n"
                      "    return times\n")
    return send, receive


# Touches 64 MiB, more than the CPU's caches: run between the sender and the receiver, it leaves only what the
# kernel keeps (dentries) to carry bits. Right after the sender, the CPU caches carry some for a moment (30-40 of 48
# right on a tmpfs, chance after this program or a 2 s pause; docs/sandbox.md); the probes' drawn order is what keeps
# that from telling a program which run of its pair it is (rewards.coop_probes.in_drawn_order).
EVICT = "def f(x):\n    b = bytearray(64 << 20)\n    for i in range(0, len(b), 64):\n        b[i] = 1\n    return 0\n"


def bits_carried(box, where: str, rounds: int = 3) -> int:
    """How many of `rounds` x BITS bits a receiver decodes right from a sender's lookups, with EVICT run between them
    (half the bits set; the receiver takes the BITS/2 bits whose names it looked up fastest, by median, as the ones
    set). With no channel the count is about half, give or take 2 per round."""
    import random
    import secrets
    import statistics
    correct = 0
    for _ in range(rounds):
        pattern = [1] * (BITS // 2) + [0] * (BITS // 2)
        random.shuffle(pattern)
        send, receive = _dentry_programs(where, secrets.token_hex(6), pattern)
        answer(box, send)
        answer(box, EVICT)
        times = answer(box, receive)
        fastest = sorted(range(BITS), key=lambda i: statistics.median(times[i]))[:BITS // 2]
        guess = [int(i in fastest) for i in range(BITS)]
        correct += sum(g == p for g, p in zip(guess, pattern))
    return correct


@pytest.mark.parametrize("where", sorted(DENTRY_DIRS))
def test_name_lookups_carry_no_bits_to_the_next_program(box, where):
    # 3 rounds of 16 bits: a closed channel decodes 24 right on average (sd about 3.6); an open one 48 (the host's
    # ext4 bound in: 48 of 48). 36 is past 3 sd of chance.
    correct = bits_carried(box, DENTRY_DIRS[where])
    assert correct <= 36, f"{correct} of 48 bits crossed through lookups in {where}"


# --------------------------------------------------------------------------------- what a run can tell of itself

AGE = ("import os\ndef f(x):\n"
       "    with open('/proc/self/stat') as s:\n"
       "        start = int(s.read().rpartition(')')[2].split()[19]) / os.sysconf('SC_CLK_TCK')\n"
       "    with open('/proc/uptime') as u:\n"
       "        return float(u.read().split()[0]) - start\n")


def test_a_program_cannot_tell_how_long_its_slot_was_idle(box):
    # the first program after a pause (the trainer generating: always a scored run, never a probe) must not find
    # an older process than a program that follows another at once
    answer(box, AGE)
    time.sleep(1.5)
    after_pause = answer(box, AGE)
    at_once = answer(box, AGE)
    assert after_pause < 0.5 and at_once < 0.5, (after_pause, at_once)
