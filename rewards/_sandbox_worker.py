"""One sandbox worker: started by `rewards.sandbox.Sandbox` as `python -s -P _sandbox_worker.py CONFIG_JSON` with
PYTHONHASHSEED fixed (`rewards.sandbox.WORKER_HASH_SEED`) and nothing else of the caller's environment.

Stdlib only; the trainer imports only its framing (`frame`, `unframe`). Four kinds of process take part,
all below the trainer:

- the *worker* (this process after set-up): enters fresh network (no interface, not even loopback), mount, IPC and
  PID namespaces and a private root file system that holds only an allow-list of host paths, read-only (the
  interpreter, its standard library, the shared libraries it loads, copied to a tmpfs; see
  `rewards.sandbox_view.interpreter_view`), a few device nodes and fresh scratch tmpfs mounts (`_isolate`), then
  judges jobs it reads from the trainer.
  It stays root *inside its namespaces* so that no sandboxed program can signal, ptrace or read it.
  Test code (trusted: it comes from the data set) runs here, with every call of `candidate(...)` replaced by a
  remote call whose result arrives as plain data; the verdict is decided here and nowhere else. Results are
  decoded within bounds (size, number of values, hash flooding, the test's deadline) and the worker's own
  memory is limited, so no result can take the worker down.
- the *zygote*: forked once at start-up, *before* the worker has seen any job, so its memory never holds a test
  or an expected value. It is PID 1 of the programs' PID namespace (when it dies, every program dies; before each
  fork it sets the namespace's pid counter back, so every program is pid 2 whatever earlier ones forked) with a
  /proc of that namespace only (a fresh mount for each program), installs a seccomp filter (no keyring syscalls,
  no user namespace, no sched_setaffinity, no reach into another process; `ZYGOTE_RULES`), enters the slot's
  cgroup (`_join_cgroup`),
  pre-imports common modules and forks one child per program on request, each in fresh mount and IPC
  namespaces with a fresh tmpfs on every scratch dir (/tmp, /var/tmp, /dev/shm, /run/lock; `_Scratch`). It
  reaps its children and a program's orphans (it is their subreaper) as they end; its SIGINT is the default
  action, so no program's signal can end it.
- the *judge host*: forked by the worker before it makes the programs' PID namespace; it forks the judges of
  judged tests (`_Judge`, `_judge_main`), which therefore live outside that namespace: no program sees or
  signals one.
- the *child*: new session, rlimits (every one set again after the fork), fresh temp dir, scrubbed environment,
  an unprivileged uid of its own slot
  (so RLIMIT_NPROC applies and the trainer/worker/zygote, all root, are out of reach; in a user namespace,
  where there is one uid only, it drops every capability instead), no new privileges, all
  inherited descriptors closed. It runs the program and answers call requests; each result is encoded as
  plain data (exact builtin types only), which the worker decodes with a strict decoder (JSON plus tags), so
  objects with a custom `__eq__`, patched builtins and faked output earn nothing.

After each job the worker kills the child's process group and then every process of the slot's uid
(`kill(-1, SIGKILL)` with the real uid set to the slot's uid: that reaches exactly the program's processes,
even those that called setsid), until none is left; without a slot uid, the zygote's children by pid (a zombie
group leader whose threads still run counts as running). Before each fork the zygote, init of the programs'
PID namespace, ends whatever is left in it and reaps it all (`_Scratch.end_leftovers`): no process or thread of
a program outlives it, in either mode.

Speed (see bench/README.md): on a VM a fork, its copy-on-write faults and the exit cost more than the judging, so
the per-program path keeps both the child's work and the round trips small: what every child shares is set once
in the zygote; the program is compiled in the worker and sent as code; the calls of tests that can be read off
their source (`assert candidate(<literals>) == ...`: nearly all of HumanEval) are sent to the child in one batch
with the program and run back to back (`_CallPlan`), every actual call being checked against the prediction
(any difference reruns the job one request per call, so verdicts never depend on it); the worker waits for a
killed child through a pidfd instead of polling.
"""

import ast
import builtins
import ctypes
import json
import marshal
import math
import os
import resource
import select
import shutil
import signal
import socket
import struct
import sys
import time

ADDR_NO_RANDOMIZE = 0x0040000


def _same_layout():
    """Re-execute this worker with address-space randomization off (its `personality`), once: every worker, and
    so every program (forks of it), then lays out its memory at the same addresses, and an object's address (the
    text of `repr(f)`, a set's order of functions) is the same on every worker. Returns False when the kernel
    refuses (a seccomp profile that allows no personality change): addresses then differ between workers."""
    personality = ctypes.CDLL(None)["personality"]
    personality.argtypes, personality.restype = (ctypes.c_ulong,), ctypes.c_int
    current = personality(0xFFFFFFFF)
    if current < 0 or current & ADDR_NO_RANDOMIZE:
        return current >= 0
    if personality(current | ADDR_NO_RANDOMIZE) < 0 or not personality(0xFFFFFFFF) & ADDR_NO_RANDOMIZE:
        return False
    os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])


if __name__ == "__main__":   # here, before the module's body: a re-execution then costs an interpreter start only
    SAME_LAYOUT = _same_layout()


CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
# A result is decoded by the worker (root, shared by every program of its slot): its encoded size, its number of
# values and the hashes of set members and dict keys are bounded, so that no result can take the worker's memory
# or minutes of its CPU (a set of 200k ints with one hash inserts in quadratic time).
MAX_RESULT = 1 << 20        # bytes of one encoded result (the JSON text)
MAX_VALUES = 200_000        # values (containers and scalars) in one result
MAX_SAME_HASH = 16          # members of one set (keys of one dict) that may share a hash
OUTPUT_CAP = 16 << 10       # bytes of the program's stdout+stderr kept
# Modules the zygote imports for its children. Every page of the zygote is shared copy-on-write with each child, so
# its size is paid on every fork and exit (~0.06 ms per MiB here); modules programs rarely use (dataclasses pulls in
# inspect: 0.9 MiB; datetime, statistics, fractions, decimal) are left to the few programs that import them.
# Not `random`: it registers an at-fork hook that reseeds its generator in every child (an urandom read and 2.5 KB
# of state written: ~40 page faults and 0.1 ms per bare fork here); a program that imports it seeds it once.
PREIMPORT = ("typing", "math", "re", "collections", "itertools", "functools", "heapq", "bisect", "string",
             "hashlib", "copy", "operator", "json", "array", "enum")

_libc = ctypes.CDLL(None, use_errno=True)


# prctl with fixed prototypes: a call then converts plain ints in C and creates no ctypes objects (each object a
# child creates is a page it writes, hence copies)
_prctl_int = _libc["prctl"]
_prctl_int.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong)
_prctl_int.restype = ctypes.c_int
_prctl_str = _libc["prctl"]
_prctl_str.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong)
_prctl_str.restype = ctypes.c_int
PR_SET_NAME = 15


def _prctl(option, arg):
    return _prctl_int(option, arg, 0, 0, 0)


def _mount(source, target, fstype, flags, data):
    enc = lambda s: s.encode() if s is not None else None  # noqa: E731
    if _libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), target)


def _unshare(flags):
    if _libc.unshare(flags) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


# ----------------------------------------------------------------------------------------- the protocol

# Every pipe of the sandbox (trainer <-> worker: marshal bodies; worker <-> child: marshal one way, JSON the other)
# carries framed messages: a 4-byte little-endian length, then the body. `frame` and `unframe` are the only code
# that knows this; `rewards.sandbox` imports them from here.
_LENGTH = struct.Struct("<I")


def frame(body):
    """Return `body` (bytes) as one framed message: its length in 4 bytes, then the body."""
    return _LENGTH.pack(len(body)) + body


def unframe(buf, limit=None):
    """Take the first whole message off the front of `buf` (a bytearray, consumed in place) and return its body;
    None while the message is incomplete. ValueError when it announces more than `limit` bytes."""
    if len(buf) < 4:
        return None
    end = 4 + _LENGTH.unpack_from(buf)[0]
    if limit is not None and end - 4 > limit:
        raise ValueError(f"a message of {end - 4} bytes (at most {limit})")
    if len(buf) < end:
        return None
    body = bytes(buf[4:end])
    del buf[:end]
    return body


class Msg:
    """The kinds of message between the worker and a child (the first item of each message)."""
    PROGRAM = "program"        # worker -> child: the job (compiled program, entry point, CPU limit, first calls)
    CALL = "call"              # worker -> child: one call of the candidate (marshalled args, kwargs)
    CALLS = "calls"            # worker -> child: several calls run back to back (`_CallPlan.ahead`)
    EXEC = "exec"              # worker -> child: untrusted test code, run next to the candidate
    LOADED = "loaded"          # child -> worker: the program ran and defines the entry point
    LOAD_ERROR = "load_error"  # child -> worker: it raised or lacks the entry point (with the error)
    OK = "ok"                  # child -> worker: a call's encoded result (or True for an EXEC)
    BAD = "bad"                # child -> worker: the call returned something that is not plain data
    ERR = "err"                # child -> worker: the call raised (with the error)


def _write_all(fd, data, deadline=None):
    view = memoryview(data)
    while view:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            if not select.select([], [fd], [], left)[1]:
                raise TimeoutError
        n = os.write(fd, view[:1 << 16])
        view = view[n:]


def _send(fd, kind, payload, deadline=None):
    """Send one message (`kind`, `payload`) to a child. `fd` is non-blocking: the usual small message goes out in
    one write, and only when the pipe is full (the program stopped reading) does it wait, until `deadline`."""
    data = frame(marshal.dumps((kind, payload)))
    try:
        n = os.write(fd, data)
    except BlockingIOError:
        n = 0
    if n < len(data):
        _write_all(fd, memoryview(data)[n:], deadline)


# ----------------------------------------------------------------------------------------- plain-data codec

def _encode(x):
    """Plain data -> JSON-able tree (run in the child). Exact builtin types only; anything else is refused."""
    t = type(x)
    if x is None or t is bool or t is str or t is int or t is float:
        return x
    if t is list:
        return [_encode(v) for v in x]
    if t is tuple:
        return {"t": [_encode(v) for v in x]}
    if t is dict:
        return {"d": [[_encode(k), _encode(v)] for k, v in x.items()]}
    if t is set:
        return {"s": [_encode(v) for v in x]}
    if t is frozenset:
        return {"f": [_encode(v) for v in x]}
    if t is bytes:
        return {"b": x.hex()}
    if t is complex:
        return {"c": [x.real, x.imag]}
    raise TypeError(f"the result holds a {t.__name__!s:.60}, which is not plain data (builtin types only)")


def _decode(tree, deadline):
    """JSON tree from an untrusted child -> plain data (run in the worker). Strict: raises ValueError on anything
    malformed, past MAX_VALUES values or when set members or dict keys flood one hash; `_Timeout` past `deadline`
    (checked every 4,096 values), so decoding never outlives the test that asked for the result."""
    count = 0

    def value(x):
        nonlocal count
        count += 1
        if count > MAX_VALUES:
            raise ValueError(f"more than {MAX_VALUES} values")
        if not count & 4095 and time.monotonic() > deadline:
            raise _Timeout()
        t = type(x)
        if x is None or t is bool or t is str or t is int or t is float:
            return x
        if t is list:
            return [value(v) for v in x]
        if t is dict and len(x) == 1:
            (tag, v), = x.items()
            if tag == "b" and type(v) is str:
                return bytes.fromhex(v)
            if type(v) is list:
                if tag == "t":
                    return tuple(value(i) for i in v)
                if tag == "d":
                    if any(type(pair) is not list or len(pair) != 2 for pair in v):
                        raise ValueError("malformed dict")
                    pairs = [(value(k), value(w)) for k, w in v]
                    _few_equal_hashes([k for k, _ in pairs])
                    return dict(pairs)
                if tag in ("s", "f"):
                    members = [value(i) for i in v]
                    _few_equal_hashes(members)
                    return set(members) if tag == "s" else frozenset(members)
                if tag == "c" and len(v) == 2 and all(type(i) in (int, float) for i in v):
                    return complex(v[0], v[1])
        raise ValueError("malformed result")

    return value(tree)


