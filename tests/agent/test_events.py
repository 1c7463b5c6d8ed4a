"""The agent's exit-event pusher against a real HTTP server on 127.0.0.1: one kept-alive
connection for many events, a fresh one when the broker closed the old, no retry of a 4xx."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from firepool.agent.events import EventPusher
from firepool.protocol import ExitEvent


class Broker(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.connections = 0
        self.bodies: list[bytes] = []
        self.auth: list[str | None] = []
        self.status = 200
        self.close_after_reply = False
        self.got = threading.Condition()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/internal/v1/events"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Broker

    def setup(self) -> None:
        super().setup()
        self.server.connections += 1

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(self.server.status)
        self.send_header("Content-Length", "2")
        if self.server.close_after_reply:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(b"{}")
        with self.server.got:
            self.server.bodies.append(body)
            self.server.auth.append(self.headers.get("Authorization"))
            self.server.got.notify_all()

    def log_message(self, format: str, *args: object) -> None:
        return None


@pytest.fixture
def broker() -> Iterator[Broker]:
    server = Broker()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def event(n: int) -> ExitEvent:
    now = time.time()
    return ExitEvent(
        pod="cpu-1",
        attempt=f"job{n}:0",
        exit_code=0,
        runtime_s=0.0,
        started_at=now,
        finished_at=now,
    )


def delivered(broker: Broker, count: int) -> None:
    with broker.got:
        assert broker.got.wait_for(lambda: len(broker.bodies) >= count, timeout=30)


def test_many_events_share_one_connection(broker: Broker) -> None:
    pusher = EventPusher(broker.url, "s3cret")
    try:
        for n in range(5):
            pusher.push(event(n))
        delivered(broker, 5)
    finally:
        pusher.close()
    assert [ExitEvent.model_validate_json(b).attempt for b in broker.bodies] == [
        f"job{n}:0" for n in range(5)
    ]
    assert broker.auth == ["Bearer s3cret"] * 5
    assert broker.connections == 1


def test_a_connection_the_broker_closed_is_replaced(broker: Broker) -> None:
    broker.close_after_reply = True
    pusher = EventPusher(broker.url, "s3cret")
    try:
        for n in range(3):
            pusher.push(event(n))
            delivered(broker, n + 1)
    finally:
        pusher.close()
    assert broker.connections == 3 and len(broker.bodies) == 3


def test_a_refused_event_is_not_retried(broker: Broker) -> None:
    broker.status = 403
    pusher = EventPusher(broker.url, "wrong")
    try:
        pusher.push(event(1))
        pusher.push(event(2))
        delivered(broker, 2)
    finally:
        pusher.close()
    assert [ExitEvent.model_validate_json(b).attempt for b in broker.bodies] == [
        "job1:0",
        "job2:0",
    ]
