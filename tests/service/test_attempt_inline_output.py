"""A short job's output travels with its exit event; a long or large one is followed live.

The broker follows an attempt's log streams only once it has run `live_output_after_s`; an
attempt that exits sooner sends its whole output (up to `INLINE_OUTPUT_BYTES`) with its exit
event, and the reset acknowledges it: three calls to the agent fewer per short job. Real
embedded broker, real local pods and agents; the pump is watched, never replaced, except
where a test proves it is not needed at all.
"""

from __future__ import annotations

import sys
import time

from firepool.protocol import INLINE_OUTPUT_BYTES
from firepool.service.attempt import Running
from firepool.testing.service import BrokerThread, run, submit, wait_job


def _count_pumps(broker: BrokerThread) -> list[str]:
    """Attempts whose log pump started (the original pump still runs)."""
    runner = broker.embedded.broker.runner
    original = runner.start_log_pump
    started: list[str] = []

    def counting(running: Running) -> None:
        started.append(running.job.attempt)
        original(running)

    broker.call(lambda: setattr(runner, "start_log_pump", counting))
    return started


def test_a_short_jobs_output_comes_with_its_exit_and_no_pump_runs(broker: BrokerThread) -> None:
    started = _count_pumps(broker)
    # "Short" whatever the machine's load: the pump would start only after a minute.
    runner = broker.embedded.broker.runner
    broker.call(lambda: setattr(runner, "live_output_after_s", 60.0))
    body = "import sys; print('hello'); sys.stderr.buffer.write(b'bin\\xff\\n')"
    with broker.client() as c:
        job = run(c, command=[sys.executable, "-c", body])
        assert job["state"] == "SUCCEEDED"
        log = c.get(f"/v1/jobs/{job['id']}/logs").json()
    # Both streams, whole, the byte that is not UTF-8 too (shown replaced by the API).
    assert log["data"] == "hello\nbin\ufffd\n"
    assert log["complete"]
    assert started == []


def test_output_too_large_for_the_exit_event_is_pumped_whole(broker: BrokerThread) -> None:
    started = _count_pumps(broker)
    runner = broker.embedded.broker.runner
    broker.call(lambda: setattr(runner, "live_output_after_s", 60.0))  # pumped for its size
    size = INLINE_OUTPUT_BYTES + 1000
    body = f"import sys; sys.stdout.write('x' * {size})"
    with broker.client() as c:
        job = run(c, command=[sys.executable, "-c", body])
        assert job["state"] == "SUCCEEDED"
        log = c.get(f"/v1/jobs/{job['id']}/logs").json()
    assert log["data"] == "x" * size
    assert started == [job["attempt"]]


def test_a_long_jobs_output_is_followed_while_it_runs(broker: BrokerThread) -> None:
    body = "import time; print('early', flush=True); time.sleep(3); print('late')"
    with broker.client() as c:
        job_id = submit(c, command=[sys.executable, "-c", body])
        deadline = time.monotonic() + 2.5
        seen = ""
        while time.monotonic() < deadline and "early" not in seen:
            seen = c.get(f"/v1/jobs/{job_id}/logs").json()["data"]
            time.sleep(0.05)
        assert seen == "early\n"
        assert c.get(f"/v1/jobs/{job_id}").json()["state"] == "RUNNING"
        job = wait_job(c, job_id)
        assert job["state"] == "SUCCEEDED"
        log = c.get(f"/v1/jobs/{job_id}/logs").json()
    assert log["data"] == "early\nlate\n"


def test_a_silent_job_leaves_an_empty_complete_log_and_no_loss(broker: BrokerThread) -> None:
    started = _count_pumps(broker)
    runner = broker.embedded.broker.runner
    broker.call(lambda: setattr(runner, "live_output_after_s", 60.0))
    with broker.client() as c:
        job = run(c, command=[sys.executable, "-c", "pass"])
        assert job["state"] == "SUCCEEDED"
        log = c.get(f"/v1/jobs/{job['id']}/logs").json()
    # Acknowledged with the reset although nothing was stored: no "output incomplete" line.
    assert log["data"] == "" and log["complete"]
    assert started == []