def _few_equal_hashes(items):
    """Refuse set members / dict keys of which more than MAX_SAME_HASH share a hash: building the set would take
    quadratic time. (Counting is linear: the counter's keys are the hash values, whose hashes are themselves.)"""
    if len(items) > MAX_SAME_HASH:
        counts = {}
        for h in map(hash, items):
            counts[h] = counts.get(h, 0) + 1
        if max(counts.values()) > MAX_SAME_HASH:
            raise ValueError(f"more than {MAX_SAME_HASH} members share one hash")


# ----------------------------------------------------------------------------------------- the child

def _describe(e):
    try:
        return f"{type(e).__name__}: {e}"[:400]
    except BaseException:
        return type(e).__name__


def _child(cfg, cmd_r, res_w, out_w):
    """Set up the child and serve call requests. Never returns.

    This runs right after the zygote's fork, before any job is known (the *warm* child). What is the same for
    every child was done once in the zygote and is inherited (no_new_privs, no
    supplementary groups, SIGPIPE's default action, the scrubbed environment with the slot's HOME and TMPDIR,
    /dev/null on fd 0, the pre-imported modules): after a fork every page the child writes is first copied,
    and these copy-on-write faults, not the syscalls, are the dear part of a child, so the set-up here is the
    few syscalls that must happen in the child itself.
    """
    _exit = os._exit
    try:
        os.setsid()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)   # not the zygote's handler, which reaps (`_zygote`)
        os.dup2(out_w, 1)
        os.dup2(out_w, 2)
        # keep 0-2, the command pipe and the result pipe; close_range closes every other descriptor
        lo, hi = sorted((cmd_r, res_w))
        os.closerange(3, lo)
        os.closerange(lo + 1, hi)
        os.closerange(hi + 1, 1 << 30)
        os.chdir(cfg["tmpdir"])   # made afresh by the worker for each child (`_Worker.fork_child`)
        signal.signal(signal.SIGINT, signal.default_int_handler)   # the zygote's is SIG_DFL (see `_zygote`)
        if cfg["cgroup"]:   # the OOM killer takes this program's processes first, not the zygote (`_join_cgroup`)
            fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
            os.write(fd, b"1000")
            os.close(fd)
        elif cfg["fallback_filter"] is not None:
            _install_seccomp(cfg["fallback_filter"])   # no cgroup: no memfds (see FALLBACK_RULES)
        for res, value in cfg["rlimits"]:   # every limit from the configuration, whatever became of the zygote's
            resource.setrlimit(res, value)  # (before the uid change: root may raise a hard limit again)
        if cfg["uid"] is not None:
            os.setresgid(cfg["gid"], cfg["gid"], cfg["gid"])
            os.setresuid(cfg["uid"], cfg["uid"], cfg["uid"])
            # the uid change made the process undumpable, and /proc (hidepid, `PROC_OPTIONS`) would then hide
            # the program's own children from it; only its own processes share its uid
            _prctl(PR_SET_DUMPABLE, 1)
        elif cfg["drop_caps"]:
            _drop_capabilities()   # uid 0 of our user namespace: no capability left, none regained by exec
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)   # after setuid: a credential change clears it
    except BaseException:
        _exit(70)

    read, write, loads, dumps, enc = os.read, os.write, marshal.loads, json.dumps, _encode
    OK, ERR, BAD = Msg.OK, Msg.ERR, Msg.BAD

    def send(*message):
        data = frame(dumps(message).encode())
        while data:
            data = data[write(res_w, data):]

    pending = bytearray()   # what was read past the last message (one read usually holds a whole message)

    def recv():
        while True:
            body = unframe(pending)
            if body is not None:
                return loads(body)
            chunk = read(cmd_r, 1 << 20)
            if not chunk:
                _exit(0)
            pending.extend(chunk)

    describe = _describe

    # a warm child: everything above happened before the job arrived; now wait for the program
    _prctl_str(PR_SET_NAME, b"sbx-warm", 0, 0, 0)    # for observers (and the tests' leftover scan)
    kind, job = recv()
    _prctl_str(PR_SET_NAME, b"sbx-program", 0, 0, 0)
    try:
        if kind != Msg.PROGRAM:
            raise ValueError(kind)
        cpu = max(1, int(job["cpu_s"]))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))   # lowering needs no privilege
    except BaseException:
        _exit(70)
    ns = {"__name__": "__main__", "__builtins__": builtins}
    try:
        exec(loads(job["code"]), ns)   # compiled by the trainer, or by the worker (`_Job.spawn`)
        candidate = ns[job["entry_point"]]
    except BaseException as e:
        try:
            send(Msg.LOAD_ERROR, describe(e))
        finally:
            _exit(0)
    send(Msg.LOADED)

    def call(payload):
        try:
            args, kwargs = loads(payload)
            result = candidate(*args, **kwargs)
        except BaseException as e:
            try:
                send(ERR, describe(e))
            except BaseException:
                _exit(0)
            return
        try:   # a value that cannot be sent is not the call raising: the worker fails the test (`_NotPlainData`)
            tree = enc(result)
        except BaseException as e:
            try:
                send(BAD, describe(e))
            except BaseException:
                _exit(0)
            return
        try:
            send(OK, tree)
        except BaseException as e:   # e.g. an int past the str conversion limit
            try:
                send(BAD, describe(e))
            except BaseException:
                _exit(0)

    for payload in job["calls"]:   # pipelined calls (see `_CallPlan.ahead`): run back to back, one result each
        call(payload)
    test_ns = None
    while True:
        kind, payload = recv()
        try:
            if kind == Msg.CALL:
                call(payload)
            elif kind == Msg.CALLS:
                for one in payload:
                    call(one)
            elif kind == Msg.EXEC:   # untrusted tests: run here, the verdict is only "did it raise"
                if test_ns is None:
                    test_ns = dict(ns)
                    test_ns[job["param"]] = candidate
                exec(compile(payload, "<test>", "exec"), test_ns)
                send(OK, True)
        except BaseException as e:
            try:
                send(ERR, describe(e))
            except BaseException:
                _exit(0)


# ----------------------------------------------------------------------------------------- privileges

# seccomp. The zygote installs `ZYGOTE_RULES` (inherited by every program); where no cgroup bounds a program as a
# whole, each child adds `FALLBACK_RULES`.
# Per architecture: the audit number and the syscall numbers by name (aarch64 has no fork/vfork syscalls).
SYSCALLS = {
    "x86_64": (0xC000003E, {"add_key": 248, "request_key": 249, "keyctl": 250, "clone": 56, "fork": 57,
                            "vfork": 58, "unshare": 272, "clone3": 435, "sched_setaffinity": 203,
                            "memfd_create": 319, "prlimit64": 302, "setpriority": 141, "sched_setparam": 142,
                            "sched_setscheduler": 144, "sched_setattr": 314, "ioprio_set": 251, "ptrace": 101,
                            "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312, "pidfd_getfd": 438,
                            "process_madvise": 440}),
    "aarch64": (0xC00000B7, {"add_key": 217, "request_key": 218, "keyctl": 219, "clone": 220, "unshare": 97,
                             "clone3": 435, "sched_setaffinity": 122, "memfd_create": 279, "prlimit64": 261,
                             "setpriority": 140, "sched_setparam": 118, "sched_setscheduler": 119,
                             "sched_setattr": 274, "ioprio_set": 30, "ptrace": 117, "process_vm_readv": 270,
                             "process_vm_writev": 271, "kcmp": 272, "pidfd_getfd": 438, "process_madvise": 440}),
}
EPERM, EAGAIN, ENOSYS = 1, 11, 38
CLONE_THREAD = 0x00010000
# (syscall, errno, when): refused always when `when` is None, else when any of its conditions holds:
# ("set", bits) / ("clear", bits) on the first argument's low 32 bits, or ("not", i, value): argument i is not
# `value` (all 64 bits)
ZYGOTE_RULES = (
    # the per-uid keyrings outlive a program: no program may leave a key for the next one
    ("add_key", EPERM, None), ("request_key", EPERM, None), ("keyctl", EPERM, None),
    # no user namespace, hence no CAP_SYS_ADMIN/CAP_NET_ADMIN over new namespaces (the kernel surface behind
    # many privilege escalations); clone3 passes its flags in memory, out of a filter's reach: ENOSYS makes
    # the C library fall back to clone, whose flags are checked here
    ("unshare", EPERM, ("set", CLONE_NEWUSER)), ("clone", EPERM, ("set", CLONE_NEWUSER)),
    ("clone3", ENOSYS, None),
    # a slot is pinned to one CPU: a program may not widen its affinity and take its neighbours' CPUs
    ("sched_setaffinity", EPERM, None),
    # no program reaches into another process: limits, priorities and scheduling apply to the caller only (pid 0,
    # what the C library passes for its own), and nothing traces, reads, writes or compares another's memory and
    # files. Unprivileged, programs share the uid of the zygote, the worker and the judges: `prlimit(1,
    # RLIMIT_AS, ...)` on the zygote bounded every later program of its slot.
    ("prlimit64", EPERM, (("not", 0, 0),)),
    ("setpriority", EPERM, (("not", 0, 0), ("not", 1, 0))),   # PRIO_PROCESS of the caller only
    ("sched_setparam", EPERM, (("not", 0, 0),)), ("sched_setscheduler", EPERM, (("not", 0, 0),)),
    ("sched_setattr", EPERM, (("not", 0, 0),)),
    ("ioprio_set", EPERM, (("not", 0, 1), ("not", 1, 0))),    # IOPRIO_WHO_PROCESS of the caller only
    ("ptrace", EPERM, None), ("process_vm_readv", EPERM, None), ("process_vm_writev", EPERM, None),
    ("kcmp", EPERM, None), ("pidfd_getfd", EPERM, None), ("process_madvise", EPERM, None),
)
# Without a cgroup, memory is bounded per process (RLIMIT_AS) and processes per slot (RLIMIT_NPROC: the slot's
# uid, or the worker's user namespace, where the kernel counts per namespace since Linux 5.14): a program may hold
# up to NPROC x AS, plus its scratch tmpfs. memfds, whose pages no address space holds until mapped, are refused
# (honest programs do not use them; multiprocessing and subprocess work as before).
FALLBACK_RULES = (("memfd_create", EPERM, None),)
PR_SET_SECCOMP, SECCOMP_MODE_FILTER, PR_SET_SECUREBITS = 22, 2, 28


