"""The sandbox's hostile suites as an unprivileged user, the usual case on GPU clusters.

Without root the workers cannot give each slot its own uid; they enter a user namespace instead (one uid, every
capability dropped in the programs) and the same isolation table holds otherwise (no /proc for the programs where
the host's /proc is partly masked, as in containers). When the suite already runs unprivileged, its own sandbox
tests cover this; as root, this test reruns `test_sandbox.py`, `test_sandbox_leaks.py`
and `test_sandbox_isolation.py` as `nobody`
(setpriv), with the interpreter reached through a bind mount in a private mount namespace when it sits below a
directory nobody may enter (e.g. pyenv under /root)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow   # end to end (trainers, command lines, subprocesses): not in `make test-fast`

REPO = Path(__file__).resolve().parents[2]
NOBODY = 65534


@pytest.mark.skipif(os.geteuid() != 0, reason="already unprivileged: test_sandbox*.py run as this user")
def test_hostile_suites_pass_as_an_unprivileged_user():
    for tool in ("unshare", "setpriv", "mount"):
        assert shutil.which(tool), f"{tool} (util-linux) is needed to drop to an unprivileged user"
    base = os.path.realpath(sys.base_prefix)
    python = os.path.basename(os.path.realpath(sys.executable))
    site = os.path.realpath(sysconfig.get_paths()["purelib"])   # this venv's packages (torch, pytest, ...)
    # the interpreter and the checkout are reached through bind mounts, in case they sit below a directory nobody
    # may enter (pyenv under /root, a clone in /root); not below /tmp: programs get a fresh /tmp
    parent = "/mnt" if os.path.isdir("/mnt") else "/"
    py_mount = tempfile.mkdtemp(prefix="cooprl-py-", dir=parent)
    repo_mount = tempfile.mkdtemp(prefix="cooprl-repo-", dir=parent)
    home = tempfile.mkdtemp(prefix="cooprl-nobody-", dir="/tmp")
    for path, mode in ((py_mount, 0o755), (repo_mount, 0o755), (home, 0o777)):
        os.chmod(path, mode)
    repo = str(REPO.resolve())
    for real, mounted in ((repo, repo_mount), (base, py_mount)):
        if site == real or site.startswith(real + "/"):
            site = mounted + site[len(real):]
            break
    script = (f"set -e\nmount --bind {base} {py_mount}\nmount --bind {repo} {repo_mount}\ncd {repo_mount}\n"
              f"exec setpriv --reuid={NOBODY} --regid={NOBODY} --clear-groups env -i HOME={home} "
              f"PATH=/usr/bin:/bin PYTHONPATH={site}:{repo_mount} {py_mount}/bin/{python} -m pytest "
              "-p no:cacheprovider -o addopts= -q tests/rewards/test_sandbox.py tests/rewards/test_sandbox_leaks.py "
              "tests/rewards/test_sandbox_isolation.py tests/rewards/test_sandbox_lifetime.py\n")
    mode = os.stat(repo).st_mode
    os.chmod(repo, mode | 0o005)   # a checkout made by mktemp is 700: let nobody in for the run, then restore
    try:
        out = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                             capture_output=True, text=True, timeout=600)
    finally:
        os.chmod(repo, mode)
        shutil.rmtree(home, ignore_errors=True)
        os.rmdir(py_mount)
        os.rmdir(repo_mount)
    tail = (out.stdout + out.stderr)[-3000:]
    assert out.returncode == 0, tail
    assert " passed" in out.stdout and "failed" not in out.stdout, tail
