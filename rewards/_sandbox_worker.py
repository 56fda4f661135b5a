"""One sandbox worker: started by `rewards.sandbox.Sandbox` as `python -I _sandbox_worker.py CONFIG_JSON`.

Stdlib only, never imported by the trainer. Three kinds of process take part, all below the trainer:

- the *worker* (this process after set-up): enters fresh network and mount namespaces (no interface, not even
  loopback; private tmpfs on every world-writable directory; data files hidden), then judges jobs it reads from
  the trainer. It stays root *inside its namespaces* so that no sandboxed program can signal, ptrace or read it.
  Test code (trusted: it comes from the data set) runs here, with every call of `candidate(...)` replaced by a
  remote call whose result arrives as plain data; the verdict is decided here and nowhere else.
- the *zygote*: forked once at start-up, *before* the worker has seen any job, so its memory never holds a test
  or an expected value. It pre-imports common modules and forks one child per program on request. It reaps
  automatically (SIGCHLD ignored) and is a child subreaper, so a program's orphans are reaped too.
- the *child*: new session, rlimits, fresh temp dir, scrubbed environment, an unprivileged uid of its own slot
  (so RLIMIT_NPROC applies and the trainer/worker/zygote, all root, are out of reach), no new privileges, all
  inherited descriptors closed. It runs the program and answers call requests; each result is encoded as
  plain data (exact builtin types only), which the worker decodes with a strict decoder (JSON plus tags), so
  objects with a custom `__eq__`, patched builtins and faked output earn nothing.

After each job the worker kills the child's process group and then every process of the slot's uid
(`kill(-1, SIGKILL)` with the real uid set to the slot's uid: that reaches exactly the program's processes,
even those that called setsid), until none is left.
"""

import builtins
import ctypes
import json
import marshal
import os
import resource
import select
import shutil
import signal
import socket
import struct
import sys
import time

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
MAX_MSG = 64 << 20          # largest result a program may send back
OUTPUT_CAP = 16 << 10       # bytes of the program's stdout+stderr kept
PREIMPORT = ("typing", "math", "re", "collections", "itertools", "functools", "heapq", "bisect", "string",
             "random", "statistics", "fractions", "decimal", "hashlib", "copy", "operator", "datetime",
             "json", "array", "numbers", "dataclasses", "enum")

_libc = ctypes.CDLL(None, use_errno=True)


def _prctl(option, arg):
    return _libc.prctl(option, ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))


def _mount(source, target, fstype, flags, data):
    enc = lambda s: s.encode() if s is not None else None  # noqa: E731
    if _libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), target)


def _unshare(flags):
    if _libc.unshare(flags) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


# ----------------------------------------------------------------------------------------- framing on raw fds

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


def _send(fd, payload, deadline=None):
    _write_all(fd, struct.pack("<I", len(payload)) + payload, deadline)


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


def _decode(x):
    """JSON tree from an untrusted child -> plain data (run in the worker). Strict: raises ValueError."""
    t = type(x)
    if x is None or t is bool or t is str or t is int or t is float:
        return x
    if t is list:
        return [_decode(v) for v in x]
    if t is dict and len(x) == 1:
        (tag, v), = x.items()
        if tag == "b" and type(v) is str:
            return bytes.fromhex(v)
        if type(v) is list:
            if tag == "t":
                return tuple(_decode(i) for i in v)
            if tag == "d":
                out = {}
                for pair in v:
                    if type(pair) is not list or len(pair) != 2:
                        raise ValueError("malformed dict")
                    out[_decode(pair[0])] = _decode(pair[1])
                return out
            if tag == "s":
                return {_decode(i) for i in v}
            if tag == "f":
                return frozenset(_decode(i) for i in v)
            if tag == "c" and len(v) == 2 and all(type(i) in (int, float) for i in v):
                return complex(v[0], v[1])
    raise ValueError("malformed result")


# ----------------------------------------------------------------------------------------- the child