def _seccomp_program(rules):
    """Compile `rules` to a classic BPF program (a ctypes array; kept alive by the caller). Syscalls of another
    ABI (32-bit, x32) end the process; a syscall this architecture lacks (fork on aarch64) is left out."""
    machine = os.uname().machine
    if machine not in SYSCALLS:
        raise OSError(0, f"no syscall table for {machine}")
    audit, numbers = SYSCALLS[machine]
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    allow, kill = 0x7FFF0000, 0x80000000
    prog = [(ld, 0, 0, 4),              # the ABI of the call
            (jeq, 1, 0, audit),         # ours: skip the kill
            (ret, 0, 0, kill),
            (ld, 0, 0, 0),              # the syscall number
            (jge, 0, 1, 0x40000000),    # x32 (bit 30): kill
            (ret, 0, 0, kill)]
    for name, errno, when in rules:
        if name not in numbers:
            continue
        deny = (ret, 0, 0, 0x00050000 | errno)
        if when is None:
            prog += [(jeq, 0, 1, numbers[name]), deny]
            continue
        if when and when[0] in ("set", "clear"):   # one flag test on the first argument
            when = (when,)
        body = []   # each condition jumps to the deny (the body's last instruction) when it holds
        for cond in when:
            if cond[0] in ("set", "clear"):
                body += [(ld, 0, 0, 16), (jset, "deny", 0, cond[1]) if cond[0] == "set" else (jset, 0, "deny", cond[1])]
            else:   # ("not", i, value): the low and the high 32 bits of argument i
                _, i, value = cond
                body += [(ld, 0, 0, 16 + 8 * i), (jeq, 0, "deny", value & 0xFFFFFFFF),
                         (ld, 0, 0, 20 + 8 * i), (jeq, 0, "deny", value >> 32)]
        body += [(ret, 0, 0, allow), deny]
        end = len(body) - 1
        body = [(code, *(end - k - 1 if j == "deny" else j for j in (jt, jf)), k_)
                for k, (code, jt, jf, k_) in enumerate(body)]
        prog += [(jeq, 0, len(body), numbers[name])] + body   # another syscall: on past this rule
    prog.append((ret, 0, 0, allow))
    return (ctypes.c_ubyte * (8 * len(prog)))(*b"".join(struct.pack("<HBBI", *ins) for ins in prog))


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _install_seccomp(filters):
    """Install a BPF program from `_seccomp_program` (needs no_new_privs); it binds this process and its children."""
    fprog = _SockFprog(len(filters) // 8, ctypes.addressof(filters))
    if _prctl_int(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _drop_capabilities():
    """Drop every capability for good (securebits: uid 0 grants none, setuid keeps none, no ambient raise; all
    locked). For the child when the sandbox runs in a user namespace as its uid 0."""
    if _prctl(PR_SET_SECUREBITS, 0xEF) != 0:
        raise OSError(ctypes.get_errno(), "securebits")
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)   # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()                  # effective, permitted, inheritable: all empty
    if _libc.capset(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capset")


# ----------------------------------------------------------------------------------------- the zygote

class _Scratch:
    """The programs' scratch dirs, fresh for each: the zygote makes every child in a mount namespace of its own,
    a copy of the zygote's with a new tmpfs on each scratch dir (/tmp, /var/tmp, /dev/shm, /run/lock) and the
    child's temp dir (cwd, HOME, TMPDIR) in it, owned by the slot's uid, and a fresh IPC namespace. Always a new
    file system, never an emptied one: what a program leaves is gone whatever it made (a million files, dirs
    nested past any recursion limit, a fifo in place of its temp dir), and so is every trace of it in the
    metadata, which a program may set or move and the next one read (the times of a scratch dir, inode numbers,
    a file system's birth time and mount id).

    With a PID namespace each child also gets a fresh proc mount on /proc (its entries take their times at this
    program's lookups).
    Unmounting waits for an RCU grace period (about 0.1 ms per mount here): a program's namespace is dropped after
    the fork of the child after it, while that child runs, unless the program left data in its scratch dirs (then
    before that fork, so that its pages are not charged to the next program's cgroup).
    The new namespace is made before the fork: after it, every page the zygote writes would first be copied (the
    child shares them). Without a private root the only scratch is the slot's temp dir on the host's /tmp, emptied
    by hand."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.proc = cfg.get("worker_proc")   # the worker's /proc: names our mount namespaces (see _programs_proc)
        self.private = cfg["private_root"] and self.proc is not None
        self.home = self._namespace() if self.private else None
        self.ready = []    # the namespace prepared for the next child, and its scratch roots (fds)
        self.running = []  # the last child's
        self.fresh = None  # what a fresh scratch root holds (free blocks, free inodes), per root

    def _namespace(self):
        return os.open("self/ns/mnt", os.O_RDONLY, dir_fd=self.proc)

    @staticmethod
    def _usage(fd):
        st = os.fstatvfs(fd)
        return st.f_bfree, st.f_ffree

    @staticmethod
    def _close(fds):
        for fd in fds:
            os.close(fd)

    def prepare(self):
        """Enter a new mount and IPC namespace with fresh scratch for the next child."""
        tmpdir = self.cfg["tmpdir"]
        if not self.private:
            if os.path.lexists(tmpdir):
                try:
                    shutil.rmtree(tmpdir) if os.path.isdir(tmpdir) and not os.path.islink(tmpdir) else os.unlink(
                        tmpdir)
                except BaseException:   # noqa: BLE001 - e.g. RecursionError on deep nesting: move it out of the way
                    os.rename(tmpdir, f"{tmpdir}.left-{time.monotonic_ns()}")
            if self.cfg["ipc_ns"]:
                _unshare(CLONE_NEWIPC)
        else:
            _unshare(CLONE_NEWNS | (CLONE_NEWIPC if self.cfg["ipc_ns"] else 0))
            for top in self.cfg["scratch"]:   # on top of the zygote's own (never written) scratch mounts
                _mount("tmpfs", top, "tmpfs", MS_NOSUID | MS_NODEV, self.cfg["scratch_options"])
            if self.cfg.get("fresh_proc"):
                # a new superblock (Linux >= 5.8: one per proc mount), whose inodes take their times at this
                # program's lookups, not at those of an earlier one
                _mount("proc", "/proc", "proc", PROC_FLAGS, PROC_OPTIONS)
        os.mkdir(tmpdir, 0o700)
        if self.cfg["uid"] is not None:
            os.chown(tmpdir, self.cfg["uid"], self.cfg["gid"])
        if self.private:
            self.ready = [self._namespace()] + [os.open(t, os.O_PATH) for t in self.cfg["scratch"]]
            if self.fresh is None:
                self.fresh = [self._usage(fd) for fd in self.ready[1:]]

    def before_fork(self):
        """End and reap whatever the last program left, drop its namespace now if it left data in its scratch;
        enter the next child's, and have its pids numbered afresh."""
        self.end_leftovers()
        if self.running and any(self._usage(fd) != usage for fd, usage in zip(self.running[1:], self.fresh)):
            self._close(self.running)
            self.running = []
        self.prepare()
        self.number_afresh()

    def end_leftovers(self, wait_s=10.0):
        """Before the next fork: end every process and thread the earlier programs left, and reap them all.

        The worker's sweep kills them from outside (`_Worker.sweep`); this is the guarantee. As init of the
        programs' PID namespace the zygote is where every orphan of a program comes back: it kills its children
        (`own_children`) until none is left, whatever their session, process group, uid or state: a stopped
        process, or a zombie group leader whose other threads still run (its pid is one the sweep cannot tell
        from a plain zombie, and SIGKILL ends its whole thread group). Every program's process descends from the
        zygote, and one whose parent ended comes back to the zygote (init, and a subreaper): while any runs, the
        zygote has a child
        (that process, or an ancestor of it, perhaps a zombie leader waiting for its threads). So waitpid's
        "no child" means nothing of any program runs anywhere. Without a PID namespace only the reaping is
        here: kill(-1) would reach the host's processes."""
        if not self.cfg["pidns"]:
            self.reap()
            return
        deadline = time.monotonic() + wait_s
        pause = 0.0001
        while True:
            for pid in self.own_children():
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:   # ESRCH: it ended meanwhile
                    pass
            try:
                while os.waitpid(-1, os.WNOHANG)[0] > 0:
                    pass
            except ChildProcessError:
                return
            if time.monotonic() > deadline:   # (a process stuck in the kernel) `fork` still asks for pid 2
                return
            time.sleep(pause)
            pause = min(2 * pause, 0.005)

    @staticmethod
    def own_children():
        """The pids of the zygote's children (its threads' `children` lists in /proc): every program's process is
        the zygote's child, or comes back to it once its parent is killed, so killing the children until none is
        left reaches them all."""
        pids = set()
        try:
            for tid in os.listdir("/proc/self/task"):
                with open(f"/proc/self/task/{tid}/children") as f:
                    pids.update(int(x) for x in f.read().split())
        except (OSError, ValueError):
            pass
        return sorted(pids)

    @staticmethod
    def reap():
        """Reap the zombies among our children (the last program's processes, all ended: `_Worker.sweep`)."""
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            pass

    def number_afresh(self):
        """Make the next fork's pid 2 (the zygote is 1) and so every pid a program sees the same whatever earlier
        programs forked: their processes are gone (`_Worker.tidy`), and the counter of our PID namespace goes back
        to 1. Its /proc/loadavg's last pid then tells nothing of them either."""
        fd = self.cfg.get("last_pid_fd")
        if fd is not None:
            os.pwrite(fd, b"1", 0)

    def fork(self, tries=100):
        """os.fork(), with the child's pid 2 where pids are numbered afresh. The last program's processes are
        reaped (`reap`), so the number is free; should it not be (a process the sweep could not end), a child that
        got another pid exits at once and the fork is tried again, a few times, then taken as it comes."""
        expect = 2 if self.cfg.get("last_pid_fd") is not None else None
        for attempt in range(tries):
            last = attempt == tries - 1
            pid = os.fork()
            if pid == 0:
                if expect is not None and not last and os.getpid() != expect:
                    os._exit(0)
                return 0
            if expect is None or pid == expect or last:
                return pid
            time.sleep(0.0002)
            self.number_afresh()

    def after_fork(self):
        """In the zygote after the fork: back to its own namespace, holding the child's (so that the child's exit
        does not wait for its unmounting), and drop the last program's (the wait is here, while the child runs)."""
        if self.private:
            if _libc.setns(self.home, CLONE_NEWNS) != 0:
                err = ctypes.get_errno()
                raise OSError(err, os.strerror(err), "setns")
            self._close(self.running)
            self.running, self.ready = self.ready, []


def _join_cgroup(cfg):
    """In the zygote, at the end of its set-up: enter the slot's cgroup(s) (the trainer made them and passed their
    `cgroup.procs` open), so that every program, born from here, is bounded as a whole (memory with what it
    writes to tmpfs and memfds, processes). The zygote's own pages stay charged where they were made; its OOM
    score is -1000 where we may lower it and each child's is 1000 (`_child`): the kernel's OOM killer takes a
    program's process, not the zygote. Returns True when joined; False (the fallback) when there is no cgroup."""
    fds = cfg.get("cgroup_fds") or []
    if not fds:
        return False
    try:
        try:
            with open("/proc/self/oom_score_adj", "w") as f:
                f.write("-1000")
        except OSError:   # needs CAP_SYS_RESOURCE, which a container may lack: the children's 1000 still comes first
            pass
        for fd in fds:
            os.write(fd, b"0")   # 0: the writer itself
        return True
    finally:
        for fd in fds:
            os.close(fd)


def _program_rlimits(cfg):
    """Every rlimit of a program, from the configuration (CPU aside: per job), the rest as the zygote found them
    at its start: [(resource, (soft, hard))]. Set in the zygote, and again by each child after the fork (`_child`),
    so that nothing done to the zygote's limits after its start reaches a program (seccomp refuses a program's
    prlimit on any other process: `ZYGOTE_RULES`)."""
    lim = cfg["limits"]
    mem = int(lim["memory_mb"]) << 20
    limits = {resource.RLIMIT_AS: (mem, mem), resource.RLIMIT_FSIZE: (int(lim["fsize_mb"]) << 20,) * 2,
              resource.RLIMIT_NOFILE: (int(lim["nofile"]),) * 2, resource.RLIMIT_CORE: (0, 0),
              resource.RLIMIT_MEMLOCK: (0, 0)}
    if cfg["uid"] is not None:
        limits[resource.RLIMIT_NPROC] = (int(lim["nproc"]),) * 2
    elif cfg["drop_caps"]:   # our own user namespace: counted per namespace (Linux >= 5.14), with the worker, the
        # zygote and the judge host (and a judge, while there is one)
        limits[resource.RLIMIT_NPROC] = (int(lim["nproc"]) + 3,) * 2
    for name in dir(resource):
        res = getattr(resource, name)
        if name.startswith("RLIMIT_") and name != "RLIMIT_CPU" and res not in limits:
            try:
                limits[res] = resource.getrlimit(res)
            except (OSError, ValueError):
                pass
    return sorted(limits.items())


def _zygote(sock, cfg):
    # The zygote reaps its children and adopted orphans itself, as they end and again before each fork
    # (`_Scratch.reap`): the kernel's own reaping (SIGCHLD ignored) frees a pid number a moment after the process
    # leaves its parent's list of children, and the next program's pid would depend on that moment; a reaping
    # zygote is done with it before it reads the next request. (A program may send it SIGCHLD where they share
    # a uid: it only reaps.)
    signal.signal(signal.SIGCHLD, lambda *_: _Scratch.reap())
    # SIGINT: Python's handler (KeyboardInterrupt) would let a program end the zygote with os.kill(1, SIGINT)
    # where they share a uid (a user namespace); with the default action, the kernel drops every signal a
    # program sends to its PID namespace's init
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() == 1:
        os._exit(0)
    # Set once here and inherited by every child through fork (see `_child`): no new privileges (setuid
    # binaries and file capabilities stay powerless; the zygote itself never execs), /dev/null as stdin,
    # SIGPIPE's default action (Python ignores it), the scrubbed environment (the worker was started with PATH
    # and LANG only; HOME and TMPDIR are the slot's temp dir, made afresh for each child), and, after the
    # imports, the rlimits except CPU (set per job) and no supplementary groups. The zygote, still root, is not
    # bound by RLIMIT_NPROC; its own few files and pages stay far below the other limits.
    report = {"have": [], "missing": []}
    if cfg["private_root"]:
        try:
            _programs_proc(cfg, report)
        except OSError as e:
            report["missing"].append(f"a /proc of their own ({e.strerror}): programs see the worker's /proc")
    _prctl(PR_SET_NO_NEW_PRIVS, 1)
    try:
        _install_seccomp(_seccomp_program(ZYGOTE_RULES))
        report["have"].append("seccomp: no keyring syscalls, no user namespace (clone3: ENOSYS), "
                              "no sched_setaffinity, no limit, priority or scheduling of another process, "
                              "no ptrace")
    except OSError as e:
        report["missing"].append(f"seccomp ({e.strerror}): programs may use the kernel keyrings, create user "
                                 f"namespaces, widen their CPU affinity and change other processes' limits")
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    null = os.open("/dev/null", os.O_RDWR)
    os.dup2(null, 0)
    os.close(null)
    os.environ.clear()
    os.environ.update({"PATH": "/usr/bin:/bin", "HOME": cfg["tmpdir"], "TMPDIR": cfg["tmpdir"],
                       "LANG": "C.UTF-8", "PYTHONHASHSEED": "0"})
    for name in PREIMPORT:
        try:
            __import__(name)
        except Exception:
            pass
    cfg["rlimits"] = _program_rlimits(cfg)
    for res, value in cfg["rlimits"]:
        resource.setrlimit(res, value)
    if cfg["uid"] is not None:
        os.setgroups([])
    try:
        cfg["cgroup"] = _join_cgroup(cfg)
    except OSError as e:
        cfg["cgroup"] = False
        cfg["cgroup_why"] = f"the slot's cgroup cannot be entered: {e.strerror}"
    cfg["fallback_filter"] = None
    if cfg["cgroup"]:
        report["have"].append(f"memory and processes per program as a whole: {cfg['cgroup_kind']}")
    else:
        try:   # installed by each child (`_child`), not here: the zygote's own filter binds the worker's side too
            cfg["fallback_filter"] = _seccomp_program(FALLBACK_RULES)
        except OSError:
            pass
        # said in the start-up line, not counted as missing isolation: a root container whose cgroup file system
        # is read-only (Docker's default) keeps every other layer, and `require_full_isolation` still starts
        report["have"].append(
            f"no cgroup ({cfg.get('cgroup_why') or 'none'}); fallback: memory per process (RLIMIT_AS) times "
            f"processes (RLIMIT_NPROC), not per program as a whole; plus the scratch tmpfs; memfd_create "
            f"{'refused' if cfg['fallback_filter'] is not None else 'allowed'}")
    sock.sendall(json.dumps(report).encode())
    import gc
    gc.collect()
    gc.freeze()   # the children's collections skip the zygote's objects (fewer copy-on-write page faults)
    scratch = _Scratch(cfg)
    while True:
        if not sock.recv(1):   # one byte per child asked for; nothing when the worker is gone
            os._exit(0)
        scratch.before_fork()
        cmd_r, cmd_w = os.pipe()
        res_r, res_w = os.pipe()
        out_r, out_w = os.pipe()
        pid = scratch.fork()
        if pid == 0:
            try:
                sock.close()
                for x in (cmd_w, res_r, out_r):
                    os.close(x)
                _child(cfg, cmd_r, res_w, out_w)
            finally:
                os._exit(71)
        # a pidfd lets the worker wait for the child's end instead of polling (the zygote reaps it, not the worker)
        try:
            pidfd = os.pidfd_open(pid)
        except (OSError, AttributeError):
            pidfd = None
        fds = [cmd_w, res_r, out_r] + ([pidfd] if pidfd is not None else [])
        socket.send_fds(sock, [struct.pack("<i", pid)], fds)
        for x in (cmd_r, res_w, out_w, *fds):
            os.close(x)
        scratch.after_fork()


# ----------------------------------------------------------------------------------------- pipelined calls

NEUTRAL = "neutral"     # a unit that names the entry point nowhere: it makes no call (as far as its source says)
_SCOPES = (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.ListComp, ast.SetComp,
           ast.DictComp, ast.GeneratorExp, ast.IfExp, ast.BoolOp, ast.NamedExpr, ast.Await)


def _plan_unit(src, names):
    """What a unit's source says about its calls of the entry point (`names`: the parameter and the entry point).

    A tuple (payload, (args, kwargs)) when the unit is a simple statement that calls it exactly once, directly,
    unconditionally (not in a lambda, comprehension, `and`/`or`, conditional expression or assert message) and
    with literal arguments, e.g. `assert candidate([1, 2], k=3) == 5`; NEUTRAL when it names it nowhere;
    None otherwise (prediction stops there). Only a guess: every actual call is checked against it (`_Job.request`).
    """
    if not any(name in src for name in names):
        return NEUTRAL
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return None
    parent, refs, todo = {}, [], [tree]   # one pass: the references and every node's parent
    while todo:
        node = todo.pop()
        if type(node) is ast.Name and node.id in names:
            refs.append(node)
        for child in ast.iter_child_nodes(node):
            parent[child] = node
            todo.append(child)
    if not refs:
        return NEUTRAL
    if len(tree.body) != 1 or len(refs) != 1:
        return None
    stmt = tree.body[0]
    root = stmt.test if isinstance(stmt, ast.Assert) else stmt.value if isinstance(
        stmt, (ast.Expr, ast.Assign, ast.AnnAssign)) else None
    call = parent.get(refs[0])
    if root is None or not isinstance(call, ast.Call) or call.func is not refs[0]:
        return None
    node = call
    while node is not root:   # on the way up to the statement's expression: nothing conditional or deferred
        node = parent.get(node)
        if node is None or isinstance(node, _SCOPES):
            return None
    try:
        if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
            return None
        args = tuple(_literal(a) for a in call.args)
        kwargs = {k.arg: _literal(k.value) for k in call.keywords}
        return marshal.dumps((args, kwargs)), (args, kwargs)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


_ONE_CONSTANT = compile("0", "<arg>", "eval").co_code   # the code of an expression folded to one constant


def _literal(node):
    """The value of a literal argument: what `ast.literal_eval` accepts, plus constant arithmetic such as
    `3 * 19` or `'ab' + 'c'`, taken only when the compiler folds it to one constant (it does so within its
    own size limits, so nothing big or slow is ever evaluated here)."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        values = [_literal(e) for e in node.elts]
        return tuple(values) if isinstance(node, ast.Tuple) else values if isinstance(node, ast.List) else set(values)
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise ValueError("** in a dict")
        return {_literal(k): _literal(v) for k, v in zip(node.keys, node.values)}
    if isinstance(node, (ast.BinOp, ast.UnaryOp)):
        code = compile(ast.fix_missing_locations(ast.Expression(node)), "<arg>", "eval")
        if code.co_code != _ONE_CONSTANT or code.co_names:
            raise ValueError("not a constant")
        return code.co_consts[0]
    return ast.literal_eval(node)


def _same(a, b):
    """Exactly the same plain data, to the program: same types, values (0.0 is not -0.0) and iteration order."""
    t = type(a)
    if t is not type(b):
        return False
    if t is float:
        return (a == b and math.copysign(1.0, a) == math.copysign(1.0, b)) or (a != a and b != b)
    if t is complex:
        return _same(a.real, b.real) and _same(a.imag, b.imag)
    if t in (list, tuple, set, frozenset):
        return len(a) == len(b) and all(map(_same, a, b))
    if t is dict:
        return len(a) == len(b) and all(map(_same, a.items(), b.items()))
    return a == b


class _Desync(BaseException):
    """A test made a call other than the one predicted: the job restarts without pipelining."""


class _JudgeLost(BaseException):
    """The judge of judged tests was lost in the middle of a test (`_JudgeBroke`): the job restarts."""


class _CallPlan:
    """Call prediction, a layer apart from the judging: the call each unit of a trusted suite is predicted to make
    (`_plan_unit`: a (payload, value) tuple, NEUTRAL or None; no units = no prediction) and the calls sent
    ahead to the child, whose results are not read yet.

    Pipelining saves a round trip per call (two context switches, a select, a read and a write on each side):
    when a call is the one predicted for its unit, the predicted calls of the units that follow (up to the first
    whose call cannot be read off its source) go to the child with it, and the child runs them back to back;
    the tests then read their results one by one, each within its own unit's deadline. Every call the tests
    make is still checked against the prediction (`take`); any difference restarts the whole job without
    pipelining (`_Job.run`), so the verdicts are exactly those of one request per call."""

    def __init__(self, units=()):
        self.units = list(units)
        self.sent = []   # (unit, (payload, value)) sent ahead to the child, results not read yet

    def ahead(self, unit, kind, payload, value):
        """Return the (unit, call) pairs to send with this call of `unit` (recorded as sent); [] when the call is
        not the one predicted for it."""
        units = self.units
        mine = units[unit] if units and kind == Msg.CALL else None
        if type(mine) is not tuple or not (payload == mine[0] or _same(value, mine[1])):
            return []
        out = []
        for j in range(unit + 1, len(units)):
            if units[j] is NEUTRAL:
                continue
            if units[j] is None:
                break
            out.append((j, units[j]))
        self.sent.extend(out)
        return out

    def take(self, unit, kind, payload, value):
        """Return True when this call of `unit` was sent ahead (its result is on its way), False when nothing
        was sent ahead; raise _Desync when the call differs from the one sent ahead."""
        if not self.sent:
            return False
        expected_unit, (expected, expected_value) = self.sent[0]
        if kind != Msg.CALL or expected_unit != unit or not (payload == expected or _same(value, expected_value)):
            raise _Desync()
        del self.sent[0]
        return True

    def missed(self, unit):
        """Return True when `unit` ended without making the call sent ahead for it (e.g. its test raised first)."""
        return bool(self.sent) and self.sent[0][0] == unit


# ----------------------------------------------------------------------------------------- the worker

class _Timeout(BaseException):
    """A candidate call ran past the test's deadline (BaseException: test code cannot swallow it)."""


class _Gone(BaseException):
    """The program's process ended or broke the protocol."""


CPU_POLL_S = 0.02   # how often a job with a CPU budget looks at its program's CPU time while it waits for it
_TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid):
    """The CPU seconds (user and system, every thread) process `pid` has used; 0.0 when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()
        return (int(fields[11]) + int(fields[12])) / _TICKS
    except (OSError, ValueError, IndexError):
        return 0.0


class _Child:
    """A child as the worker sees it: its pid, the worker's ends of its pipes, a pidfd (None where the kernel
    has none) to wait for its end, and what was read past its last message."""

    __slots__ = ("pid", "cmd_w", "res_r", "out_r", "pidfd", "pending", "born")

    def __init__(self, pid, cmd_w, res_r, out_r, pidfd):
        self.pid, self.cmd_w, self.res_r, self.out_r = pid, cmd_w, res_r, out_r
        self.pidfd = pidfd
        self.pending = bytearray()
        self.born = time.monotonic()


class _Job:
    def __init__(self, worker, job):
        self.w = worker
        self.job = job
        self.child = None            # the _Child running the program
        self.load_error = None
        self.deadline = 0.0
        self.flag = None             # "timeout" / "gone" / "desync" / "bad" (not plain data) in the current unit
        self.output = bytearray()
        self.calls = _CallPlan()     # call prediction and the calls sent ahead (none until `run` plans them)
        self.unit = 0                # index of the unit running
        self.timeouts = 0
        self.code = None             # the program, compiled and marshalled
        self.judge = None            # the worker's _Judge once told this job (at the job's first judged test)
        budget = job.get("cpu_budget_s")
        self.cpu_budget = None if budget is None else float(budget)   # CPU seconds of the job's programs in all
        self.cpu_spent = 0.0         # CPU seconds of this job's programs that ended (`kill`)
        self.cut = False             # the current unit was cut by the CPU budget

    # -- child management
    def spawn(self, calls=()):
        """Take the warm child and send it the program, with the first pipelined calls (`calls`) if any: it
        answers `loaded` and then their results, so loading costs no round trip of its own."""
        if self.code is None:
            # Compiled by the trainer (`code`), which checks the syntax with the same compile; source comes only
            # when it does not compile, and the compiler's error becomes the load error. Never in the child: in a
            # fresh child every page the compiler writes is first copied. A program that does not compile needs
            # no child at all.
            try:
                self.code = self.job.get("code") or marshal.dumps(
                    compile(self.job["program"], "<program>", "exec", dont_inherit=True))
            except BaseException as e:
                self.load_error = _describe(e)
                raise _Gone(self.load_error) from None
        self.child = child = self.w.take_warm()
        job = {"code": self.code, "entry_point": self.job["entry_point"],
               "param": self.job.get("param", "candidate"), "cpu_s": self.job["cpu_s"], "calls": list(calls)}
        try:
            _send(child.cmd_w, Msg.PROGRAM, job, self.deadline)
        except TimeoutError:
            self.flag = "timeout"
            raise _Timeout() from None
        except OSError:
            self.flag = "gone"
            raise _Gone("the program's process ended before it started") from None
        first = self.receive()
        if first[0] == Msg.LOAD_ERROR:
            self.load_error = str(first[1])[:400] if len(first) > 1 else "load error"
            self.kill()
            raise _Gone(self.load_error)
        if first[0] != Msg.LOADED:
            self.kill()
            raise _Gone("protocol error")

    def kill(self, wait=True):
        """Kill the program's processes. `wait=False` (end of a job) only sends the signals: the worker then
        replies, and waits for them to be gone (and removes the temp dir) before it takes the next job."""
        child, self.child = self.child, None
        self.calls.sent.clear()
        if child is None:
            return
        self.cpu_spent += _cpu_seconds(child.pid)
        try:
            os.killpg(child.pid, signal.SIGKILL)   # the child leads its own group (setsid) ...
        except OSError:
            try:
                os.kill(child.pid, signal.SIGKILL)   # ... unless it died or was killed before setsid
            except OSError:
                pass
        self.drain(child.out_r)
        self.w.retire(child)
        self.w.sweep(wait=wait)
        if wait:
            self.w.tidy()

    def drain(self, fd):
        try:
            while True:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    return
                if len(self.output) < OUTPUT_CAP:
                    self.output += chunk[:OUTPUT_CAP - len(self.output)]
        except (BlockingIOError, OSError):
            return

    def receive(self):
        """Read one framed JSON message from the child before the deadline, draining its output meanwhile.

        Reads take whatever the pipe holds (a whole message, usually, in one read); bytes past the message are
        kept for the next call."""
        child = self.child
        buf = child.pending
        while True:
            try:
                data = unframe(buf, MAX_RESULT)
            except ValueError:
                self.flag = "gone"
                raise _Gone("result too large") from None
            if data is not None:
                break
            left = self.deadline - time.monotonic()
            if left <= 0 or self.cpu_over():
                self.flag = "timeout"
                raise _Timeout()
            if self.cpu_budget is not None:   # look at the program's CPU time every CPU_POLL_S
                left = min(left, CPU_POLL_S)
            ready = select.select([child.res_r, child.out_r], [], [], left)[0]
            if child.out_r in ready:
                self.drain(child.out_r)
            if child.res_r in ready:
                try:
                    chunk = os.read(child.res_r, 1 << 20)
                except BlockingIOError:
                    continue
                if not chunk:
                    self.flag = "gone"
                    raise _Gone("the program's process ended (exit, signal or a resource limit)")
                buf += chunk
        try:
            msg = json.loads(data)
            if type(msg) is not list or not msg or type(msg[0]) is not str:
                raise ValueError
            return msg
        except (ValueError, RecursionError, MemoryError):
            self.flag = "gone"
            raise _Gone("malformed message from the program") from None

    def cpu_over(self):
        """Whether the job's programs spent its CPU budget (`cpu_budget_s`; never without one): the unit running is
        cut then, and the tests after it skipped, as past the run's wall-clock budget."""
        if self.cpu_budget is None:
            return False
        spent = self.cpu_spent + (0.0 if self.child is None else _cpu_seconds(self.child.pid))
        self.cut = self.cut or spent >= self.cpu_budget
        return self.cut

    def request(self, kind, payload, value=None):
        """Return the child's answer to one message (`kind`: Msg.CALL or Msg.EXEC) of the current unit."""
        if self.load_error is not None:
            raise _Gone(self.load_error)
        try:
            sent_ahead = self.calls.take(self.unit, kind, payload, value)
        except _Desync:
            self.flag = "desync"
            raise
        if not sent_ahead:
            ahead = [] if self.timeouts >= int(self.job["max_timeouts"]) else self.calls.ahead(
                self.unit, kind, payload, value)
            calls = [payload] + [call[0] for _, call in ahead]
            try:
                if self.child is None:
                    self.spawn(calls if ahead else ())
                    if not ahead:
                        _send(self.child.cmd_w, kind, payload, self.deadline)
                elif ahead:
                    _send(self.child.cmd_w, Msg.CALLS, calls, self.deadline)
                else:
                    _send(self.child.cmd_w, kind, payload, self.deadline)
            except TimeoutError:
                self.flag = "timeout"
                raise _Timeout() from None
            except OSError:
                self.flag = "gone"
                raise _Gone("the program's process ended (exit, signal or a resource limit)") from None
        msg = self.receive()
        if msg[0] == Msg.OK and len(msg) == 2:
            return msg[1]
        if msg[0] == Msg.ERR and len(msg) == 2:
            raise _ProgramError(str(msg[1])[:400])
        if msg[0] == Msg.BAD and len(msg) == 2:
            self.flag = "bad"
            raise _NotPlainData(f"result is not plain data ({str(msg[1])[:300]})")
        self.flag = "gone"
        raise _Gone("protocol error")

    # -- the candidate as seen by the trusted test code
    def candidate(self, *args, **kwargs):
        try:
            payload = marshal.dumps((args, kwargs))
        except ValueError:
            raise TypeError("the test passes arguments that are not plain data") from None
        tree = self.request(Msg.CALL, payload, (args, kwargs))
        try:
            return _decode(tree, self.deadline)
        except _Timeout:
            self.flag = "timeout"
            raise
        except (ValueError, TypeError, RecursionError, MemoryError) as e:
            self.flag = "bad"
            raise _NotPlainData(f"result is not plain data ({e})") from None

    # -- running the suite
    def run(self):
        """Return the job's outcomes. A call other than the predicted one starts the job over without prediction;
        a judge lost in the middle of a test (`_JudgeBroke`) starts it over on a fresh judge, once: a second loss
        raises (the trainer's "sandbox error"), so no verdict ever rests on a lost judge."""
        job = self.job
        if job.get("trusted", True):
            self.calls = _CallPlan(self.w.plan(job))
        lost = 0
        try:
            while True:
                try:
                    return self.run_units()
                except _Desync:   # a fresh child, one request per call from now on
                    self.calls = _CallPlan()
                except _JudgeLost:
                    lost += 1
                    if lost > 1:
                        raise RuntimeError("the judge of judged tests was lost twice") from None
                self.kill()
                self.output, self.load_error, self.judge = bytearray(), None, None
        finally:
            self.kill(wait=False)

    def judged_unit(self, src):
        """Return the error of one judged test ('' when it held), evaluated in the worker's bounded judge
        (`_Judge`, told this job's namespace first); a judge that broke is closed (the next test gets a new one)."""
        try:
            if self.judge is None:
                self.judge = self.w.judge()
                self.judge.start_job(self.job, self.deadline)
            return self.judge.evaluate(src, self)
        except _JudgeBroke:
            self.flag = "judge lost"   # not the test's doing: `run` starts the job over
            if self.judge is not None:
                self.judge.broken = True
            raise _JudgeLost() from None
        except _Timeout:
            self.flag = "timeout"
            raise
        finally:
            if self.judge is not None and self.judge.broken:
                self.w.close_judge()
                self.judge = None

    def run_units(self):
        job = self.job
        timeout_s = float(job["timeout_s"])
        max_timeouts = int(job["max_timeouts"])
        trusted = job.get("trusted", True)
        judged = job.get("judged", False)
        env = {"__name__": "__check__", "__builtins__": builtins}
        for src in job["context"]:
            try:
                exec(self.w.compiled(src), env)
            except BaseException:
                pass
        env[job.get("param", "candidate")] = self.candidate
        env[job["entry_point"]] = self.candidate   # tests may call the solution by name (HumanEval/33)
        outcomes = []
        self.timeouts = 0
        total_s = job.get("total_s")
        run_deadline = math.inf if total_s is None else time.monotonic() + float(total_s)
        for index, (kind, src, text) in enumerate(job["units"]):
            if kind == "test" and self.timeouts >= max_timeouts:
                outcomes.append([text, False, f"skipped after {self.timeouts} timeouts", False, False])
                continue
            if kind == "test" and time.monotonic() >= run_deadline:
                outcomes.append([text, False, f"skipped: the run's {total_s:g} s were spent", True, False])
                continue
            if kind == "test" and self.cpu_over():
                outcomes.append([text, False, f"skipped: the run's {self.cpu_budget:g} CPU s were spent", True,
                                 False])
                continue
            self.unit = index
            self.flag = None
            self.deadline = min(time.monotonic() + timeout_s, run_deadline)
            error, on_values = "", True   # on_values: the test's own evaluation decided (see `TestOutcome`)
            try:
                if judged:
                    error = self.judged_unit(src)
                elif trusted:
                    exec(self.w.compiled(src), env)
                else:
                    self.request(Msg.EXEC, src)
            except _Timeout:
                pass
            except (_Gone, _ProgramError, _NotPlainData) as e:
                error, on_values = str(e), False
            except AssertionError as e:
                error = "AssertionError" + (f": {e}" if str(e) else "")
            except BaseException as e:
                error = f"{type(e).__name__}: {e}"[:400]
            # the unit's predicted call must have been made (a test that raised before it, say, did not)
            if self.flag == "desync" or self.calls.missed(index):
                raise _Desync()
            if self.flag == "judge lost":
                raise _JudgeLost()
            if self.flag == "timeout":
                self.timeouts += 1
                self.kill()
                if kind == "test":
                    outcomes.append([text, False, f"cut: the run's {self.cpu_budget:g} CPU s were spent" if self.cut
                                     else f"timed out after {timeout_s:g} s", True, False])
                continue
            if self.flag == "gone":
                self.kill()
                error, on_values = error or "the program's process ended", False
            if self.flag == "bad":   # whatever the test made of it (it may catch every exception)
                error, on_values = error or "result is not plain data", False
            if kind == "test":
                outcomes.append([text, not error, error, False, on_values])
        return outcomes


