"""rewards.sandbox_cgroup: finding the cgroup hierarchies from /proc, and a v2 cgroup per slot below ours or beside
it (no root needed: the files are faked in a temporary folder)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def test_cgroup_hierarchies_are_read_from_proc():
    from rewards.sandbox_cgroup import hierarchies
    v2 = hierarchies("0::/user.slice/job-7\n",
                     "30 1 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n")
    assert v2 == {"v2": "/sys/fs/cgroup/user.slice/job-7"}
    # v1 as on this kind of host: per-controller mounts; a container's mount root is cut off its own path
    v1 = hierarchies("4:memory:/process_api/abc\n8:pids:/\n0::/\n",
                     "35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
                     "39 31 0:36 /ctr /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n"
                     "41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n")
    assert v1["memory"] == "/sys/fs/cgroup/memory/process_api/abc" and v1["v2"] == "/sys/fs/cgroup/unified"
    assert "pids" not in v1   # our pids cgroup "/" lies outside the mounted "/ctr": not reachable


def test_v2_cgroups_below_our_own_or_beside_it(tmp_path):
    from rewards.sandbox_cgroup import v2_cgroups
    own = tmp_path / "job"
    own.mkdir()
    (own / "cgroup.controllers").write_text("cpu memory pids\n")
    made = v2_cgroups(str(own), "cooprl-sandbox-b1", 2, 128, 65)
    assert made.base == [str(own / "cooprl-sandbox-b1")]
    for slot in (0, 1):
        d = own / "cooprl-sandbox-b1" / f"slot-{slot}"
        assert (d / "memory.max").read_text() == str(128 << 20) and (d / "pids.max").read_text() == "65"
    assert "+memory +pids" in (own / "cooprl-sandbox-b1" / "cgroup.subtree_control").read_text()
    # our own cgroup holds processes (its subtree_control refuses controllers): the sandbox's goes beside it
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "cgroup.controllers").write_text("memory pids\n")
    (busy / "cgroup.subtree_control").mkdir()   # any write fails, as with EBUSY
    made = v2_cgroups(str(busy), "cooprl-sandbox-b2", 1, 64, 9)
    assert made.base == [str(tmp_path / "cooprl-sandbox-b2")]
    assert (tmp_path / "cooprl-sandbox-b2" / "slot-0" / "pids.max").read_text() == "9"
    (tmp_path / "none").mkdir()
    (tmp_path / "none" / "cgroup.controllers").write_text("cpu io\n")
    with pytest.raises(OSError, match="lacks the memory and pids"):
        v2_cgroups(str(tmp_path / "none"), "x", 1, 64, 9)
