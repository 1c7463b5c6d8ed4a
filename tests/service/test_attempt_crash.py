"""A failure inside the broker's own attempt task (here: the reset call raising) must not leave
the job RUNNING or its pod leased: the attempt is judged like a lost pod, the pod is deleted
unverified, and the broker goes on serving."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from firepool.model import PoolSpec
from firepool.service.broker import BrokerConfig
from firepool.service.catalog import Catalog
from firepool.testing.service import BrokerThread, run, running_broker

POOL = PoolSpec(name="cpu", min_count=1, max_idle_count=1, max_count=2, idle_timeout=60.0,
                memory_mib_per_pod=512, step=1)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerThread]:
    config = BrokerConfig(dispatch_tick_s=1.0, reconcile_s=1.0, hold_tick_s=0.2,
                          exit_poll_s=0.5)
    with running_broker(tmp_path / "b", catalog=Catalog((POOL,), {"cpu": 4}),
                        config=config) as handle:
        yield handle


def break_next_reset(broker: BrokerThread) -> None:
    runner = broker.embedded.broker.runner
    real = runner.reset

    async def failing(lease: object, **kw: object) -> list[str]:
        runner.reset = real  # type: ignore[method-assign]
        raise RuntimeError("injected: the reset call broke inside the broker")

    broker.call(lambda: setattr(runner, "reset", failing))


@pytest.mark.parametrize(("retries", "state"), [(0, "FAILED"), (1, "SUCCEEDED")])
def test_a_crash_in_the_attempt_task_ends_the_attempt(
    broker: BrokerThread, retries: int, state: str
) -> None:
    break_next_reset(broker)
    with broker.client() as c:
        job = run(c, command=[sys.executable, "-c", "pass"], max_retries=retries)
        assert job["state"] == state and job["retries"] == retries
        attempts = broker.call(lambda: broker.embedded.store.attempts(job["id"]))
        assert attempts[0].error_class is not None
        assert attempts[0].error_class.value == "PodLost"
        first_pod = attempts[0].pods[0].pod
        core = broker.embedded.broker.core
        assert broker.call(lambda: job["id"] not in core.running)
        again = run(c, command=[sys.executable, "-c", "pass"])
        assert again["state"] == "SUCCEEDED"
        assert again["pods"][0]["name"] != first_pod  # the unverified pod was not reused