def _close_fds_except(keep):
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2 and fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def _child(cfg, req, cmd_r, res_w, out_w):
    """Set up the child and serve call requests. Never returns."""
    _exit = os._exit
    try:
        os.setsid()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        null = os.open("/dev/null", os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(out_w, 1)
        os.dup2(out_w, 2)
        _close_fds_except({cmd_r, res_w})
        os.chdir(req["tmpdir"])
        lim = cfg["limits"]
        mem = int(lim["memory_mb"]) << 20
        for res, value in ((resource.RLIMIT_AS, (mem, mem)),
                           (resource.RLIMIT_FSIZE, (int(lim["fsize_mb"]) << 20,) * 2),
                           (resource.RLIMIT_NOFILE, (int(lim["nofile"]),) * 2),
                           (resource.RLIMIT_CORE, (0, 0)), (resource.RLIMIT_MEMLOCK, (0, 0))):
            resource.setrlimit(res, value)
        if cfg["uid"] is not None:
            resource.setrlimit(resource.RLIMIT_NPROC, (int(lim["nproc"]),) * 2)
            os.setgroups([])
            os.setresgid(cfg["gid"], cfg["gid"], cfg["gid"])
            os.setresuid(cfg["uid"], cfg["uid"], cfg["uid"])
        _prctl(PR_SET_NO_NEW_PRIVS, 1)
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)   # after setuid: a credential change clears it
        os.environ.clear()
        os.environ.update({"PATH": "/usr/bin:/bin", "HOME": req["tmpdir"], "TMPDIR": req["tmpdir"],
                           "LANG": "C.UTF-8", "PYTHONHASHSEED": "0"})
    except BaseException:
        _exit(70)

    read, write, loads, dumps, enc = os.read, os.write, marshal.loads, json.dumps, _encode

    def send(obj):
        data = dumps(obj).encode()
        data = struct.pack("<I", len(data)) + data
        while data:
            data = data[write(res_w, data):]

    def recv():
        head = b""
        while len(head) < 4:
            chunk = read(cmd_r, 4 - len(head))
            if not chunk:
                _exit(0)
            head += chunk
        n = struct.unpack("<I", head)[0]
        body = b""
        while len(body) < n:
            chunk = read(cmd_r, min(n - len(body), 1 << 20))
            if not chunk:
                _exit(0)
            body += chunk
        return loads(body)

    def describe(e):
        try:
            return f"{type(e).__name__}: {e}"[:400]
        except BaseException:
            return type(e).__name__

    # a warm child: everything above happened before the job arrived; now wait for the program
    _libc.prctl(15, ctypes.c_char_p(b"sbx-warm"), 0, 0, 0)    # PR_SET_NAME, for observers
    kind, job = recv()
    _libc.prctl(15, ctypes.c_char_p(b"sbx-program"), 0, 0, 0)
    try:
        cpu = max(1, int(job["cpu_s"]))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))   # lowering needs no privilege
    except BaseException:
        _exit(70)
    req = dict(req, **job)
    ns = {"__name__": "__main__", "__builtins__": builtins}
    try:
        exec(compile(req["program"], "<program>", "exec"), ns)
        candidate = ns[req["entry_point"]]
    except BaseException as e:
        try:
            send(["load_error", describe(e)])
        finally:
            _exit(0)
    send(["loaded"])
    test_ns = None
    while True:
        kind, payload = recv()
        try:
            if kind == "call":
                args, kwargs = loads(payload)
                result = candidate(*args, **kwargs)
                send(["ok", enc(result)])
            elif kind == "exec":   # untrusted tests: run here, the verdict is only "did it raise"
                if test_ns is None:
                    test_ns = dict(ns)
                    test_ns[req["param"]] = candidate
                exec(compile(payload, "<test>", "exec"), test_ns)
                send(["ok", True])
        except BaseException as e:
            try:
                send(["err", describe(e)])
            except BaseException:
                _exit(0)


# ----------------------------------------------------------------------------------------- the zygote

