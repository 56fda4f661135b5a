"""Test set-up shared by every test file: the code task's config sections, and the cost lanes.

Every test lands in exactly one lane, by what it costs (`make test-fast` runs `unit` only; `make test` every lane):
- `distributed`: several processes (torch.multiprocessing.spawn or torchrun); marked in the test files;
- `cli`: the command line run as a subprocess (DISTRIBUTED and CLI files below, or marked);
- `sandbox`: untrusted programs run in the sandbox's namespaces and forks (the SANDBOX files below);
- `integration`: trainers run in-process on tiny models (what the older `slow` marker marks);
- `unit`: everything else (no trainer run, no subprocess): seconds.
A test marked with a lane keeps it; otherwise its file's lane (the tables below), else `slow` means integration,
else unit.
"""

import os
from pathlib import Path

import pytest

# One torch thread per test process and per command line it starts (unless the caller chose): `make test` runs one
# pytest worker per core, and a second thread per process only contends with the other worker (a 2-step CLI run
# took 54 s of CPU with two threads, 10 s with one). Set before torch is first imported, below.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# The code task's config sections (dataset, external) are registered when its environment is imported, as the
# train_*.py scripts do; tests that load configs directly through cooprl.config need them too.
import envs.code_generation  # noqa: E402, F401

LANES = ("unit", "integration", "distributed", "sandbox", "cli")
BY_COST = ("unit", "sandbox", "integration", "cli", "distributed")   # what a test of each lane costs, least first
CLI_FILES = {"test_cli_smoke.py", "test_evaluate_cli.py", "test_resume_cli.py"}
SANDBOX_FILES = {"test_sandbox.py", "test_sandbox_leaks.py", "test_sandbox_isolation.py", "test_sandbox_nonroot.py",
                 "test_reward_leaks.py", "test_ray_pool.py", "test_sandbox_lifetime.py"}


def lane_of(item: pytest.Item) -> str:
    """Return the cost lane of a collected test (see the module docstring)."""
    marked = [lane for lane in LANES if item.get_closest_marker(lane) is not None]
    if marked:
        return marked[0]
    name = Path(str(item.fspath)).name
    if name in CLI_FILES:
        return "cli"
    if name in SANDBOX_FILES:
        return "sandbox"
    return "integration" if item.get_closest_marker("slow") is not None else "unit"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    costliest = {}   # file -> the costliest lane of its tests, as an index into BY_COST
    for item in items:
        lane = lane_of(item)
        if item.get_closest_marker(lane) is None:
            item.add_marker(lane)
        if lane != "unit" and item.get_closest_marker("slow") is None:
            item.add_marker("slow")   # `-m "not slow"` keeps meaning "unit only"
        costliest[item.path] = max(costliest.get(item.path, 0), BY_COST.index(lane))
    # `make test` hands whole files to its workers (pytest-xdist's loadfile) in this order (--no-loadscope-reorder;
    # xdist's default orders them by their number of tests, which leaves the costliest files, a few slow tests
    # each, to the end, where one worker runs them while the other idles): files with the costliest lane first,
    # so that the run ends on unit files that fill in. A stable sort: each file's tests keep their order.
    items.sort(key=lambda item: -costliest[item.path])
