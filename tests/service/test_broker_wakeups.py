"""The dispatcher is event-driven: with every fallback tick at 60 s, a submission, a release
and a pod becoming ready each start the waiting job at once. A broken wake-up would leave the
job queued until the next tick, 60 s later, far past these tests' bounds."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from firepool.service.broker import BrokerConfig
from firepool.service.catalog import Catalog
from firepool.testing.control import cpu_pool
from firepool.testing.service import BrokerThread, running_broker, submit, wait_job

SLOW_TICKS = BrokerConfig(dispatch_tick_s=60.0, reconcile_s=60.0, hold_tick_s=60.0,
                          exit_poll_s=60.0)
#: Far below the 60 s ticks, far above a loaded machine's real latency.
BOUND_S = 10.0


def pools() -> Catalog:
    base: dict[str, Any] = {"idle_timeout": 120.0, "memory_mib_per_pod": 512, "step": 1}
    return Catalog(
        (
            cpu_pool("warm", min_count=1, max_idle_count=1, max_count=1, **base),
            cpu_pool("cold", min_count=0, max_count=1, **base),
        ),
        {"cpu": 4},
    )


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerThread]:
    with running_broker(tmp_path / "b", catalog=pools(), config=SLOW_TICKS) as handle:
        yield handle


def wait_for_idle_pod(broker: BrokerThread, pool: str) -> None:
    tracker = broker.embedded.broker.tracker
    import time

    deadline = time.monotonic() + 60
    while not broker.call(lambda: any(p.state.value == "idle" for p in tracker.pool_pods(pool))):
        assert time.monotonic() < deadline, f"no idle pod in {pool}"
        time.sleep(0.05)


def waited(job: dict[str, Any]) -> float:
    t = job["timings"]
    return float(t["assigned"] - t["submitted"])


def test_a_submission_wakes_the_dispatcher(broker: BrokerThread) -> None:
    wait_for_idle_pod(broker, "warm")
    with broker.client() as c:
        job = wait_job(c, submit(c, pool="warm", command=[sys.executable, "-c", "pass"]),
                       timeout=BOUND_S * 3)
    assert job["state"] == "SUCCEEDED"
    assert waited(job) < BOUND_S


def test_a_release_and_a_ready_pod_wake_the_dispatcher(broker: BrokerThread) -> None:
    wait_for_idle_pod(broker, "warm")
    with broker.client() as c:
        # The exit event (pushed by the agent; the exit poll is 60 s) ends the first job, and
        # its release starts the second on the same pod.
        first = submit(c, pool="warm", lease_tag="s",
                       command=[sys.executable, "-c", "import time; time.sleep(1)"])
        second = submit(c, pool="warm", lease_tag="s", command=[sys.executable, "-c", "pass"])
        done = wait_job(c, second, timeout=BOUND_S * 3)
        assert wait_job(c, first)["state"] == done["state"] == "SUCCEEDED"
        assert done["pods"][0]["name"] == wait_job(c, first)["pods"][0]["name"]
        assert waited(done) < BOUND_S + 1.0
        # No pod at all: the dispatch pass asks the scaler at once, and readiness dispatches.
        cold = wait_job(c, submit(c, pool="cold", command=[sys.executable, "-c", "pass"]),
                        timeout=BOUND_S * 6)
        assert cold["state"] == "SUCCEEDED" and cold["pods"][0]["acquisition"] == "new"
        assert waited(cold) < BOUND_S * 3