def _zygote(sock, cfg):
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)   # children and adopted orphans are reaped by the kernel
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() == 1:
        os._exit(0)
    for name in PREIMPORT:
        try:
            __import__(name)
        except Exception:
            pass
    import gc
    gc.collect()
    gc.freeze()   # the children's collections skip the zygote's objects (fewer copy-on-write page faults)
    while True:
        head = sock.recv(4, socket.MSG_WAITALL)
        if len(head) < 4:
            os._exit(0)
        n = struct.unpack("<I", head)[0]
        req = marshal.loads(sock.recv(n, socket.MSG_WAITALL))
        cmd_r, cmd_w = os.pipe()
        res_r, res_w = os.pipe()
        out_r, out_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                sock.close()
                for x in (cmd_w, res_r, out_r):
                    os.close(x)
                _child(cfg, req, cmd_r, res_w, out_w)
            finally:
                os._exit(71)
        socket.send_fds(sock, [struct.pack("<i", pid)], [cmd_w, res_r, out_r])
        for x in (cmd_r, cmd_w, res_r, res_w, out_r, out_w):
            os.close(x)


# ----------------------------------------------------------------------------------------- the worker

class _Timeout(BaseException):
    """A candidate call ran past the test's deadline (BaseException: test code cannot swallow it)."""


class _Gone(BaseException):
    """The program's process ended or broke the protocol."""