# ----------------------------------------------------------------------------------------- the judge of judged tests

JUDGE_MESSAGE = 16 << 20   # bytes of one message from the judge (a call's marshalled arguments; past it the test fails)
JUDGE_JOBS = 256           # jobs one judge fork serves before the worker forks a fresh one


class _JudgeBroke(Exception):
    """The judge's process ended, or its pipe broke, in the middle of a test, without saying it reached its own
    bound: not the test's doing (the judge is out of every program's reach; the OOM killer, say). The job is
    run again on a fresh judge (`_Job.run`), and a second loss is a sandbox error, never a verdict."""


class _Judge:
    """Where the tests of a judged suite (`job["judged"]`: asserts a model wrote, `rewards.judged_tests`) are
    evaluated: a fork of the worker, bounded as a program is: address space (what the worker has mapped plus the
    programs' memory limit), CPU (the job's) and each test's wall-clock deadline, which the worker enforces with
    SIGKILL. The worker's own checks come only at the candidate's calls, and one C call of a judged expression
    runs past all of them: `len(str(list(...)))` nested 11 times over `'ab'` (145 characters) took 4 s under a 1 s
    timeout and 250 MiB, in the worker, shared by every program of its slot. In the fork, each call of the candidate
    is a request to the worker (marshalled arguments), which serves it as usual (`_Job.candidate`: prediction,
    deadline, decoding) and sends back the decoded plain data; a call that raises aborts the test in the fork (the
    unit's verdict is the worker's, as for a trusted test). The fork serves the worker's jobs one after another (each
    job sends its own namespace and CPU budget first), until it breaks, runs past a deadline or has served JUDGE_JOBS
    jobs."""

    def __init__(self, host):
        self.pid, self.to_w, self.from_r, self.pidfd = host.spawn()
        os.set_blocking(self.to_w, False)
        self.buf = bytearray()
        self.jobs = 0
        self.broken = False   # it overran a deadline, ended, or did not answer an abort: the worker closes it

    def start_job(self, job, deadline):
        """Tell the fork the next job's namespace (context, entry point, parameter) and CPU budget."""
        self.jobs += 1
        self.send(("job", (list(job["context"]), job["entry_point"], job.get("param", "candidate"),
                           int(job["cpu_s"]))), deadline)

    def evaluate(self, src, run):
        """Return the error of the judged test `src` ('' when it held), its calls served by `run` (a _Job).
        Raises what the calls raise (`_Job.candidate`; the fork's test is aborted first), `_Timeout` past the
        unit's deadline and `_JudgeBroke` when the fork ends (`broken` is then set)."""
        aborted = False
        try:
            self.send(("unit", src), run.deadline)
            while True:
                msg = self.receive(run.deadline)
                if msg[0] == "done":
                    self.broken = msg[2]   # it spent its CPU bound: the verdict stands, and it ends
                    return msg[1]
                if msg[0] == "too large":
                    self.broken = True     # (it ended after saying so)
                    return msg[1]
                args, kwargs = msg[1]
                try:
                    value = run.candidate(*args, **kwargs)
                except BaseException:
                    aborted = True
                    self.broken = not self.abort(run.deadline)
                    raise
                self.send(("value", value), run.deadline)
        except (_Timeout, _JudgeBroke):
            self.broken = self.broken or not aborted
            raise

    def abort(self, deadline):
        """End the fork's test after a call that raised; return whether it answered (within a second past the
        deadline at most)."""
        try:
            self.send(("abort", None), max(deadline, time.monotonic() + 1.0))
            return self.receive(max(deadline, time.monotonic() + 1.0))[0] == "aborted"
        except (_Timeout, _JudgeBroke, ValueError, EOFError, TypeError):
            return False

    def send(self, message, deadline):
        try:
            _write_all(self.to_w, frame(marshal.dumps(message)), deadline)
        except TimeoutError:
            raise _Timeout() from None
        except OSError:
            raise _JudgeBroke() from None

    def receive(self, deadline):
        while True:
            try:
                data = unframe(self.buf, JUDGE_MESSAGE)
            except ValueError:
                raise _JudgeBroke() from None
            if data is not None:
                return marshal.loads(data)
            left = deadline - time.monotonic()
            if left <= 0:
                raise _Timeout()
            if select.select([self.from_r], [], [], left)[0]:
                chunk = os.read(self.from_r, 1 << 20)
                if not chunk:
                    raise _JudgeBroke()
                self.buf += chunk

    def close(self):
        """Kill the judge and wait (a second at most) until it has ended; the judge host reaps it."""
        for fd in (self.to_w, self.from_r):
            os.close(fd)
        if self.pidfd is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except OSError:
                pass
            return
        try:
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            select.select([self.pidfd], [], [], 1.0)
        except OSError:
            pass
        os.close(self.pidfd)


