"""Per-slot cgroups for the sandbox: memory and processes bounded per program as a whole.

RLIMIT_AS bounds one process's address space; a program that forks, or keeps data in memfds or tmpfs files
(pages no address space holds), is not bounded as a whole by it (3 forks of 90 MiB and 6 memfds held 422 MiB
under `memory_mb=128`). A cgroup is: every page a program's processes charge (their memory, what they write
to tmpfs, memfds and pipes, their page tables) counts against one `memory.max`, and every process and thread
against one `pids.max`. The trainer (root) makes one cgroup per worker slot below its own (cgroup v2 where
the memory and pids controllers are there, else the v1 hierarchies of those controllers) and hands the worker
the cgroup's `cgroup.procs`, opened; the zygote enters it at the end of its set-up, so that every program,
born from it, is inside (`_sandbox_worker._join_cgroup`). Where there is no cgroup to use (not root; a v2
cgroup that holds processes and whose parent we may not write), the fallback bounds memory per process
(RLIMIT_AS) times processes (RLIMIT_NPROC) and refuses memfds (`_sandbox_worker.FALLBACK_RULES`); the
start-up line says which is in force.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

CONTROLLERS = ("memory", "pids")


@dataclass
class SlotCgroups:
    """The cgroups of one sandbox: `kind` (for the start-up line), `base` (the sandbox's own directories, one per
    hierarchy) and `slots` (per slot, its directories: one under v2, memory's and pids' under v1)."""

    kind: str
    base: list[str]
    slots: list[list[str]]

    def open_procs(self, slot: int) -> list[int]:
        """Return the slot's `cgroup.procs` files opened for writing (the zygote writes "0" to each to enter)."""
        return [os.open(os.path.join(d, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC) for d in self.slots[slot]]

    def remove(self, wait_s: float = 2.0) -> None:
        """Remove the slots' and the sandbox's cgroups (after the workers are gone; their last processes may take a
        moment to leave)."""
        deadline = time.monotonic() + wait_s
        for path in [d for dirs in self.slots for d in dirs] + self.base:
            while True:
                try:
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.02)


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def hierarchies(cgroup: str, mountinfo: str) -> dict[str, str]:
    """This process's cgroup directories: {"v2": dir} and/or {"memory": dir, "pids": dir, ...} (v1), from the
    text of /proc/self/cgroup and /proc/self/mountinfo."""
    own = {}
    for line in cgroup.splitlines():
        number, controllers, path = line.split(":", 2)
        for name in (["v2"] if number == "0" else controllers.split(",")):
            own[name] = path
    found = {}
    for line in mountinfo.splitlines():
        fields = line.split()
        sep = fields.index("-")
        root, mountpoint, fstype, options = fields[3], fields[4], fields[sep + 1], fields[sep + 3]
        names = ["v2"] if fstype == "cgroup2" else options.split(",") if fstype == "cgroup" else []
        for name in names:
            path = own.get(name)
            if name in found or path is None or not (path == root or path.startswith(root.rstrip("/") + "/")):
                continue
            found[name] = (mountpoint + path[len(root.rstrip("/")):]).rstrip("/") or "/"
    return found


def v2_cgroups(own: str, name: str, workers: int, memory_mb: int, pids: int) -> SlotCgroups:
    with open(os.path.join(own, "cgroup.controllers")) as f:
        if not set(CONTROLLERS) <= set(f.read().split()):
            raise OSError(0, f"cgroup v2 {own} lacks the memory and pids controllers")
    enable = " ".join(f"+{c}" for c in CONTROLLERS)
    error = None
    # below our own cgroup when it may have children with controllers (the root cgroup, or one without
    # processes), else beside it (its parent has the controllers on for its children already)
    for parent in (own, os.path.dirname(own)):
        try:
            _write(os.path.join(parent, "cgroup.subtree_control"), enable)
            base = os.path.join(parent, name)
            os.makedirs(base, exist_ok=True)
            _write(os.path.join(base, "cgroup.subtree_control"), enable)
            break
        except OSError as e:
            error = e
    else:
        raise OSError(error.errno, f"cgroup v2: cannot enable memory and pids below {own} ({error.strerror})")
    slots = []
    for i in range(workers):
        d = os.path.join(base, f"slot-{i}")
        os.makedirs(d, exist_ok=True)
        _write(os.path.join(d, "memory.max"), str(memory_mb << 20))
        _write(os.path.join(d, "pids.max"), str(pids))
        # no swap where the kernel has it; not memory.oom.group: it would kill the zygote too, unless its OOM
        # score is -1000, which a container without CAP_SYS_RESOURCE cannot set
        if os.path.exists(os.path.join(d, "memory.swap.max")):
            _write(os.path.join(d, "memory.swap.max"), "0")
        slots.append([d])
    return SlotCgroups(f"cgroup v2 {base}/slot-N (memory.max {memory_mb} MiB, no swap, pids.max {pids})",
                       [base], slots)


def v1_cgroups(dirs: dict[str, str], name: str, workers: int, memory_mb: int, pids: int) -> SlotCgroups:
    if not all(c in dirs for c in CONTROLLERS):
        raise OSError(0, "no cgroup v1 hierarchy of memory and pids")
    base = {c: os.path.join(dirs[c], name) for c in CONTROLLERS}
    slots = []
    for i in range(workers):
        mem, pid = (os.path.join(base[c], f"slot-{i}") for c in CONTROLLERS)
        for d in (mem, pid):
            os.makedirs(d, exist_ok=True)
        _write(os.path.join(mem, "memory.limit_in_bytes"), str(memory_mb << 20))
        try:   # memory and swap together, where swap is accounted
            _write(os.path.join(mem, "memory.memsw.limit_in_bytes"), str(memory_mb << 20))
        except OSError:
            pass
        _write(os.path.join(pid, "pids.max"), str(pids))
        slots.append([mem, pid])
    return SlotCgroups(f"cgroup v1 {base['memory']}/slot-N (memory.limit_in_bytes {memory_mb} MiB, "
                       f"pids.max {pids})", list(base.values()), slots)


def make_slot_cgroups(name: str, workers: int, memory_mb: int, pids: int) -> tuple[SlotCgroups | None, str]:
    """Make (or reuse: `name` is this sandbox's own, e.g. by its uid block) one cgroup per slot bounding memory
    to `memory_mb` MiB and tasks to `pids`. Returns (the cgroups, "") or (None, why there are none)."""
    if os.geteuid() != 0:
        return None, "not root"
    try:
        with open("/proc/self/cgroup") as f, open("/proc/self/mountinfo") as g:
            found = hierarchies(f.read(), g.read())
    except (OSError, ValueError) as e:
        return None, f"cannot read this process's cgroups ({e})"
    reasons = []
    if "v2" in found:
        try:
            return v2_cgroups(found["v2"], name, workers, memory_mb, pids), ""
        except OSError as e:
            reasons.append(e.strerror or str(e))
    try:
        return v1_cgroups(found, name, workers, memory_mb, pids), ""
    except OSError as e:
        reasons.append(e.strerror or str(e))
    return None, "; ".join(reasons)