class _Job:
    def __init__(self, worker, job):
        self.w = worker
        self.job = job
        self.child = None            # (pid, cmd_w, res_r, out_r)
        self.load_error = None
        self.deadline = 0.0
        self.flag = None             # "timeout" / "gone" raised during the current unit
        self.output = bytearray()
        self.tmpdir = None

    # -- child management
    def spawn(self):
        w = self.w
        child = w.take_warm()
        pid, cmd_w, res_r, out_r, self.tmpdir = child
        self.child = (pid, cmd_w, res_r, out_r)
        job = {"program": self.job["program"], "entry_point": self.job["entry_point"],
               "param": self.job.get("param", "candidate"), "cpu_s": self.job["cpu_s"]}
        try:
            _send(cmd_w, marshal.dumps(("program", job)), self.deadline)
        except TimeoutError:
            self.flag = "timeout"
            raise _Timeout()
        except OSError:
            self.flag = "gone"
            raise _Gone("the program's process ended before it started")
        first = self.receive()
        if first[0] == "load_error":
            self.load_error = str(first[1])[:400] if len(first) > 1 else "load error"
            self.kill()
            raise _Gone(self.load_error)
        if first[0] != "loaded":
            self.kill()
            raise _Gone("protocol error")

    def kill(self, wait=True):
        """Kill the program's processes. `wait=False` (end of a job) only sends the signals: the worker then
        replies, and waits for them to be gone (and removes the temp dir) before it takes the next job."""
        if self.child is None:
            return
        pid, cmd_w, res_r, out_r = self.child
        self.child = None
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
        self.drain(out_r)
        for fd in (cmd_w, res_r, out_r):
            os.close(fd)
        self.w.sweep(wait=wait)
        if self.tmpdir:
            self.w.trash.append(self.tmpdir)
            self.tmpdir = None
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
        """Read one framed JSON message from the child before the deadline, draining its output meanwhile."""
        pid, cmd_w, res_r, out_r = self.child
        buf = bytearray()
        need = 4
        size = None
        while True:
            left = self.deadline - time.monotonic()
            if left <= 0:
                self.flag = "timeout"
                raise _Timeout()
            ready = select.select([res_r, out_r], [], [], left)[0]
            if out_r in ready:
                self.drain(out_r)
            if res_r in ready:
                try:
                    chunk = os.read(res_r, min(need - len(buf), 1 << 20))
                except BlockingIOError:
                    continue
                if not chunk:
                    self.flag = "gone"
                    raise _Gone("the program's process ended (exit, signal or a resource limit)")
                buf += chunk
                if len(buf) == need:
                    if size is None:
                        size = struct.unpack("<I", bytes(buf))[0]
                        if size > MAX_MSG:
                            self.flag = "gone"
                            raise _Gone("result too large")
                        buf, need = bytearray(), size
                        if size == 0:
                            break
                    else:
                        break
        try:
            msg = json.loads(bytes(buf))
            if type(msg) is not list or not msg or type(msg[0]) is not str:
                raise ValueError
            return msg
        except (ValueError, RecursionError):
            self.flag = "gone"
            raise _Gone("malformed message from the program")

    def request(self, kind, payload):
        if self.load_error is not None:
            raise _Gone(self.load_error)
        if self.child is None:
            self.spawn()
        data = marshal.dumps((kind, payload))
        try:
            _send(self.child[1], data, self.deadline)
        except TimeoutError:
            self.flag = "timeout"
            raise _Timeout()
        except OSError:
            self.flag = "gone"
            raise _Gone("the program's process ended (exit, signal or a resource limit)")
        msg = self.receive()
        if msg[0] == "ok" and len(msg) == 2:
            return msg[1]
        if msg[0] == "err" and len(msg) == 2:
            raise _ProgramError(str(msg[1])[:400])
        self.flag = "gone"
        raise _Gone("protocol error")

    # -- the candidate as seen by the trusted test code
    def candidate(self, *args, **kwargs):
        try:
            payload = marshal.dumps((args, kwargs))
        except ValueError:
            raise TypeError("the test passes arguments that are not plain data") from None
        tree = self.request("call", payload)
        try:
            return _decode(tree)
        except (ValueError, TypeError, RecursionError) as e:
            raise _ProgramError(f"result is not plain data ({e})") from None

    # -- running the suite
    def run(self):
        job = self.job
        timeout_s = float(job["timeout_s"])
        max_timeouts = int(job["max_timeouts"])
        trusted = job.get("trusted", True)
        env = {"__name__": "__check__", "__builtins__": builtins}
        for src in job["context"]:
            try:
                exec(self.w.compiled(src), env)
            except BaseException:
                pass
        env[job.get("param", "candidate")] = self.candidate
        env[job["entry_point"]] = self.candidate   # tests may call the solution by name (HumanEval/33)
        outcomes = []
        timeouts = 0
        try:
            for kind, src, text in job["units"]:
                if kind == "test" and timeouts >= max_timeouts:
                    outcomes.append([text, False, f"skipped after {timeouts} timeouts", False])
                    continue
                self.flag = None
                self.deadline = time.monotonic() + timeout_s
                error = ""
                try:
                    if trusted:
                        exec(self.w.compiled(src), env)
                    else:
                        self.request("exec", src)
                except _Timeout:
                    pass
                except _Gone as e:
                    error = str(e)
                except _ProgramError as e:
                    error = str(e)
                except AssertionError as e:
                    error = "AssertionError" + (f": {e}" if str(e) else "")
                except BaseException as e:
                    error = f"{type(e).__name__}: {e}"[:400]
                if self.flag == "timeout":
                    timeouts += 1
                    self.kill()
                    if kind == "test":
                        outcomes.append([text, False, f"timed out after {timeout_s:g} s", True])
                    continue
                if self.flag == "gone":
                    self.kill()
                    error = error or "the program's process ended"
                if kind == "test":
                    outcomes.append([text, not error, error, False])
        finally:
            self.kill(wait=False)
        return outcomes


class _ProgramError(Exception):
    """The candidate raised (or returned something that is not plain data)."""


