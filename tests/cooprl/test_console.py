"""What a command line prints and how many threads it takes (cooprl/console.py), the sandbox's short start-up line:
unit tests, no run (the summary's verdict: trainers/test_loop.py; the plot: test_plot.py)."""

import argparse
import logging

import pytest

from cooprl import console


# ------------------------------------------------------------------------------------------------ torch threads
@pytest.mark.parametrize("cpus, threads", [(1, 1), (2, 1), (3, 1), (4, 2), (8, 4), (64, 4)])
def test_default_threads_are_half_the_cpus_at_most_four(cpus, threads):
    assert console.default_torch_threads(cpus) == threads


def test_the_threads_option_wins_then_the_environment_then_the_default():
    assert console.choose_torch_threads(3, {"OMP_NUM_THREADS": "2"}, cpus=16) == console.Threads(3, "--torch-threads")
    chosen = console.choose_torch_threads(None, {"OMP_NUM_THREADS": "2"}, cpus=16)
    assert chosen.count == 2 and chosen.source.startswith("OMP_NUM_THREADS=2")
    for unusable in ({}, {"OMP_NUM_THREADS": "0"}, {"OMP_NUM_THREADS": "lots"}, {"OMP_NUM_THREADS": ""}):
        chosen = console.choose_torch_threads(None, unusable, cpus=16)
        assert chosen.count == 4 and chosen.source.startswith("default: half of 16 CPU(s), at most 4"), unusable
    assert console.choose_torch_threads(None, {}, cpus=16).describe().startswith("torch threads: 4 (default")


@pytest.mark.parametrize("bad", ["0", "-1", "two", "1.5", ""])
def test_a_thread_count_that_is_no_whole_number_is_refused(bad):
    with pytest.raises(argparse.ArgumentTypeError, match="whole number of threads"):
        console.positive_int(bad)


# ------------------------------------------------------------------------------------------------ the run's log file
def test_the_run_log_keeps_records_until_the_run_folder_opens(tmp_path):
    handler = console.RunLog()
    logger = logging.getLogger("cooprl.test_console_runlog")
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    try:
        logger.debug("before the run folder: %d", 1)
        handler.open(tmp_path / "train.log")
        logger.info("after it")
        handler.close_file()
    finally:
        logger.removeHandler(handler)
    lines = (tmp_path / "train.log").read_text().splitlines()
    assert [line.split(": ", 1)[1] for line in lines] == ["before the run folder: 1", "after it"]
    assert "DEBUG cooprl.test_console_runlog" in lines[0]


# ------------------------------------------------------------------------------------------------ the sandbox's line
def test_the_sandbox_start_up_line_is_short_and_keeps_the_bound_and_what_is_missing():
    from rewards.sandbox import _short_isolation
    report = {"have": ["net-ns (no interfaces, no loopback)", "private root: read-only 6 paths (interpreter, ...)",
                       "scratch /tmp,/var/tmp (tmpfs 64 MiB each)", "seccomp: no keyring syscalls",
                       "memory and processes per program as a whole: cgroup v2 /sys/fs/cgroup/x/slot-N (memory.max)"],
              "missing": ["pid-ns"]}
    line = _short_isolation(report)
    assert line == ("isolation: net-ns, private root, scratch, seccomp; memory and processes per program as a whole: "
                    "cgroup v2; missing: pid-ns")
    assert _short_isolation({"have": [], "missing": []}).endswith("rlimits per process; missing: nothing")