def _judge_namespace(context, entry_point, param, candidate):
    """The namespace a job's judged tests run in: its context, and the candidate under both names."""
    env = {"__name__": "__check__", "__builtins__": builtins}
    for src in context:
        try:
            exec(compile(src, "<context>", "exec"), env)
        except BaseException:
            pass
    env[param] = env[entry_point] = candidate
    return env


class _Abort(BaseException):
    """In the judge's fork: the candidate's call raised in the worker; the test ends there."""


def _judge_main(memory_mb, cmd_r, res_w):
    """The judge's fork: bound itself, then evaluate the jobs' units until the worker closes the pipe. Never
    returns."""
    try:
        lo, hi = sorted((cmd_r, res_w))
        os.closerange(3, lo)   # the worker's protocol, the zygote's socket, the child's pipes: none of its business
        os.closerange(lo + 1, hi)
        os.closerange(hi + 1, 1 << 16)
        _, hard = resource.getrlimit(resource.RLIMIT_AS)   # the worker's own bound, at least
        try:
            with open("/proc/self/statm") as f:
                mem = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE") + (int(memory_mb) << 20)
        except (OSError, ValueError, IndexError):   # no /proc here: the worker's bound stays
            mem = hard
        mem = mem if hard == resource.RLIM_INFINITY else min(mem, hard)
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        reader, writer = os.fdopen(cmd_r, "rb"), os.fdopen(res_w, "wb", buffering=0)

        def read():
            head = reader.read(4)
            if len(head) < 4:
                os._exit(0)
            return marshal.loads(reader.read(_LENGTH.unpack(head)[0]))

        def candidate(*args, **kwargs):
            try:
                payload = marshal.dumps(("call", (args, kwargs)))
            except ValueError:
                raise TypeError("the test passes arguments that are not plain data") from None
            if len(payload) > JUDGE_MESSAGE:   # the test's doing: its verdict, then a fresh judge
                writer.write(frame(marshal.dumps(("too large", f"the test's call arguments are over "
                                                               f"{JUDGE_MESSAGE >> 20} MiB"))))
                os._exit(0)
            writer.write(frame(payload))
            kind, value = read()
            if kind != "value":
                raise _Abort()
            return value

        def cpu_spent(*_):
            raise _CpuSpent()

        signal.signal(signal.SIGXCPU, cpu_spent)
        env = {}
        while True:
            kind, payload = read()
            if kind == "job":
                env = _judge_namespace(*payload[:3], candidate)
                used = resource.getrusage(resource.RUSAGE_SELF)   # the job's CPU budget on top of what was used
                soft = int(used.ru_utime + used.ru_stime) + payload[3] + 1
                resource.setrlimit(resource.RLIMIT_CPU, (soft, resource.getrlimit(resource.RLIMIT_CPU)[1]))
                continue
            try:
                exec(compile(payload, "<test>", "exec"), env)
                error = ""
            except _Abort:
                writer.write(frame(marshal.dumps(("aborted", None))))
                continue
            except _CpuSpent:
                writer.write(frame(marshal.dumps(("done", "the test ran past its CPU bound", True))))
                os._exit(0)
            except AssertionError as e:
                error = "AssertionError" + (f": {e}" if str(e) else "")
            except BaseException as e:   # MemoryError (its memory bound) among them: the test's verdict
                error = _describe(e)
            writer.write(frame(marshal.dumps(("done", error, False))))
    finally:
        os._exit(0)


