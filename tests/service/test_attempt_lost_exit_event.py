"""A lost exit (issue 13, item 6): every answer to the broker's question for an exit is lost
on the way (fault injection at the agent client: agents, pods and broker real), and so is
every exit event an agent pushes. The broker learns each exit by polling the agents, so the
job still ends with its own exit code and output."""

from __future__ import annotations

import sys

import pytest

from firepool.backends.agent_client import AgentClient
from firepool.model import UnavailableError
from firepool.protocol import AttemptStatus, ExitEvent
from firepool.testing.service import BrokerThread, run


def test_the_polling_fallback_finishes_a_job_whose_exit_answers_were_lost(
    broker: BrokerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    core = broker.embedded.broker
    asked: list[str] = []
    dropped: list[str] = []

    async def lost_answer(self: AgentClient, attempt: str, wait_s: float) -> AttemptStatus:
        asked.append(attempt)
        raise UnavailableError(f"the answer for {attempt} was lost")

    def drop(event: ExitEvent) -> bool:
        dropped.append(event.attempt)
        return True  # acknowledged to the agent, and lost

    monkeypatch.setattr(AgentClient, "wait_status", lost_answer)
    broker.call(lambda: setattr(core, "exit_event", drop))
    with broker.client() as c:
        job = run(c, command=[sys.executable, "-c", "print('polled'); raise SystemExit(3)"])
        assert (job["state"], job["exit_code"]) == ("FAILED", 3), job
        assert c.get(f"/v1/jobs/{job['id']}/logs").json()["data"] == "polled\n"
    assert set(asked) == {job["attempt"]}  # the broker asked, and heard nothing back
    assert dropped == []  # an attempt whose exit the broker asks for is never pushed
