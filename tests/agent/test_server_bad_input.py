"""Bad input to the pod agent's own HTTP API: every refusal is typed and names the field.

The agent listens on loopback, where any local process (a job of another pod included) can
reach it; only the broker holds the pod secret. Requests are written byte by byte over a raw
socket, so malformed headers reach the agent exactly as sent.
"""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from pod_helpers import Loop, backend_at, make_pod, run_job

from firepool.backends.agent_client import AgentClient
from firepool.backends.base import PodRecord
from firepool.testing.control import cpu_pool

pytestmark = pytest.mark.timeout(120)

POOL = cpu_pool(memory_mib_per_pod=256)


class Pod:
    def __init__(self, record: PodRecord, client: AgentClient, loop: Loop) -> None:
        self.record, self.client, self.loop = record, client, loop
        url = urlsplit(record.agent_url)
        self.addr = (url.hostname or "127.0.0.1", url.port or 0)

    def raw(
        self,
        method: str,
        path: str,
        body: bytes = b"",
        headers: dict[str, str] | None = None,
        auth: str | None = "secret",
    ) -> tuple[int, dict[str, Any]]:
        head = {"Host": "agent", "Connection": "close", "Content-Length": str(len(body))}
        if auth == "secret":
            head["Authorization"] = f"Bearer {self.record.secret}"
        elif auth is not None:
            head["Authorization"] = auth
        head.update(headers or {})
        lines = [f"{method} {path} HTTP/1.1", *(f"{k}: {v}" for k, v in head.items()), "", ""]
        with socket.create_connection(self.addr, timeout=10) as sock:
            sock.sendall("\r\n".join(lines).encode() + body)
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        status_line, _, rest = data.partition(b"\r\n")
        _, _, payload = rest.partition(b"\r\n\r\n")
        return int(status_line.split()[1]), json.loads(payload) if payload else {}


@pytest.fixture(scope="module")
def pod() -> Iterator[Pod]:
    with backend_at("api") as (backend, loop, _root):
        record, client = loop.run(make_pod(backend, POOL))
        yield Pod(record, client, loop)


def _launch(**fields: Any) -> bytes:
    return json.dumps({"attempt": "api-1:0", "argv": ["true"], **fields}).encode()


BAD_LAUNCHES: list[tuple[str, bytes, str, str]] = [
    ("not json", b"{nope", "ValidationError", "body"),
    ("a list", b"[1, 2]", "ValidationError", "body"),
    ("no attempt", b'{"argv": ["true"]}', "ValidationError", "attempt"),
    ("unknown field", _launch(bogus=1), "ValidationError", "bogus"),
    ("empty argv", _launch(argv=[]), "ValidationError", "argv"),
    ("argv not strings", _launch(argv=[1]), "ValidationError", "argv.0"),
    ("attempt without retry", _launch(attempt="norety"), "ValidationError", "attempt"),
    ("negative timeout", _launch(timeout_s=-1), "ValidationError", "timeout_s"),
    ("loader variable", _launch(env={"LD_PRELOAD": "/x.so"}), "ForbiddenEnv", "env"),
    ("agent variable", _launch(env={"FIREPOOL_POD_MARKER": "x"}), "ForbiddenEnv", "env"),
    (
        "bad package digest",
        _launch(package={"digest": "md5:1", "url": "http://x"}),
        "ValidationError",
        "package.digest",
    ),
]


@pytest.mark.parametrize(("what", "body", "error", "field"), BAD_LAUNCHES,
                         ids=[c[0] for c in BAD_LAUNCHES])  # fmt: skip
def test_bad_launch_bodies_are_refused_naming_the_field(
    pod: Pod, what: str, body: bytes, error: str, field: str
) -> None:
    status, answer = pod.raw("POST", "/v1/attempts", body)
    assert (status, answer["error"], answer["field"]) == (422, error, field), (what, answer)
    assert not pod.loop.run(pod.client.health()).dirty  # nothing was admitted


@pytest.mark.parametrize(
    ("headers", "status", "error", "field"),
    [
        ({"Content-Length": "abc"}, 422, "ValidationError", "Content-Length"),
        ({"Content-Length": "-5"}, 422, "ValidationError", "Content-Length"),
        ({"Content-Length": str(64 * 1024 * 1024)}, 413, "PayloadTooLarge", "body"),
    ],
)
def test_bad_content_length_is_refused_naming_the_header(
    pod: Pod, headers: dict[str, str], status: int, error: str, field: str
) -> None:
    got, answer = pod.raw("POST", "/v1/attempts", b"", headers=headers)
    assert (got, answer["error"], answer["field"]) == (status, error, field)


def _exchange(pod: Pod, request: bytes) -> tuple[int, dict[str, Any]]:
    """One request written as given; the answer's status and JSON body (the agent closes)."""
    with socket.create_connection(pod.addr, timeout=10) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    status_line, _, rest = data.partition(b"\r\n")
    return int(status_line.split()[1]), json.loads(rest.partition(b"\r\n\r\n")[2])


def _head(pod: Pod, *lines: str, start: str) -> bytes:
    auth = f"Authorization: Bearer {pod.record.secret}"
    return "\r\n".join([start, "Host: agent", auth, *lines, "", ""]).encode()


