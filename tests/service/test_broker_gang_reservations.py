"""Gang reservations in the real broker, on real local pods: a two-pod gang that finds the
pool full reserves it, so a one-pod job submitted after it does not take the pod that frees
up first; the gang runs once the second frees, and the small job after it."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from firepool.control.reservations import ReservationRules
from firepool.model import PodState
from firepool.service.broker import BrokerConfig
from firepool.service.catalog import Catalog
from firepool.testing.control import cpu_pool
from firepool.testing.service import BrokerThread, running_broker, submit, wait_job
from firepool.testing.switch import Switch

# network host: a gang's ranks rendezvous over TCP between their pods
POOL = cpu_pool(network="host",
                min_count=2, max_idle_count=2, max_count=2, idle_timeout=120.0,
                caller_hold_seconds=0.0, memory_mib_per_pod=256, step=2)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerThread]:
    config = BrokerConfig(dispatch_tick_s=0.5, reconcile_s=0.5, hold_tick_s=0.2,
                          exit_poll_s=0.5, gang_reservations=ReservationRules(hold_s=300.0))
    with running_broker(tmp_path / "b", catalog=Catalog((POOL,), {"cpu": 2}),
                        config=config) as handle:
        yield handle


def until(what: str, check: object, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.05)


def test_a_waiting_gang_keeps_the_freed_pod_from_a_younger_small_job(
    broker: BrokerThread,
) -> None:
    tracker = broker.embedded.broker.tracker

    def states() -> list[PodState]:
        return broker.call(lambda: [p.state for p in tracker.pool_pods("cpu")])

    def reserved_by() -> str | None:
        res = broker.embedded.broker.core.reservations
        held = broker.call(lambda: res.holder("cpu") if res is not None else None)
        return held.job if held is not None else None

    with broker.client("alice") as alice, broker.client("gang") as g, \
            broker.client("bob") as bob:
        until("pool ready", lambda: states() == [PodState.IDLE] * 2)
        first, second = Switch(), Switch()
        holders = [submit(alice, pool="cpu", command=s.job()) for s in (first, second)]
        until("both pods busy", lambda: states().count(PodState.RUNNING) == 2)
        gang = submit(g, pool="cpu", pods=2, command=[sys.executable, "-c", "pass"])
        until("the gang reserves the pool", lambda: reserved_by() == gang)
        small = submit(bob, pool="cpu", command=[sys.executable, "-c", "pass"])
        first.open()
        assert wait_job(alice, holders[0])["state"] == "SUCCEEDED"
        # The freed pod retires and its replacement comes up idle: the small job, younger
        # than the gang, is held back and the pod stays free for the gang.
        until("a fresh pod for the gang", lambda: states().count(PodState.IDLE) == 1)
        time.sleep(1.5)  # three dispatch ticks: a broken rule would have placed it by now
        assert bob.get(f"/v1/jobs/{small}").json()["state"] == "QUEUED"
        assert states().count(PodState.IDLE) == 1
        second.open()
        ran = wait_job(g, gang, timeout=90)
        after = wait_job(bob, small, timeout=90)
        for s in (first, second):
            s.close()
    assert ran["state"] == "SUCCEEDED" and after["state"] == "SUCCEEDED"
    assert ran["timings"]["started"] < after["timings"]["started"]
    assert reserved_by() is None