class _CpuSpent(BaseException):
    """In the judge: the job's CPU budget is spent (SIGXCPU at RLIMIT_CPU's soft limit)."""


def _judge_host(sock, memory_mb):
    """The judge host: forked by the worker before it made the programs' PID namespace, so that every judge it
    forks lives outside it: no program can see one (its pid, whether one ran) or signal it, whatever its uid.
    Forks one judge (`_judge_main`) per byte the worker sends and hands back its pid, its pipes and a pidfd;
    reaps its judges as they end. Never returns."""
    try:
        signal.signal(signal.SIGCHLD, lambda *_: _Scratch.reap())
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        keep = sock.fileno()
        os.closerange(3, keep)
        os.closerange(keep + 1, 1 << 16)
        while True:
            if not sock.recv(1):   # the worker is gone
                return
            to_r, to_w = os.pipe()
            from_r, from_w = os.pipe()
            pid = os.fork()
            if pid == 0:
                _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)   # the judge ends with its host (and the worker)
                sock.close()
                os.close(to_w)
                os.close(from_r)
                _judge_main(memory_mb, to_r, from_w)   # never returns
            os.close(to_r)
            os.close(from_w)
            fds = [to_w, from_r]
            try:
                fds.append(os.pidfd_open(pid))
            except (OSError, AttributeError):   # no pidfds: the worker signals the pid
                pass
            socket.send_fds(sock, [struct.pack("<i", pid)], fds)
            for fd in fds:
                os.close(fd)
    finally:
        os._exit(0)


class _JudgeHost:
    """The worker's handle on the judge host (`_judge_host`): `spawn` asks it for a fresh judge."""

    def __init__(self, memory_mb):
        self.sock, theirs = socket.socketpair()
        self.pid = os.fork()
        if self.pid == 0:
            self.sock.close()
            _judge_host(theirs, memory_mb)
        theirs.close()

    def spawn(self):
        """Return a fresh judge's (pid, the worker's end of its command pipe, of its result pipe, pidfd or None)."""
        try:
            self.sock.sendall(b"J")
            msg, fds, _, _ = socket.recv_fds(self.sock, 16, 3)
        except OSError:
            raise _JudgeBroke() from None
        if len(msg) != 4 or len(fds) < 2:
            raise _JudgeBroke()
        return (struct.unpack("<i", msg)[0], fds[0], fds[1], fds[2] if len(fds) > 2 else None)

    def close(self):
        self.sock.close()
        _end_process(self.pid)


def _end_process(pid):
    if pid is not None:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except OSError:
            pass


class _ProgramError(Exception):
    """The candidate raised: an Exception, which a test may expect and catch."""


class _NotPlainData(BaseException):
    """The candidate returned something that is not plain data (builtin types only): its test fails, even when
    the test catches every exception (a BaseException, and the unit's flag is set: see `_Job.run_units`)."""


def _host_pid(pidfd):
    """The pid (as this process's /proc numbers it) of the process a pidfd refers to."""
    with open(f"/proc/self/fdinfo/{pidfd}") as f:
        for line in f:
            if line.startswith("Pid:"):
                return int(line.split()[1])
    raise OSError("no Pid in fdinfo")


