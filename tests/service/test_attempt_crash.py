"""A failure inside the broker's own attempt task must not leave the job RUNNING or its pod
leased: before the verdict (here: draining the logs raises) the attempt is judged like a lost
pod; after a verdict given before the reset (here: the reset call raises) the verdict stands.
Either way the pod is deleted unverified and the broker goes on serving."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from firepool.service.broker import BrokerConfig
from firepool.service.catalog import Catalog
from firepool.testing.control import cpu_pool
from firepool.testing.service import BrokerThread, run, running_broker
from firepool.testing.waiting import wait_until

POOL = cpu_pool(min_count=1, max_idle_count=1, max_count=2, idle_timeout=60.0,
                memory_mib_per_pod=512, step=1)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerThread]:
    config = BrokerConfig(dispatch_tick_s=1.0, reconcile_s=1.0, hold_tick_s=0.2,
                          exit_poll_s=0.5)
    with running_broker(tmp_path / "b", catalog=Catalog((POOL,), {"cpu": 4}),
                        config=config) as handle:
        yield handle


def break_next(broker: BrokerThread, step: str) -> None:
    """The runner's next call of `step` raises inside the broker (once)."""
    runner = broker.embedded.broker.runner
    real = getattr(runner, step)

    async def failing(*args: object, **kw: object) -> object:
        setattr(runner, step, real)
        raise RuntimeError(f"injected: the {step} call broke inside the broker")

    broker.call(lambda: setattr(runner, step, failing))


def check_pod_not_reused(c: httpx.Client, first_pod: str) -> None:
    again = run(c, command=[sys.executable, "-c", "pass"])
    assert again["state"] == "SUCCEEDED"
    assert again["pods"][0]["name"] != first_pod  # the unverified pod was not reused


@pytest.mark.parametrize(("retries", "state"), [(0, "FAILED"), (1, "SUCCEEDED")])
def test_a_crash_before_the_verdict_ends_the_attempt_like_a_lost_pod(
    broker: BrokerThread, retries: int, state: str
) -> None:
    break_next(broker, "drain_logs")
    with broker.client() as c:
        job = run(c, command=[sys.executable, "-c", "pass"], max_retries=retries)
        assert job["state"] == state and job["retries"] == retries
        attempts = broker.call(lambda: broker.embedded.store.attempts(job["id"]))
        assert attempts[0].error_class is not None
        assert attempts[0].error_class.value == "PodLost"
        core = broker.embedded.broker.core
        wait_until("the attempt over", lambda: broker.call(lambda: job["id"] not in core.running))
        check_pod_not_reused(c, attempts[0].pods[0].pod)


def test_a_crash_in_the_reset_after_the_verdict_keeps_the_verdict(broker: BrokerThread) -> None:
    break_next(broker, "reset")
    with broker.client() as c:
        job = run(c, command=[sys.executable, "-c", "print('kept')"], max_retries=1)
        assert job["state"] == "SUCCEEDED" and job["retries"] == 0
        attempts = broker.call(lambda: broker.embedded.store.attempts(job["id"]))
        assert len(attempts) == 1 and attempts[0].error_class is None
        assert c.get(f"/v1/jobs/{job['id']}/logs").json()["data"] == "kept\n"
        core = broker.embedded.broker.core
        wait_until("the attempt over", lambda: broker.call(lambda: job["id"] not in core.running))
        first_pod = attempts[0].pods[0].pod
        check_pod_not_reused(c, first_pod)
        deadline = time.monotonic() + 10
        while first_pod in (names := {p["name"] for p in c.get("/v1/pods").json()["pods"]}):
            assert time.monotonic() < deadline, names
            time.sleep(0.05)  # deleted, not kept for anyone
