"""An attempt's output stays on its pod until the broker has acknowledged it (issue 13, item 0).

A real agent in a real local pod: the reset reports (never silently drops) output the broker
had not acknowledged; an acknowledgement of everything lets the reset go at once; a reset
asked to wait for the acknowledgement gets it from another connection while it waits; bad
acknowledgements are refused naming the field.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest
from pod_helpers import Loop, backend_at, make_pod, py, run_job
from test_server_bad_input import Pod

from firepool.backends.agent_client import AgentClient
from firepool.model import NotFoundError
from firepool.protocol import LogAck
from firepool.testing.control import cpu_pool

pytestmark = pytest.mark.timeout(120)

POOL = cpu_pool(memory_mib_per_pod=256)
OUT = "print('a' * 99)\nimport sys; sys.stderr.write('e' * 9)"  # 100 + 9 bytes


@pytest.fixture(scope="module")
def pod() -> Iterator[Pod]:
    with backend_at("kept") as (backend, loop, _root):
        record, client = loop.run(make_pod(backend, POOL))
        yield Pod(record, client, loop)


def test_a_reset_reports_output_the_broker_never_acknowledged(pod: Pod) -> None:
    pod.loop.run(run_job(pod.client, "kept-1:0", py(OUT)))
    result = pod.loop.run(pod.client.reset())
    assert result.clean
    assert result.logs_unacked == {"stdout": 100, "stderr": 9}


def test_acknowledged_output_is_dropped_without_a_loss(pod: Pod) -> None:
    pod.loop.run(run_job(pod.client, "kept-2:0", py(OUT)))
    part = pod.loop.run(pod.client.ack_logs("kept-2:0", LogAck(stdout=40, stderr=9)))
    assert (part.complete, part.acked) == (False, {"stdout": 40, "stderr": 9})
    # acknowledgements never move back
    again = pod.loop.run(pod.client.ack_logs("kept-2:0", LogAck(stdout=10, stderr=0)))
    assert again.acked == {"stdout": 40, "stderr": 9}
    full = pod.loop.run(pod.client.ack_logs("kept-2:0", LogAck(stdout=100, stderr=9)))
    assert full.complete
    result = pod.loop.run(pod.client.reset(await_logs_s=60.0))
    assert result.clean and result.logs_unacked == {}


def test_a_waiting_reset_takes_the_acknowledgement_that_arrives_meanwhile(pod: Pod) -> None:
    pod.loop.run(run_job(pod.client, "kept-3:0", py(OUT)))

    async def both() -> tuple[bool, dict[str, int]]:
        async with AgentClient(pod.record.agent_url, pod.record.secret) as other:
            reset = asyncio.ensure_future(pod.client.reset(await_logs_s=120.0))
            # while the reset waits, the attempt is still known and its output kept
            status = await other.status("kept-3:0")
            assert status.exit is not None
            ack = await other.ack_logs("kept-3:0", LogAck(stdout=100, stderr=9))
            result = await reset
        return ack.complete, result.logs_unacked

    complete, unacked = pod.loop.run(both())
    assert complete and unacked == {}


def test_a_bounded_wait_ends_and_reports_the_loss(pod: Pod) -> None:
    pod.loop.run(run_job(pod.client, "kept-4:0", py(OUT)))
    pod.loop.run(pod.client.ack_logs("kept-4:0", LogAck(stdout=100)))
    result = pod.loop.run(pod.client.reset(await_logs_s=0.2))
    assert result.clean and result.logs_unacked == {"stderr": 9}
    with pytest.raises(NotFoundError):  # the reset removed the attempt
        pod.loop.run(pod.client.ack_logs("kept-4:0", LogAck()))


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/attempts/kept-5:0/logs/ack", {"stdout": -1}, "stdout"),
        ("/v1/attempts/kept-5:0/logs/ack", {"install.log": 3}, "install.log"),
        ("/v1/attempts/kept-5:0/logs/ack", {"stderr": "x"}, "stderr"),
        ("/v1/attempts/nope-1:0/logs/ack", {}, "attempt"),
        ("/v1/reset", {"await_logs_s": -1}, "await_logs_s"),
        ("/v1/reset", {"await_logs_s": 601}, "await_logs_s"),
    ],
)
def test_bad_acknowledgements_and_waits_are_refused_naming_the_field(
    pod: Pod, path: str, body: dict[str, object], field: str
) -> None:
    if not pod.loop.run(pod.client.health()).dirty:
        pod.loop.run(run_job(pod.client, "kept-50:0", ["true"]))
    status, answer = pod.raw("POST", path, json.dumps(body).encode())
    assert status in (404, 422) and answer["field"] == field, answer


def test_the_pod_is_clean_after_all_that(pod: Pod) -> None:
    assert pod.loop.run(pod.client.reset()).clean
    pod.loop.run(run_job(pod.client, "kept-60:0", ["true"]))
    assert pod.loop.run(pod.client.reset()).clean


_ = Loop  # the module's loop comes with backend_at


def test_an_ended_attempt_is_still_known_after_its_reset(pod: Pod) -> None:
    """A broker killed after the reset but before the verdict was durable asks at recovery:
    the agent answers with the exit, so the attempt is judged, not run again."""
    pod.loop.run(run_job(pod.client, "kept-70:0", py("raise SystemExit(7)")))
    assert pod.loop.run(pod.client.reset()).clean
    status = pod.loop.run(pod.client.status("kept-70:0"))
    assert status.exit is not None and status.exit.exit_code == 7
    with pytest.raises(NotFoundError):
        pod.loop.run(pod.client.status("kept-80:0"))  # never launched here