def _ended(pid):
    """Whether process `pid` has ended, every thread of it, and waits to be reaped (or is gone). A zombie group
    leader whose other threads still run has not: its main thread ended (the exit syscall, not exit_group), the
    rest of it runs on, and a SIGKILL to its pid ends them."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            if f.read().rpartition(b")")[2][1:2] not in (b"Z", b"X"):
                return False
        return len(os.listdir(f"/proc/{pid}/task")) <= 1
    except OSError:
        return True


WARM_UP_FORKS = 1
WARM_MAX_AGE_S = 0.05   # a pre-forked child older than this is replaced at the job (`_Worker.take_warm`)


PLAN_CACHE_SIZE = 512   # suites whose call plans a worker keeps (the oldest goes first): a data set's, and a few
                        # hundred testers' pools (about 77 KiB each)


class _Worker:
    def __init__(self, cfg):
        self.cfg = cfg
        self.cache = {}
        self.plans = {}
        self.zsock = None
        self.zygote_pid = None
        self.warm = None             # the pre-forked _Child waiting for the next program
        self.dying = []              # pidfds of killed children not yet seen to end
        self.judge_proc = None       # the _Judge of judged tests (forked at the first one)
        self.judge_host = None       # the _JudgeHost that forks judges outside the programs' PID namespace

    def judge(self):
        """Return the judge of judged tests (`_Judge`), forked afresh when there is none, or when the last one has
        served JUDGE_JOBS jobs (what a hostile test left in its memory goes with it)."""
        if self.judge_proc is not None and self.judge_proc.jobs >= JUDGE_JOBS:
            self.close_judge()
        if self.judge_proc is None:
            self.judge_proc = _Judge(self.judge_host)
        return self.judge_proc

    def close_judge(self):
        judge, self.judge_proc = self.judge_proc, None
        if judge is not None:
            judge.close()

    def take_warm(self):
        """Return the child for the next program: the pre-forked one, or a fresh one when that one has waited
        longer than WARM_MAX_AGE_S. A program can read its process's age (/proc/self/stat's start time against
        /proc/uptime); a child that waited out the trainer's generation would tell the first program of each
        batch on a slot (always a scored run, never a probe) from the others."""
        child, self.warm = self.warm, None
        if child is not None and time.monotonic() - child.born > WARM_MAX_AGE_S:
            self.retire(child)   # its pipes closed, it exits
            self.sweep(wait=True)
            child = None
        return child or self.fork_child()

    def fork_child(self):
        """Ask the zygote for a fresh, fully set-up child waiting for its program, with fresh scratch dirs.

        One child runs on a slot at a time, and the last one's processes are gone (`tidy`) before the next one is
        made, so each program finds /tmp, /var/tmp, /dev/shm and /run/lock new (`_Scratch`) and its own temp
        dir (cwd, HOME, TMPDIR: one path per slot) in them."""
        self.zsock.sendall(b"F")
        msg, fds, _, _ = socket.recv_fds(self.zsock, 16, 4)
        if len(msg) != 4 or len(fds) < 3:
            raise OSError("the zygote is gone")
        pid = struct.unpack("<i", msg)[0]
        for fd in fds[:3]:
            os.set_blocking(fd, False)
        pidfd = fds[3] if len(fds) > 3 else None
        if self.cfg["pidns"]:
            pid = _host_pid(pidfd)   # the zygote's number is its namespace's; signals from here need ours
        return _Child(pid, fds[0], fds[1], fds[2], pidfd)

    def retire(self, child):
        """Close the worker's ends of a killed child's pipes; its pidfd waits for `tidy`, its temp dir for the
        next `fork_child`."""
        for fd in (child.cmd_w, child.res_r, child.out_r):
            os.close(fd)
        if child.pidfd is not None:
            self.dying.append(child.pidfd)

    def tidy(self):
        """Between jobs: wait until the last program's processes are gone, then pre-fork the next child (in a
        fresh temp dir) so that the next job does not wait for fork and set-up."""
        self.sweep(wait=True)
        if self.warm is None:
            self.warm = self.fork_child()

    def plan(self, job):
        """The predicted call of each unit of a trusted suite (`_plan_unit`), cached per suite. None when the
        context names the entry point: a helper of the prompt could then call it from any unit."""
        names = (job.get("param", "candidate"), job["entry_point"])
        key = ("plan", names, tuple(job["context"]), tuple(src for _, src, _ in job["units"]))
        plan = self.plans.get(key)
        if plan is None:
            if any(_plan_unit(src, names) is not NEUTRAL for src in job["context"]):
                plan = []
            else:
                plan = [_plan_unit(src, names) for _, src, _ in job["units"]]
            while len(self.plans) >= PLAN_CACHE_SIZE:
                del self.plans[next(iter(self.plans))]
            self.plans[key] = plan
        return plan

    def compiled(self, src):
        code = self.cache.get(src)
        if code is None:
            if len(self.cache) > 8192:   # a data set's tests and contexts (HumanEval: ~1,400) stay compiled
                self.cache.clear()
            code = self.cache[src] = compile(src, "<test>", "exec")
        return code

    def children(self):
        """The zygote's children that have not ended (its zombies, which it reaps before its next fork, left out;
        a zombie group leader with live threads kept in)."""
        try:
            with open(f"/proc/{self.zygote_pid}/task/{self.zygote_pid}/children") as f:
                pids = [int(x) for x in f.read().split()]
        except (OSError, ValueError):
            return []
        return [pid for pid in pids if not _ended(pid)]

    def kill_uid(self):
        """SIGKILL every process of the slot's uid: `kill(-1)` with our real uid set to it."""
        uid = self.cfg["uid"]
        if self.warm is not None:   # kill(-1) reaches the warm child too: let it go
            self.retire(self.warm)
            self.warm = None
        os.setresuid(uid, uid, 0)
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
        finally:
            os.setresuid(0, 0, 0)

    def sweep(self, wait=True):
        """Kill every process the program left (all are below the zygote, a subreaper), until none is left.

        With a slot uid: `kill(-1, SIGKILL)` with our real uid set to the slot's uid reaches exactly the
        program's processes, also those that changed session or raced a fork. Without one: kill the zygote's
        children by pid. The zygote's child list tells when nothing is left (kill(-1) alone cannot: it may
        report success with nothing to kill). With `wait`, the killed children's pidfds are waited for first
        (the usual program never forks: its end is then the end of the job's processes), so the list is
        read once or twice instead of polled. Without `wait` (end of a job, before the reply) and with a slot
        uid, kill(-1) is sent without reading the list: the program's processes are there for sure.
        """
        if wait and self.dying:
            end = time.monotonic() + 1.0
            while self.dying and time.monotonic() < end:
                for fd in select.select(self.dying, [], [], max(0.0, end - time.monotonic()))[0]:
                    os.close(fd)
                    self.dying.remove(fd)
            for fd in self.dying:    # not ended within a second (unlikely): the list below keeps watch
                os.close(fd)
            self.dying.clear()
        uid = self.cfg["uid"]
        if not wait and uid is not None:
            self.kill_uid()   # end of a job: the program's processes are there for sure; no need to look
            return
        warm = self.warm.pid if self.warm else None
        for attempt in range(4000):
            left = [p for p in self.children() if p != warm]
            if not left:
                return
            if uid is not None:
                self.kill_uid()
                warm = None
            else:
                for pid in left:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
            if not wait:
                return
            time.sleep(0.0002 if attempt < 50 else 0.002)


# ----------------------------------------------------------------------------------------- isolation (set-up)
#
# What a program may see is an allow-list: a new root file system (a tmpfs) holding copies of the paths the
# trainer lists in `cfg["copy"]` (the interpreter, its standard library, the shared libraries it loads; see
# `rewards.sandbox_view.interpreter_view`), read-only binds of the extra paths in `cfg["expose"]` (none by default),
# a few device nodes, fresh scratch tmpfs mounts and /proc; nothing else of the host's file system exists there.
# The steps, in order: `_enter_namespaces`, `_build_root`, `_pivot_into`; the zygote then mounts the programs'
# own /proc (`_programs_proc`).
#
# Copies, not binds of the host's directories: a lookup on the host's file system leaves a dentry behind, a
# name that does not exist included (a negative dentry), and the next lookup of that name is faster (7.6 us
# against 3.0 us on ext4 here). Through binds, a program that looks up names chosen by a bit pattern passed
# the pattern to the next program, which timed the same lookups (16 bits of 16). A tmpfs keeps no negative
# dentries (each is dropped at its last use) and keeps every file's dentry and pages in memory, so a lookup or
# a read there costs the same whatever an earlier program did (`tests/rewards/test_sandbox_lifetime.py`
# measures it).
# Left out of the copy (COPY_SKIP): the standard library's own test suite (123 MB here), its site-packages
# (covered anyway), the build configuration (config-3.x: a static libpython) and optimized bytecode
# (`.opt-1.pyc`, `.opt-2.pyc`: programs run without -O).
COPY_SKIP_DIRS = ("test", "site-packages", "dist-packages")
COPY_SKIP_PREFIXES = ("config-3.",)
COPY_SKIP_SUFFIXES = (".opt-1.pyc", ".opt-2.pyc")

DEVICES = ("null", "zero", "full", "random", "urandom")
MNT_DETACH = 2
MS_MOVE = 8192
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}


def _pidfd_works():
    try:
        os.close(os.pidfd_open(os.getpid()))
        return True
    except (OSError, AttributeError):
        return False


def _enter_namespaces(cfg, have, missing):
    """Unshare network, mount and IPC namespaces; as a non-root user inside a new user namespace. Returns the flags
    in force (0: none). The programs' PID namespace comes later (`_enter_pid_namespace`), after the judge host."""
    flags = CLONE_NEWNET | CLONE_NEWNS | CLONE_NEWIPC
    root = os.geteuid() == 0
    uid, gid = os.getuid(), os.getgid()
    try:
        _unshare(flags | (0 if root else CLONE_NEWUSER))
    except OSError as error:
        missing.append(f"namespaces ({error.strerror}): network reachable, the whole file system visible")
        return 0
    if not root:
        for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
        have.append("user-ns")
    have.append("net-ns (no interfaces, no loopback)")
    have.append("ipc-ns (a fresh one per program)")
    return flags


def _enter_pid_namespace(cfg, report):
    """Make the PID namespace the worker's next child (the zygote, init of the programs) is born in, when pidfds
    work (the worker then finds its children's pids) and namespaces do; sets cfg["pidns"]. Called after the judge
    host was forked (`_JudgeHost`): the judges live in the worker's namespace, out of the programs' sight."""
    cfg["pidns"] = False
    if cfg["namespaces"] and _pidfd_works():
        try:
            _unshare(CLONE_NEWPID)
            cfg["pidns"] = True
        except OSError:
            pass
    if cfg["pidns"]:
        report["have"].append("pid-ns (a program sees only its own processes; the judges live outside it)")
    elif cfg["namespaces"]:
        report["missing"].append("pid-ns (no pidfd): programs see every process of the host in /proc")


def _bind(fd_or_path, target, is_dir):
    """Read-only bind of an opened path (`/proc/self/fd/N`) or a path onto `target` (made as a dir or file)."""
    if is_dir:
        os.makedirs(target, mode=0o755, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
        os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o644))
    source = f"/proc/self/fd/{fd_or_path}" if isinstance(fd_or_path, int) else fd_or_path
    try:
        _mount(source, target, None, MS_BIND, None)
    except OSError:   # in a user namespace a mount with locked submounts binds only recursively
        _mount(source, target, None, MS_BIND | MS_REC, None)
    _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, None)


def _skip_in_copy(folder, names):
    """`shutil.copytree`'s ignore: the names in `folder` that COPY_SKIP_* leave out."""
    skip = [n for n in names if n.endswith(COPY_SKIP_SUFFIXES)]
    if os.path.isfile(os.path.join(folder, "os.py")):   # the standard library's top directory
        skip += [n for n in names if n in COPY_SKIP_DIRS or n.startswith(COPY_SKIP_PREFIXES)]
    return skip


