"""A lost exit event (issue 13, item 6): every exit event the agents push is dropped on
arrival (fault injection at the broker's hook; agents, pods and broker real). The broker learns
each exit by polling the agents, so the job still ends with its own exit code and output."""

from __future__ import annotations

import sys

from firepool.protocol import ExitEvent
from firepool.testing.service import BrokerThread, run


def test_the_polling_fallback_finishes_a_job_whose_exit_event_was_lost(
    broker: BrokerThread,
) -> None:
    core = broker.embedded.broker
    dropped: list[str] = []

    def drop(event: ExitEvent) -> bool:
        dropped.append(event.attempt)
        return True  # acknowledged to the agent, and lost

    broker.call(lambda: setattr(core, "exit_event", drop))
    with broker.client() as c:
        job = run(c, command=[sys.executable, "-c", "print('polled'); raise SystemExit(3)"])
        assert (job["state"], job["exit_code"]) == ("FAILED", 3), job
        assert c.get(f"/v1/jobs/{job['id']}/logs").json()["data"] == "polled\n"
    assert dropped == [job["attempt"]]  # the event did arrive, and was lost
