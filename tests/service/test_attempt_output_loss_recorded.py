"""An output loss is recorded on the job, never silent (issue 13, item 0): with the broker's
log storing broken (fault injection: neither the output that came with the exit event nor a
log pump is stored), the reset waits its bounded time for an acknowledgement that cannot
come, the agent reports the bytes it removes unacknowledged, and the job's log says so.
Everything else is real: embedded broker, local pods, the agent."""

from __future__ import annotations

import sys

from firepool.service.attempt import Running
from firepool.testing.service import BrokerThread, run


def test_output_the_broker_never_stored_is_recorded_as_lost_in_the_log(
    broker: BrokerThread,
) -> None:
    runner = broker.embedded.broker.runner

    async def broken_drain(running: Running) -> None:
        return None  # the output that came with the exit event is never stored

    def broken_pump(running: Running) -> None:
        return None  # nor is any output copied while the attempt runs

    broker.call(lambda: setattr(runner, "drain_logs", broken_drain))
    broker.call(lambda: setattr(runner, "start_log_pump", broken_pump))
    with broker.client() as c:
        job = run(c, command=[sys.executable, "-c", "print('hello')"])
        assert job["state"] == "SUCCEEDED"  # the job's verdict does not depend on its log
        log = c.get(f"/v1/jobs/{job['id']}/logs").json()
    assert log["data"] == (
        "\n[firepool: output incomplete: the pod was reset before 6 bytes of stdout were "
        "stored]\n"
    )
