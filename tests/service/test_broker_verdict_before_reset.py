"""A short job's verdict goes out before its pod's reset (`BrokerCore.judge_before_reset`), on
real processes: every reset of this broker's pods takes 1.5 s longer (the agent's `slow-reset`
test hook), so what waits for a reset shows.

The caller has the result without waiting for the reset; the same session's next job waits
for its own pod (it comes back held) instead of taking another; another caller's job does not
wait; a retry is judged only after the reset, as before."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from firepool.agent.reset import SLOW_RESET_S
from firepool.service.broker import BrokerConfig
from firepool.service.catalog import Catalog
from firepool.testing.control import cpu_pool
from firepool.testing.service import BrokerThread, run, running_broker, submit, wait_job

POOL = cpu_pool(min_count=2, max_idle_count=2, max_count=3, idle_timeout=60.0,
                memory_mib_per_pod=512, step=1)  # fmt: skip
#: The retry exits 0: FIREPOOL_ATTEMPT is `<job>:<retry>`.
FAIL_FIRST = "import os, sys; sys.exit(3 if os.environ['FIREPOOL_ATTEMPT'].endswith(':0') else 0)"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerThread]:
    config = BrokerConfig(dispatch_tick_s=1.0, reconcile_s=1.0, hold_tick_s=0.2, exit_poll_s=0.5)
    with running_broker(
        tmp_path / "b", catalog=Catalog((POOL,), {"cpu": 4}), config=config,
        faults=("slow-reset",),
    ) as handle:  # fmt: skip
        with handle.client() as c:  # both pods of the floor up before anything is timed
            deadline = time.monotonic() + 60
            while sum(p["state"] == "idle" for p in c.get("/v1/pods").json()["pods"]) < 2:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        yield handle


def _started_after_submit(job: dict) -> float:  # type: ignore[type-arg]
    return float(job["timings"]["started"] - job["timings"]["submitted"])


def test_the_result_comes_before_the_reset_and_the_session_waits_for_its_own_pod(
    broker: BrokerThread,
) -> None:
    with broker.client() as alice, broker.client("bob") as bob:
        began = time.monotonic()
        first = run(alice, command=[sys.executable, "-c", "print('one')"], lease_tag="s")
        assert time.monotonic() - began < SLOW_RESET_S * 0.7  # no reset in the caller's wait
        assert (first["state"], first["exit_code"]) == ("SUCCEEDED", 0)
        pod = first["pods"][0]["name"]
        # The pod is still being reset: alice's next job waits for it, bob's does not.
        again = submit(alice, command=[sys.executable, "-c", "print('two')"], lease_tag="s")
        other = run(bob, command=[sys.executable, "-c", "pass"], lease_tag="s")
        second = wait_job(alice, again)
    assert second["state"] == "SUCCEEDED"
    assert second["pods"][0]["name"] == pod and second["pods"][0]["acquisition"] == "warm"
    assert _started_after_submit(second) > SLOW_RESET_S * 0.3  # it waited for the reset
    assert other["state"] == "SUCCEEDED" and other["pods"][0]["name"] != pod
    assert _started_after_submit(other) < SLOW_RESET_S * 0.3  # another caller never waits


def test_the_log_is_complete_when_the_result_is_out(broker: BrokerThread) -> None:
    body = "import sys; print('out'); print('err', file=sys.stderr)"
    with broker.client() as c:
        job = run(c, command=[sys.executable, "-c", body], lease_tag="s")
        log = c.get(f"/v1/jobs/{job['id']}/logs").json()["data"]
    assert sorted(log.splitlines()) == ["err", "out"]


def test_a_retry_is_judged_after_the_reset(broker: BrokerThread) -> None:
    """A retry must not queue while its pod is leased: it is requeued once the reset is done,
    so the whole job takes at least the first attempt's reset, and the retry runs on the
    session's pod, reset in between."""
    with broker.client() as c:
        began = time.monotonic()
        job = run(c, command=[sys.executable, "-c", FAIL_FIRST], lease_tag="r", max_retries=1)
        took = time.monotonic() - began
    assert (job["state"], job["retries"], job["exit_code"]) == ("SUCCEEDED", 1, 0)
    assert took > SLOW_RESET_S
