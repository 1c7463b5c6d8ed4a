"""An agent ending its pod (agent/runtime.py `Runtime.shutdown`, on a delete's SIGTERM) says so
in the exit of the attempt it kills, on real processes: the broker judges a lost pod, never
the job's own Killed (which a caller would read as its code's fault)."""

from __future__ import annotations

import os
import signal

import pytest
from pod_helpers import EventSink, backend_at, make_pod, py

from firepool.protocol import LaunchRequest, StopReason
from firepool.testing.control import cpu_pool
from firepool.testing.waiting import wait_until

pytestmark = pytest.mark.timeout(120)


def test_an_attempt_killed_by_its_ending_pod_exits_with_the_shutdown_reason() -> None:
    sink = EventSink()
    try:
        with backend_at("shutdown") as (backend, loop, _root):
            record, client = loop.run(make_pod(backend, cpu_pool(), callback_url=sink.url))
            sleep = py("import time; time.sleep(600)")
            loop.run(client.launch(LaunchRequest(attempt="ending-1:0", argv=sleep)))
            os.kill(record.pid, signal.SIGTERM)  # what a delete sends
            event = sink.wait_for("ending-1:0", timeout=30)
        assert event.signal == signal.SIGKILL and event.exit_code is None
        assert event.stop_reason is StopReason.SHUTDOWN
    finally:
        sink.close()


def test_a_stop_asked_before_the_pod_ends_keeps_its_own_reason() -> None:
    """A timeout already under way (its SIGTERM ignored, its grace running) is what ended
    the attempt, not the pod that ended during the grace."""
    sink = EventSink()
    try:
        with backend_at("shutdown-stop") as (backend, loop, root):
            record, client = loop.run(make_pod(backend, cpu_pool(), callback_url=sink.url))
            deaf = py(
                "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                "time.sleep(600)"
            )
            request = LaunchRequest(attempt="ending-2:0", argv=deaf, timeout_s=0.2)
            loop.run(client.launch(request))
            agent_log = root / record.name / "agent.log"
            wait_until(
                "the timeout's stop began",
                lambda: "stop of ending-2:0 asked (timeout)" in agent_log.read_text(),
                timeout=30,
            )
            os.kill(record.pid, signal.SIGTERM)  # within the stop's 5 s grace
            event = sink.wait_for("ending-2:0", timeout=30)
        assert event.stop_reason is StopReason.TIMEOUT
    finally:
        sink.close()