class _Worker:
    def __init__(self, cfg):
        self.cfg = cfg
        self.seq = 0
        self.cache = {}
        self.zsock = None
        self.zygote_pid = None
        self.warm = None
        self.trash = []

    def take_warm(self):
        child, self.warm = self.warm, None
        return child or self.fork_child()

    def fork_child(self):
        """Ask the zygote for a fresh, fully set-up child waiting for its program."""
        self.seq += 1
        tmpdir = f"/tmp/sbx-{self.cfg['slot']}-{self.seq}"
        os.mkdir(tmpdir, 0o700)
        if self.cfg["uid"] is not None:
            os.chown(tmpdir, self.cfg["uid"], self.cfg["gid"])
        data = marshal.dumps({"tmpdir": tmpdir})
        self.zsock.sendall(struct.pack("<I", len(data)) + data)
        msg, fds, _, _ = socket.recv_fds(self.zsock, 16, 3)
        pid = struct.unpack("<i", msg)[0]
        for fd in fds:
            os.set_blocking(fd, False)
        return (pid, fds[0], fds[1], fds[2], tmpdir)

    def tidy(self):
        """Between jobs: wait until the last program's processes are gone, remove its temp dirs, and pre-fork
        the next child so that the next job does not wait for fork and set-up."""
        self.sweep(wait=True)
        for d in self.trash:
            shutil.rmtree(d, ignore_errors=True)
        self.trash.clear()
        if self.warm is None:
            self.warm = self.fork_child()

    def compiled(self, src):
        code = self.cache.get(src)
        if code is None:
            if len(self.cache) > 512:
                self.cache.clear()
            code = self.cache[src] = compile(src, "<test>", "exec")
        return code

    def children(self):
        try:
            with open(f"/proc/{self.zygote_pid}/task/{self.zygote_pid}/children") as f:
                return [int(x) for x in f.read().split()]
        except (OSError, ValueError):
            return []

    def sweep(self, wait=True):
        """Kill every process the program left (all are below the zygote, a subreaper), until none is left.

        With a slot uid: `kill(-1, SIGKILL)` with our real uid set to the slot's uid reaches exactly the
        program's processes, also those that changed session or raced a fork. Without one: kill the zygote's
        children by pid. The zygote's child list tells when nothing is left (kill(-1) alone cannot: it may
        report success with nothing to kill).
        """
        uid = self.cfg["uid"]
        warm = self.warm[0] if self.warm else None
        for attempt in range(4000):
            left = [p for p in self.children() if p != warm]
            if not left:
                return
            if uid is not None:
                if self.warm is not None:   # kill(-1) reaches the warm child too: let it go
                    for fd in self.warm[1:4]:
                        os.close(fd)
                    self.trash.append(self.warm[4])
                    self.warm = warm = None
                os.setresuid(uid, uid, 0)
                try:
                    os.kill(-1, signal.SIGKILL)
                except OSError:
                    pass
                finally:
                    os.setresuid(0, 0, 0)
            else:
                for pid in left:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
            if not wait:
                return
            time.sleep(0.0002 if attempt < 50 else 0.002)


