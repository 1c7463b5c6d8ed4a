"""The broker's question for an exit (`GET /v1/attempts/{id}?wait_s=`) on a real pod: answered
at the exit, not at the end of the wait; answered at once when asked again; and an attempt
whose exit the broker asks for (`awaits_exit`) is never pushed as an event, while one
launched without it still is (an attempt an older broker launched)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from pod_helpers import EventSink, Loop, backend_at, make_pod, py

from firepool.backends.agent_client import AgentClient
from firepool.protocol import AttemptPhase, LaunchRequest
from firepool.testing.control import cpu_pool

pytestmark = pytest.mark.timeout(120)

POOL = cpu_pool(memory_mib_per_pod=256)


@pytest.fixture(scope="module")
def pod() -> Iterator[tuple[AgentClient, Loop, EventSink]]:
    sink = EventSink()
    try:
        with backend_at("wait") as (backend, loop, _root):
            _, client = loop.run(make_pod(backend, POOL, callback_url=sink.url))
            yield client, loop, sink
    finally:
        sink.close()


def test_the_answer_comes_at_the_exit_and_the_exit_is_not_pushed(
    pod: tuple[AgentClient, Loop, EventSink],
) -> None:
    client, loop, sink = pod
    request = LaunchRequest(
        attempt="waited-1:0", argv=py("import time; time.sleep(0.5); print('done')"),
        awaits_exit=True,
    )  # fmt: skip
    loop.run(client.launch(request))
    asked = time.monotonic()
    status = loop.run(client.wait_status("waited-1:0", 15))
    took = time.monotonic() - asked
    assert status.phase is AttemptPhase.EXITED and status.exit is not None
    assert status.exit.exit_code == 0 and status.exit.output is not None
    assert status.exit.output.stdout == b"done\n"
    assert took < 10, took  # woken by the exit, not by the end of its 15 s
    again = loop.run(client.wait_status("waited-1:0", 15))  # an answer lost on the way
    assert again.exit == status.exit
    time.sleep(0.5)  # a push would have gone out at the exit
    assert [e.attempt for e in sink.events] == []
    assert loop.run(client.reset()).clean


def test_a_running_attempt_is_answered_when_the_wait_is_up(
    pod: tuple[AgentClient, Loop, EventSink],
) -> None:
    client, loop, _ = pod
    request = LaunchRequest(
        attempt="long-1:0", argv=py("import time; time.sleep(60)"), awaits_exit=True
    )
    loop.run(client.launch(request))
    asked = time.monotonic()
    status = loop.run(client.wait_status("long-1:0", 0.3))
    assert status.phase is AttemptPhase.RUNNING and status.exit is None
    assert 0.25 <= time.monotonic() - asked < 5
    assert loop.run(client.reset()).clean  # kills it


def test_an_attempt_launched_without_it_is_still_pushed(
    pod: tuple[AgentClient, Loop, EventSink],
) -> None:
    client, loop, sink = pod
    loop.run(client.launch(LaunchRequest(attempt="pushed-1:0", argv=py("pass"))))
    assert sink.wait_for("pushed-1:0").exit_code == 0
    assert loop.run(client.reset()).clean