HEALTH = "GET /v1/health HTTP/1.1"
BAD_HEADS: list[tuple[str, str, list[str], int, str]] = [
    ("two lengths", HEALTH, ["Content-Length: 2", "Content-Length: 3"], 422, "Content-Length"),
    # a request smuggling's classic: which of the two says where the body ends?
    ("length and chunks", HEALTH, ["Transfer-Encoding: chunked", "Content-Length: 3"], 422,
     "Content-Length"),
    ("a name with a space", HEALTH, ["Bad Name: x"], 422, "headers"),
    ("a folded header", HEALTH, ["X-A: 1", "  folded"], 422, "headers"),
    ("a control character", HEALTH, ["X-A: a\x01b"], 422, "headers"),
    ("no method", "@@ /v1/health HTTP/1.1", [], 422, "request line"),
    ("HTTP/2", "GET /v1/health HTTP/2.0", [], 505, "request line"),
    ("too many headers", HEALTH, [f"X-{i}: {i}" for i in range(101)], 431, "headers"),
    ("a header too long", HEALTH, ["X-A: " + "a" * 70_000], 431, "headers"),
]  # fmt: skip


@pytest.mark.parametrize(("what", "start", "lines", "status", "field"), BAD_HEADS,
                         ids=[c[0] for c in BAD_HEADS])  # fmt: skip
def test_bad_request_heads_are_refused_naming_what_was_wrong(
    pod: Pod, what: str, start: str, lines: list[str], status: int, field: str
) -> None:
    got, answer = _exchange(pod, _head(pod, *lines, start=start))
    assert (got, answer["error"], answer["field"]) == (status, "ValidationError", field), what


def test_a_connection_is_kept_alive_as_its_http_version_says(pod: Pod) -> None:
    """HTTP/1.1 keeps the connection for the next request unless told to close; HTTP/1.0
    closes it unless told to keep it."""
    for start, lines, kept in (
        (HEALTH, [], True),
        (HEALTH, ["Connection: close"], False),
        ("GET /v1/health HTTP/1.0", [], False),
        ("GET /v1/health HTTP/1.0", ["Connection: keep-alive"], True),
    ):
        with socket.create_connection(pod.addr, timeout=10) as sock:
            sock.sendall(_head(pod, *lines, start=start) * 2)  # two requests back to back
            sock.settimeout(2)
            data = b""
            with contextlib.suppress(TimeoutError):
                while chunk := sock.recv(65536):
                    data += chunk
        assert data.count(b" 200 OK\r\n") == (2 if kept else 1), (start, lines, data)


@pytest.mark.parametrize("auth", [None, "Bearer wrong-secret-wrong-secret", "Basic abc", ""])
def test_requests_without_the_pod_secret_are_refused_before_anything_else(
    pod: Pod, auth: str | None
) -> None:
    for method, path, body in (
        ("GET", "/v1/health", b""),
        ("POST", "/v1/attempts", _launch()),
        ("POST", "/v1/reset", b"{}"),
        ("GET", "/v1/attempts/api-1:0/logs?offset=abc", b""),
        ("PUT", "/v1/reset", b""),
    ):
        status, answer = pod.raw(method, path, body, auth=auth)
        assert (status, answer["error"], answer["field"]) == (401, "Unauthorized", "Authorization")


def test_bad_log_queries_and_unknown_attempts_name_the_field(pod: Pod) -> None:
    pod.loop.run(run_job(pod.client, "logs-1:0", ["echo", "hi"]))
    base = "/v1/attempts/logs-1:0/logs"
    for query, field in (
        ("offset=-1", "offset"),
        ("offset=abc", "offset"),
        ("stream=../../agent.json", "stream"),
        ("stream=stdout&follow=maybe", "follow"),
    ):
        status, answer = pod.raw("GET", f"{base}?{query}", auth="secret")
        assert (status, answer["error"], answer["field"]) == (422, "ValidationError", field)
    for wait in ("-1", "nan", "21", "soon"):  # a status's wait: seconds from 0 to 20
        status, answer = pod.raw("GET", f"/v1/attempts/logs-1:0?wait_s={wait}")
        assert (status, answer["error"], answer["field"]) == (422, "ValidationError", "wait_s")
    status, answer = pod.raw("GET", "/v1/attempts/other-1:0")
    assert (status, answer["error"], answer["field"]) == (404, "NotFound", "attempt")
    status, answer = pod.raw("GET", "/v1/attempts/other-1:0?wait_s=5")
    assert (status, answer["error"], answer["field"]) == (404, "NotFound", "attempt")
    status, answer = pod.raw("POST", "/v1/attempts/logs-1:0/stop", b'{"grace_s": -1}')
    assert (status, answer["error"], answer["field"]) == (422, "ValidationError", "grace_s")
    status, answer = pod.raw("POST", "/v1/attempts/logs-1:0/stop", b'{"signal": 9}')
    assert (status, answer["error"], answer["field"]) == (422, "ValidationError", "signal")
    for method, path in (("PUT", "/v1/reset"), ("DELETE", "/v1/attempts/logs-1:0"),
                         ("GET", "/v1/nope")):  # fmt: skip
        status, answer = pod.raw(method, path)
        assert (status, answer["error"]) == (404, "NotFound")
    assert pod.loop.run(pod.client.reset()).clean


def test_the_pod_still_works_after_all_that(pod: Pod) -> None:
    event, out = pod.loop.run(run_job(pod.client, "after-1:0", ["echo", "fine"]))
    assert event.exit_code == 0 and out.strip() == "fine"
    assert pod.loop.run(pod.client.reset()).clean