def _expose_interpreter():
    """The programs run as an unprivileged uid: when the interpreter's files sit below a directory others cannot
    enter (e.g. pyenv under /root, mode 700), cover that directory with a tmpfs and bind only the interpreter's
    directories back (which also hides the rest of it, e.g. tokens under /root)."""
    needed = []
    for p in [sys.base_prefix, sys.prefix, sys.exec_prefix] + list(sys.path):
        if p and os.path.isdir(p):
            needed.append(os.path.realpath(p))
    needed = [p for p in dict.fromkeys(needed)
              if not any(p != q and p.startswith(q.rstrip("/") + "/") for q in needed)]
    blocked = {}
    for p in needed:
        parts = p.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            anc = "/" + "/".join(parts[:i])
            if not os.stat(anc).st_mode & 0o001:
                blocked.setdefault(anc, []).append(p)
                break
    covered = []
    for anc, paths in blocked.items():
        fds = [(p, os.open(p, os.O_PATH)) for p in paths]
        _mount("tmpfs", anc, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=755")
        for p, fd in fds:
            os.makedirs(p, mode=0o755, exist_ok=True)
            _mount(f"/proc/self/fd/{fd}", p, None, MS_BIND | MS_REC, None)
            os.close(fd)
        covered.append(anc)
    return covered


def _isolate(cfg):
    """Enter the namespaces, mount the private tmpfs dirs and hide paths; return the isolation report."""
    have, missing = [], []
    root = os.geteuid() == 0
    try:
        if root:
            _unshare(CLONE_NEWNET | CLONE_NEWNS)
        else:
            uid, gid = os.getuid(), os.getgid()
            _unshare(CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWNS)
            with open("/proc/self/setgroups", "w") as f:
                f.write("deny")
            with open("/proc/self/uid_map", "w") as f:
                f.write(f"0 {uid} 1")
            with open("/proc/self/gid_map", "w") as f:
                f.write(f"0 {gid} 1")
            have.append("user-ns")
        have.append("net-ns (no interfaces, no loopback)")
        netns = True
    except OSError as e:
        missing.append(f"namespaces ({e.strerror}): network reachable")
        netns = False
    if netns:
        try:
            _mount(None, "/", None, MS_REC | MS_PRIVATE, None)
            done = []
            for d in cfg["private_dirs"]:
                if os.path.isdir(d):
                    _mount("tmpfs", d, "tmpfs", MS_NOSUID | MS_NODEV, f"size={cfg['tmpfs_mb']}m,mode=1777")
                    done.append(d)
            have.append("private tmpfs " + ",".join(done))
            covered = _expose_interpreter()
            if covered:
                have.append("tmpfs over " + ",".join(covered) + " (only the interpreter's files re-exposed)")
            hidden = []
            for d in cfg["hide"]:
                if os.path.isdir(d):
                    try:
                        _mount("tmpfs", d, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4k,mode=755")
                        hidden.append(d)
                    except OSError as e:
                        missing.append(f"hide {d} ({e.strerror})")
            if hidden:
                have.append("hidden " + ",".join(hidden))
            # every other file system read-only (in this namespace only): a world-writable file or directory
            # elsewhere cannot be touched either
            ro, failed = [], []
            with open("/proc/self/mounts") as f:
                points = [line.split()[1].replace("\\040", " ") for line in f]
            skip = set(done) | set(hidden)
            for mp in dict.fromkeys(points):
                if mp in skip or mp.split("/")[1] in ("proc", "dev", "sys"):
                    continue
                try:
                    _mount(None, mp, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, None)
                    ro.append(mp)
                except OSError:
                    failed.append(mp)
            if ro:
                have.append("read-only " + ",".join(ro))
            if failed:
                missing.append("read-only remount of " + ",".join(failed))
        except OSError as e:
            missing.append(f"mount-ns tmpfs ({e.strerror}): writes to /tmp are shared")
    if root and cfg["uid"] is not None:
        have.append(f"uid {cfg['uid']}")
    else:
        cfg["uid"] = cfg["gid"] = None
        missing.append("separate uid (not root): programs share the worker's uid, RLIMIT_NPROC is per user")
    if not os.path.isdir("/tmp"):
        os.makedirs("/tmp", exist_ok=True)
    return {"have": have, "missing": missing}


def main():
    cfg = json.loads(sys.argv[1])
    # No PR_SET_PDEATHSIG here: it follows the trainer *thread* that started us, not the process. The worker
    # ends when its stdin closes (the trainer exited or closed the pool); the zygote follows the worker.
    # the protocol uses private copies of fds 0 and 1; stray prints of test code go to /dev/null
    proto_in, proto_out = os.dup(0), os.dup(1)
    null = os.open("/dev/null", os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    iso = _isolate(cfg)
    worker = _Worker(cfg)
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
    worker.zsock = a
    worker.zygote_pid = pid
    reader = os.fdopen(proto_in, "rb")
    writer = os.fdopen(proto_out, "wb")

    def reply(obj):
        writer.write(json.dumps(obj).encode() + b"\n")
        writer.flush()

    reply({"ready": True, "isolation": iso, "pid": os.getpid()})
    worker.tidy()
    while True:
        line = reader.readline()
        if not line:
            break
        job = json.loads(line)
        if job.get("cmd") == "exit":
            break
        run = _Job(worker, job)
        try:
            outcomes = run.run()
            reply({"outcomes": outcomes, "output": run.output.decode("utf-8", "replace"),
                   "load_error": run.load_error})
        except BaseException as e:  # a bug here must not hang the trainer: report it
            reply({"error": f"{type(e).__name__}: {e}"[:400]})
        worker.tidy()
    worker.sweep()
    os.kill(pid, signal.SIGKILL)


if __name__ == "__main__":
    main()
