"""`reward.executor: ray` never hangs (issue 27 section 4): on a local Ray too small for the requested pools (the
defaults, 2 pools x 4 CPUs, on a 2-CPU Ray) the pools are fitted to its CPUs with a log line; on a cluster that
cannot place them the run stops with one `error:` line naming the keys, within the placement timeout."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="the ray extra is part of the dev install (make test)")

from cooprl.config import ConfigError, load_config  # noqa: E402
from rewards import ray_pool  # noqa: E402
from rewards import sandbox as local  # noqa: E402
from rewards.ray_pool import PlacementError, RaySandbox, fit_pools, use_configured_executor  # noqa: E402
from tests.rewards.test_sandbox import ONE  # noqa: E402

pytestmark = pytest.mark.slow   # starts a local Ray

ROOT = Path(__file__).resolve().parents[2]


def test_fit_pools_keeps_what_fits():
    assert fit_pools(2, 4, 2) == (1, 2)     # the defaults on a 2-CPU machine: one pool of 2
    assert fit_pools(2, 4, 8) == (2, 4)     # fits: unchanged
    assert fit_pools(4, 1, 3) == (3, 1)
    assert fit_pools(3, 2, 5) == (2, 2)
    assert fit_pools(1, 16, 1) == (1, 1)
    with pytest.raises(PlacementError, match="no free CPU"):
        fit_pools(2, 4, 0)


@pytest.fixture(scope="module")
def two_cpu_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


@pytest.fixture(autouse=True)
def fresh_default_pool():
    yield
    with local._default_lock:
        pool, local._default = local._default, None
    if pool is not None:
        pool.close()


def _construct(make, limit_s: float = 90.0):
    """Return (what make() returned or raised, seconds); fail when it is still waiting after `limit_s`."""
    out: dict = {}

    def run():
        try:
            out["value"] = make()
        except Exception as e:   # noqa: BLE001 - handed to the test
            out["value"] = e

    start = time.monotonic()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(limit_s)
    assert not thread.is_alive(), f"still waiting for the Ray pools after {limit_s} s"
    return out["value"], time.monotonic() - start


def test_the_default_pools_are_fitted_to_a_small_local_ray(two_cpu_ray, caplog):
    config = load_config(None, ["reward.executor=ray"])
    assert (config.reward.ray_actors, config.reward.ray_workers_per_actor) == (2, 4)   # 8 CPUs asked for
    with caplog.at_level(logging.WARNING, logger="cooprl.sandbox"):
        result, _ = _construct(lambda: use_configured_executor(config.reward))
    assert result is None
    pool = local.default_sandbox()
    assert isinstance(pool, RaySandbox) and (len(pool._actors), pool.workers_per_actor, pool.workers) == (1, 2, 2)
    assert pool.run("def f(x):\n    return x + 1\n", ONE, 5.0, 1, entry_point="f")[0].passed
    line = next(r.getMessage() for r in caplog.records if "local Ray has" in r.getMessage())
    assert "2 pools x 4 workers need 8 CPUs" in line and "using 1 pool(s) x 2 workers" in line
    assert "reward.ray_actors" in line


def test_pools_a_cluster_cannot_place_stop_with_an_error(two_cpu_ray, monkeypatch):
    monkeypatch.setattr(ray_pool, "_local_ray", lambda ray: False)   # as on a cluster: no fitting
    result, seconds = _construct(lambda: RaySandbox(actors=1, workers_per_actor=4, placement_timeout_s=3))
    assert isinstance(result, PlacementError), result
    assert "1 pool(s) of 4 CPUs were not placed within 3 s" in str(result) and "nodes have 2 CPUs" in str(result)
    assert seconds < 30
    # the actors that waited are gone: a pool that fits is placed at once afterwards
    fits, _ = _construct(lambda: RaySandbox(actors=1, workers_per_actor=2, placement_timeout_s=20))
    assert isinstance(fits, RaySandbox) and fits.run("def f(x):\n    return x + 1\n", ONE, 5.0, 1,
                                                     entry_point="f")[0].passed
    fits.close()


def test_the_command_line_names_the_keys_in_one_error_line(two_cpu_ray, monkeypatch, tmp_path, capsys):
    from envs.launch import train_main
    from tests.cli.test_bad_input import assert_one_error, base_config
    monkeypatch.setattr(ray_pool, "_local_ray", lambda ray: False)
    monkeypatch.chdir(ROOT)
    start = time.monotonic()
    code = train_main("magrpo", ["--config", str(base_config(tmp_path)), "--override", "reward.executor=ray",
                                 "reward.ray_placement_timeout_s=2"])
    assert time.monotonic() - start < 60
    line = assert_one_error(code, capsys.readouterr().err, "reward.ray_actors=2", "reward.ray_workers_per_actor=4",
                            "cannot place", "not placed within 2 s")
    assert "reward.ray_placement_timeout_s" in line
    with pytest.raises(ConfigError, match="reward.ray_placement_timeout_s"):
        load_config(None, ["reward.ray_placement_timeout_s=0"])
