"""An unclean reset in the service (issue 13, item 6), on real processes: every reset of this
broker's pods reports unclean (the agent's `verify` fault hook). The job still succeeds (its
verdict is its exit), its pod is deleted rather than reused, and the next job of the same
session gets another pod."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from firepool.service.broker import BrokerConfig
from firepool.service.catalog import Catalog
from firepool.testing.control import cpu_pool
from firepool.testing.service import BrokerThread, run, running_broker

POOL = cpu_pool(min_count=1, max_idle_count=1, max_count=2, idle_timeout=60.0,
                memory_mib_per_pod=512, step=1)  # fmt: skip


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerThread]:
    config = BrokerConfig(dispatch_tick_s=1.0, reconcile_s=1.0, hold_tick_s=0.2, exit_poll_s=0.5)
    with running_broker(
        tmp_path / "b", catalog=Catalog((POOL,), {"cpu": 4}), config=config, faults=("verify",)
    ) as handle:
        yield handle


def test_an_unclean_reset_deletes_the_pod_and_the_session_moves_on(broker: BrokerThread) -> None:
    with broker.client() as c:
        first = run(c, command=[sys.executable, "-c", "print('one')"], lease_tag="s")
        assert (first["state"], first["exit_code"]) == ("SUCCEEDED", 0)
        pod = first["pods"][0]["name"]
        deadline = time.monotonic() + 60
        while pod in {p["name"] for p in c.get("/v1/pods").json()["pods"]}:
            assert time.monotonic() < deadline, "the unverified pod was kept"
            time.sleep(0.05)
        second = run(c, command=[sys.executable, "-c", "print('two')"], lease_tag="s")
        assert second["state"] == "SUCCEEDED" and second["pods"][0]["name"] != pod
        assert c.get(f"/v1/jobs/{first['id']}/logs").json()["data"] == "one\n"
