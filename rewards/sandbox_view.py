"""What a sandboxed program sees of the host's files (`interpreter_view`): the interpreter, its standard library and
the shared libraries it loads, all read-only, and the scratch directories (`SCRATCH_DIRS`) it gets fresh and empty.
`rewards.sandbox` hands the view to each worker, which copies it into the program's root
(`_sandbox_worker._copy_view`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable

# The worker (stdlib only) runs on the interpreter's real binary, not a venv's link to it: programs then see it as
# their sys.executable, and it is exposed wherever the venv lives (a venv below /tmp would be covered by scratch).
INTERPRETER = os.path.realpath(sys.executable)

# What a program sees of the host's files: an allow-list, found once per process by asking the interpreter itself.
_VIEW_SCRIPT = r"""
import importlib, json, os, sys, sysconfig
paths = sysconfig.get_paths()
stdlib = sorted({paths["stdlib"], paths["platstdlib"]} | {p for p in sys.path if p.endswith(".zip")})
for d in [p for p in sys.path if p.endswith("lib-dynload")]:
    for name in sorted(os.listdir(d)):
        if name.endswith(".so"):
            try:
                importlib.import_module(name.split(".")[0])
            except BaseException:
                pass
mapped = set()
with open("/proc/self/maps") as f:
    for line in f:
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[5].startswith("/"):
            mapped.add(parts[5].strip().removesuffix(" (deleted)"))
print(json.dumps({"stdlib": stdlib, "mapped": sorted(mapped)}))
"""
SCRATCH_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")   # a fresh tmpfs on each, for each program


@dataclass(frozen=True)
class InterpreterView:
    """The host paths a program may see (all read-only): `expose` (the interpreter, its standard library, the
    shared libraries it loads with the names the loader asks for them by, the loader's cache; each worker copies
    them into a tmpfs), `cover` (directories inside those left empty: the site-packages below the standard
    library) and `links` (root-level links such as /lib -> usr/lib)."""

    expose: tuple[str, ...]
    cover: tuple[str, ...]
    links: tuple[tuple[str, str], ...]


def _aliases(paths: Iterable[str]) -> list[str]:
    """The symbolic links beside each of `paths` (files, by their real paths) that resolve to one of them: the
    names the dynamic loader asks for a library by."""
    wanted = set(paths)
    out = []
    for folder in sorted({os.path.dirname(p) for p in wanted}):
        with os.scandir(folder) as entries:
            out += [e.path for e in entries if e.is_symlink() and os.path.realpath(e.path) in wanted]
    return out


@lru_cache(maxsize=None)
def interpreter_view() -> InterpreterView:
    """Return the allow-list of host paths for this interpreter, found by importing every extension module of the
    standard library in a fresh interpreter and reading the files it maps (about half a second, once). Each worker
    copies them into its root (`_sandbox_worker._copy_view`), leaving out what `COPY_SKIP` names."""
    out = subprocess.run([INTERPRETER, "-I", "-c", _VIEW_SCRIPT], capture_output=True, text=True,
                         stdin=subprocess.DEVNULL, timeout=120, check=True)
    found = json.loads(out.stdout.strip().splitlines()[-1])
    stdlib = [os.path.realpath(p) for p in found["stdlib"]   # (a venv's "platstdlib" holds only site-packages)
              if os.path.isfile(os.path.join(p, "os.py")) or os.path.isfile(p)]

    def inside(path: str, dirs: Iterable[str]) -> bool:
        return any(path == d or path.startswith(d.rstrip("/") + "/") for d in dirs)

    expose = list(stdlib)
    for path in found["mapped"]:
        path = os.path.realpath(path)
        if inside(path, stdlib) or not os.path.exists(path):
            continue
        # each mapped file comes alone (the interpreter, libpython, the C libraries, a locale archive), a shared
        # library with the names the loader asks for it by (below: libssl.so.3 -> libssl.so.3.0.2)
        expose.append(path)
    expose += _aliases([p for p in expose if ".so" in os.path.basename(p)])
    # the dynamic loader by the name executables ask for (a program may start the interpreter again)
    loaders = [os.path.join("/lib64", n) for n in (os.listdir("/lib64") if os.path.isdir("/lib64") else ())
               if n.startswith("ld-linux")]
    for path in (INTERPRETER, "/etc/ld.so.cache", *loaders):
        if os.path.exists(path):
            expose.append(os.path.abspath(path))
    # A scratch dir is a fresh tmpfs for each program, which would cover anything bound below it: the interpreter's
    # own files cannot live there (a venv's `bin/python` link there is left out: the real binary is exposed).
    if any(inside(s, SCRATCH_DIRS) for s in stdlib):
        raise RuntimeError(f"the interpreter's standard library is below {', '.join(SCRATCH_DIRS)}, which every "
                           f"sandboxed program gets empty: install Python elsewhere ({', '.join(stdlib)})")
    expose = sorted(p for p in set(expose) if not inside(p, SCRATCH_DIRS))
    expose = [p for p in expose if not inside(p, [q for q in expose if q != p and os.path.isdir(q)])]
    cover = [os.path.join(d, name) for d in stdlib for name in ("site-packages", "dist-packages")
             if os.path.isdir(os.path.join(d, name))]
    links = [(top, os.readlink(top)) for top in ("/bin", "/sbin", "/lib", "/lib32", "/libx32")
             if os.path.islink(top)]
    return InterpreterView(tuple(expose), tuple(cover), tuple(links))