def _copy_view(paths, new):
    """Copy `paths` (files, symbolic links, directories) to the same places below `new`, times and modes kept
    (a module's .pyc is valid only for its source's time and size). Returns (files copied, bytes); what cannot be
    read is left out."""
    for path in paths:
        target = new + path
        try:
            os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
            if os.path.islink(path):
                os.symlink(os.readlink(path), target)
            elif os.path.isdir(path):
                shutil.copytree(path, target, symlinks=True, ignore=_skip_in_copy, dirs_exist_ok=True)
            else:
                shutil.copy2(path, target)
        except (OSError, shutil.Error):
            pass
    files, size = 0, 0
    for top, _, names in os.walk(new):
        for name in names:
            files += 1
            size += os.lstat(os.path.join(top, name)).st_size
    return files, size


def _build_root(cfg, have, missing):
    """Make the programs' root file system on a tmpfs at /tmp (our private view of it; the host's /tmp is hidden
    from here on) and return its path. Every source is opened first, so that one below /tmp binds too."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE, None)
    sources = []
    for path in cfg["expose"]:
        try:
            sources.append((path, os.open(path, os.O_PATH), os.path.isdir(path)))
        except OSError:
            continue
    devices = [(d, os.open(f"/dev/{d}", os.O_PATH)) for d in DEVICES if os.path.exists(f"/dev/{d}")]
    proc = os.open("/proc", os.O_PATH)
    os.makedirs("/tmp", exist_ok=True)
    new = "/tmp"
    # size and inodes are bounds, not what it takes: pages are allocated as the copy writes them
    _mount("tmpfs", new, "tmpfs", MS_NOSUID | MS_NODEV, "size=4g,nr_inodes=1048576,mode=755")
    files, size = _copy_view(cfg["copy"], new)
    for path, fd, is_dir in sources:
        _bind(fd, new + path, is_dir)
        os.close(fd)
    for path in cfg["cover"]:   # e.g. site-packages inside the standard library's directory
        if os.path.isdir(new + path):
            _mount("tmpfs", new + path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4k,mode=755")
    for path, target in cfg["links"]:   # /lib -> usr/lib and the like, where the host has them
        if not os.path.lexists(new + path):
            os.makedirs(os.path.dirname(new + path), exist_ok=True)
            os.symlink(target, new + path)
    for name, fd in devices:
        # read-only, with devices allowed: a device node is read and written on a read-only mount all the same,
        # but its times cannot be set (a program could otherwise leave a mark on /dev/null for the next one)
        _bind(fd, f"{new}/dev/{name}", False)
        _mount(None, f"{new}/dev/{name}", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID, None)
        os.close(fd)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"{new}/dev/{name}")
    cfg["scratch_options"] = f"size={int(cfg['tmpfs_mb'])}m,nr_inodes={int(cfg['tmpfs_inodes'])},mode=1777"
    for path in cfg["scratch"]:
        os.makedirs(new + path, exist_ok=True)
        _mount("tmpfs", new + path, "tmpfs", MS_NOSUID | MS_NODEV, cfg["scratch_options"])
    if not os.path.lexists(new + "/var/lock"):
        os.symlink("/run/lock", new + "/var/lock")
    os.makedirs(new + "/proc")
    _mount(f"/proc/self/fd/{proc}", new + "/proc", None, MS_BIND | MS_REC, None)   # the worker's; see _programs_proc
    os.close(proc)
    bound = f" + {len(sources)} extra paths bound" if sources else ""
    have.append(f"private root: read-only copies of the interpreter, standard library and shared libraries ("
                f"{files} files, {size / 2 ** 20:.0f} MiB, on a tmpfs: no lookup of a program's leaves a trace for the "
                f"next){bound} + /dev/{{{','.join(d for d, _ in devices)}}}; nothing else of the host's files")
    have.append(f"scratch {','.join(cfg['scratch'])} (tmpfs {cfg['tmpfs_mb']} MiB each, a fresh one for each program)")
    return new


def _pivot_into(new):
    """Make `new` the root of this mount namespace and drop the old root (pivot_root; where the syscall is not
    known or refused, e.g. a root on initramfs, move the mount and chroot: the old root then stays mounted
    below, out of reach of a process without CAP_SYS_CHROOT, which our programs never have)."""
    os.chdir(new)
    number = SYS_PIVOT_ROOT.get(os.uname().machine)   # (no import here: the old root is hidden from now on)
    if number is not None and _libc.syscall(number, b".", b".") == 0:
        if _libc.umount2(b".", MNT_DETACH) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), "umount old root")
    else:
        _mount(new, "/", None, MS_MOVE, None)
        os.chroot(".")
    os.chdir("/")
    _mount(None, "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, None)


def _isolate(cfg):
    """Enter the namespaces (but the PID namespace: `_enter_pid_namespace`) and the private root; return the
    isolation report {"have": [...], "missing": [...]}."""
    have, missing = [], []
    flags = _enter_namespaces(cfg, have, missing)
    cfg["namespaces"] = bool(flags)
    cfg["ipc_ns"] = bool(flags & CLONE_NEWIPC)
    cfg["private_root"] = False
    if flags:
        try:
            _pivot_into(_build_root(cfg, have, missing))
            cfg["private_root"] = True
        except OSError as e:
            missing.append(f"private root ({e.strerror}: {e.filename}): programs see the whole file system")
    if os.geteuid() == 0 and os.getuid() == 0 and cfg["uid"] is not None and flags and "user-ns" not in have:
        have.append(f"uid {cfg['uid']}")
    else:
        cfg["uid"] = cfg["gid"] = None
        missing.append("separate uid (not root): programs share the worker's uid")
    cfg["drop_caps"] = "user-ns" in have   # uid 0 inside our user namespace: the child drops every capability
    return {"have": have, "missing": missing}


PROC_FLAGS = MS_NOSUID | MS_NODEV | 8   # 8: MS_NOEXEC
# A program sees only the processes it may ptrace (its own), not the zygote (/proc/1): the zygote reaps every
# program, so the children's times and page faults in its /proc/1/stat (cutime, cminflt, ...) add up what earlier
# programs did
PROC_OPTIONS = "hidepid=2"


def _programs_proc(cfg, report):
    """In the zygote, in a mount namespace of its own: the programs' /proc shows their PID namespace only (the
    worker keeps the host's). Sets cfg["fresh_proc"] (each child then gets a /proc of its own, `_Scratch`) and
    cfg["last_pid_fd"] (`_Scratch.number_afresh`); adds what it set up, or could not, to the isolation report."""
    _unshare(CLONE_NEWNS)
    _mount(None, "/", None, MS_REC | MS_PRIVATE, None)
    # the worker's /proc, kept open: the zygote names its mount namespaces through it (`_Scratch`), even where the
    # programs get no /proc at all
    cfg["worker_proc"] = os.open("/proc", os.O_PATH | os.O_DIRECTORY)
    try:
        if not cfg["pidns"]:
            raise OSError(0, "no pid namespace")
        # on top of the worker's /proc, not in place of it: in a user namespace a proc mount is refused unless one
        # is already in view (the worker's stays covered, out of reach of programs, which hold no capability)
        _mount("proc", "/proc", "proc", PROC_FLAGS, PROC_OPTIONS)
    except OSError:
        _libc.umount2(b"/proc", MNT_DETACH)
        _mount("tmpfs", "/proc", "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4k,mode=555")
        report["have"].append("no /proc (an empty directory)")
        return
    report["have"].append("/proc of the program's own pid-ns (a fresh mount for each program)")
    cfg["fresh_proc"] = True
    try:   # the pid the next fork gets in our PID namespace (writable with CAP_SYS_ADMIN over it: ours)
        cfg["last_pid_fd"] = os.open("/proc/sys/kernel/ns_last_pid", os.O_WRONLY | os.O_CLOEXEC)
        os.pwrite(cfg["last_pid_fd"], b"1", 0)
        report["have"].append("pids numbered afresh for each program")
    except OSError as e:
        cfg["last_pid_fd"] = None
        report["missing"].append(f"pids numbered afresh ({e.strerror}): a program's pid counts the processes of "
                                 f"earlier programs")


def main():
    cfg = json.loads(sys.argv[1])
    # No PR_SET_PDEATHSIG here: it follows the trainer *thread* that started us, not the process. The worker
    # ends when its stdin closes (the trainer exited or closed the pool); the zygote follows the worker.
    # the protocol uses private copies of fds 0 and 1; stray prints of test code go to /dev/null
    proto_in, proto_out = os.dup(0), os.dup(1)
    null = os.open("/dev/null", os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    if cfg.get("cpu") is not None:   # the slot's CPU (see `rewards.sandbox._slot_cpus`); inherited by all below
        try:
            os.sched_setaffinity(0, {cfg["cpu"]})
        except OSError:
            pass
    iso = _isolate(cfg)
    # not counted as missing isolation (Docker's default seccomp profile refuses the personality change): said in
    # the start-up line; verified cooperation's probes then see addresses that differ between workers
    iso["have"].append("the same addresses on every worker (no address randomization)" if SAME_LAYOUT else
                       "address randomization on (the personality change was refused): an object's address "
                       "differs between workers")
    cfg["tmpdir"] = f"/tmp/sbx-{cfg['slot']}"   # every child's cwd, HOME and TMPDIR (made afresh per child)
    worker = _Worker(cfg)
    # The worker's own memory is bounded too (results it decodes, test code it runs); the zygote lowers its limit
    # to the programs' before the first child.
    mem = (max(int(cfg["limits"]["memory_mb"]), 1024) + 1024) << 20
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    worker.judge_host = _JudgeHost(cfg["limits"]["memory_mb"])   # before the programs' PID namespace exists
    _enter_pid_namespace(cfg, iso)
    a, b = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        try:
            a.close()
            for fd in (proto_in, proto_out):
                os.close(fd)
            _zygote(b, cfg)
        finally:
            os._exit(0)
    b.close()
    for fd in cfg.get("cgroup_fds") or []:   # the zygote's: it joins the slot's cgroup with them
        os.close(fd)
    worker.zsock = a
    worker.zygote_pid = pid
    a.settimeout(60)
    zygote_report = json.loads(a.recv(1 << 16) or b"{}")   # what the zygote set up for the programs
    a.settimeout(None)
    for key in ("have", "missing"):
        iso[key] += zygote_report.get(key, [])
    # the trainer's protocol: framed marshal messages both ways (4-byte length, then the data)
    reader = os.fdopen(proto_in, "rb")
    writer = os.fdopen(proto_out, "wb")

    def reply(obj):
        writer.write(frame(marshal.dumps(obj)))
        writer.flush()

    def next_job():
        head = reader.read(4)
        if len(head) < 4:
            return None
        return marshal.loads(reader.read(_LENGTH.unpack(head)[0]))

    for _ in range(WARM_UP_FORKS):
        worker.tidy()
        worker.retire(worker.warm)
        worker.warm = None
    reply({"ready": True, "isolation": iso, "pid": os.getpid()})
    worker.tidy()
    while True:
        job = next_job()
        if job is None or job.get("cmd") == "exit":
            break
        run = _Job(worker, job)
        try:
            outcomes = run.run()
            reply({"outcomes": outcomes, "output": run.output.decode("utf-8", "replace"), "cpu_s": run.cpu_spent,
                   "load_error": run.load_error})
        except BaseException as e:  # a bug here must not hang the trainer: report it
            reply({"error": f"{type(e).__name__}: {e}"[:400]})
        worker.tidy()   # raises only when the zygote is gone: the worker exits and the trainer starts a new one
    worker.close_judge()
    worker.judge_host.close()
    worker.sweep()
    os.kill(pid, signal.SIGKILL)


if __name__ == "__main__":
    main()
