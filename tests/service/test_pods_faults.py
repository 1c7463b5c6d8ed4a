"""Pod faults in the service (issue 13, items 4 and 6), on real processes: a pod whose agent
dies before it serves is retired and its budget released; an agent that dies mid-reset
retires its pod (the job keeps its verdict and output); a cancel that lands while an
attempt's verdict is written wins: no retry runs after it."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from firepool.control.dispatch import Verdict
from firepool.model import JobErrorClass, JobState
from firepool.service.broker import BrokerConfig
from firepool.service.catalog import Catalog
from firepool.testing.control import cpu_pool
from firepool.testing.service import BrokerThread, run, running_broker, submit

POOL = cpu_pool(min_count=0, max_idle_count=1, max_count=1, idle_timeout=60.0,
                memory_mib_per_pod=512, step=1)  # fmt: skip
CONFIG = BrokerConfig(dispatch_tick_s=1.0, reconcile_s=1.0, hold_tick_s=0.2, exit_poll_s=0.5)


def _broker(tmp_path: Path, *faults: str) -> Iterator[BrokerThread]:
    with running_broker(
        tmp_path / "b", catalog=Catalog((POOL,), {"cpu": 1}), config=CONFIG, faults=faults
    ) as handle:
        yield handle


@pytest.fixture
def dying_at_start(tmp_path: Path) -> Iterator[BrokerThread]:
    yield from _broker(tmp_path, "die-at-start")


@pytest.fixture
def dying_in_reset(tmp_path: Path) -> Iterator[BrokerThread]:
    yield from _broker(tmp_path, "die-in-reset")


def _used(broker: BrokerThread) -> float:
    return broker.call(lambda: broker.embedded.broker.ledger.used("cpu"))


def _until(condition: object, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_pod_that_fails_to_start_is_retired_and_its_budget_released(
    dying_at_start: BrokerThread,
) -> None:
    broker = dying_at_start
    with broker.client() as c:
        job = submit(c, command=["true"])
        # The job's demand makes the scaler create the pool's one pod, reserving its core.
        _until(lambda: _used(broker) == 1, "no pod was created for the queued job")
        metrics = lambda: c.get("/metrics").text  # noqa: E731
        _until(lambda: 'reason="pod_failed"' in metrics(), "the dead pod was not retired")
        assert c.get(f"/v1/jobs/{job}").json()["state"] == "QUEUED"  # it never ran anywhere
        assert c.post(f"/v1/jobs/{job}/cancel").status_code == 200
        # With nothing asking for pods the budget comes back and no pod is left.
        _until(lambda: _used(broker) == 0, "the failed pod's budget was never released")
        _until(lambda: c.get("/v1/pods").json()["pods"] == [], "a failed pod is still listed")
        assert c.get(f"/v1/jobs/{job}").json()["state"] == "CANCELLED"


def test_an_agent_dying_mid_reset_retires_its_pod(dying_in_reset: BrokerThread) -> None:
    broker = dying_in_reset
    with broker.client() as c:
        first = run(c, command=[sys.executable, "-c", "print('one')"], lease_tag="s")
        assert (first["state"], first["exit_code"], first["retries"]) == ("SUCCEEDED", 0, 0)
        pod = first["pods"][0]["name"]
        names = lambda: {p["name"] for p in c.get("/v1/pods").json()["pods"]}  # noqa: E731
        _until(lambda: pod not in names(), "the pod whose agent died in its reset was kept")
        _until(lambda: _used(broker) == 0, "the dead pod's budget was never released")
        assert c.get(f"/v1/jobs/{first['id']}/logs").json()["data"] == "one\n"
        second = run(c, command=[sys.executable, "-c", "print('two')"], lease_tag="s")
        assert second["state"] == "SUCCEEDED" and second["pods"][0]["name"] != pod


def test_a_cancel_landing_while_the_verdict_is_written_wins(tmp_path: Path) -> None:
    """The attempt failed (a retry is due) and the runner writes that verdict from the
    record it committed; a cancel has bumped the row in between. The write loses its race,
    re-reads, and records CANCELLED instead of queueing another attempt."""
    with running_broker(tmp_path / "b", catalog=Catalog((POOL,), {"cpu": 1}), config=CONFIG) as b:
        with b.client() as c:
            job_id = submit(c, command=[sys.executable, "-c", "import time; time.sleep(600)"],
                            max_retries=3)  # fmt: skip
            _until(lambda: c.get(f"/v1/jobs/{job_id}").json()["state"] == "RUNNING", "not run")
        store = b.embedded.store
        committed = store.get(job_id)
        assert committed is not None and committed.state is JobState.RUNNING
        after_cancel = store.cancel(job_id, now=time.time())
        assert after_cancel.cancel_requested and after_cancel.version > committed.version
        retry = Verdict(JobState.QUEUED, JobErrorClass.NON_ZERO_EXIT, 1)
        core = b.embedded.broker.core
        refused = lambda fresh, v: core.verdict_refused(  # noqa: E731
            v, cancel_requested=fresh.cancel_requested)
        final = b.run(b.embedded.broker.runner.record(committed, retry, refused))
        assert (final.state, final.retries) == (JobState.CANCELLED, 0)
        stored = store.get(job_id)
        assert stored is not None and stored.state is JobState.CANCELLED
