"""`agent_http` against real sockets on 127.0.0.1: a peer that answers as the agent's HTTP
server does (keep-alive, or `Connection: close`), and peers that misbehave in the ways a
crashing or hung agent does. The client against the real agent runs in tests/agent."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import pytest

from firepool.backends.agent_client import AgentClient
from firepool.backends.agent_http import AgentConnections, AgentHTTPError
from firepool.model import UnavailableError

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Coroutine[Any, Any, None]]


def on_a_loop(test: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    @functools.wraps(test)
    def run() -> None:
        asyncio.run(test())

    return run


@asynccontextmanager
async def serving(handler: Handler) -> AsyncIterator[tuple[str, list[int]]]:
    """A TCP server on a free port; yields its URL and a list that counts its connections."""
    accepted: list[int] = []

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(1)
        try:
            await handler(reader, writer)
        finally:
            writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", accepted
    finally:
        server.close()


async def read_request(reader: asyncio.StreamReader) -> tuple[str, dict[str, str], bytes]:
    head = (await reader.readuntil(b"\r\n\r\n")).decode()
    line, *fields = head.split("\r\n")[:-2]
    headers = {k.lower(): v.strip() for k, v in (f.split(":", 1) for f in fields)}
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return line, headers, body


def answering_once(reply: bytes) -> Handler:
    """A peer that reads one request and writes `reply` (then the connection closes)."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(reply)
        await writer.drain()

    return handler


def answer(body: bytes, *, close: bool = False, status: str = "200 OK") -> bytes:
    extra = b"Connection: close\r\n" if close else b""
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n".encode()
        + extra
        + b"\r\n"
        + body
    )


async def echo_forever(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """As the agent: answer every request on the connection, echoing what it was sent."""
    while True:
        try:
            line, headers, body = await read_request(reader)
        except asyncio.IncompleteReadError:
            return
        echoed = f"{line}|{headers['authorization']}|{headers.get('content-type', '-')}|"
        writer.write(answer(echoed.encode() + body))
        await writer.drain()


@on_a_loop
async def test_requests_share_one_kept_alive_connection_and_say_who_asks() -> None:
    async with serving(echo_forever) as (url, accepted):
        calls = AgentConnections(url, b"Bearer s3cret")
        first = await calls.request("POST", "/v1/reset", b"{}", timeout=5)
        second = await calls.request("GET", "/v1/health", None, timeout=5)
        calls.close()
    assert first == (200, b"POST /v1/reset HTTP/1.1|Bearer s3cret|application/json|{}")
    assert second == (200, b"GET /v1/health HTTP/1.1|Bearer s3cret|-|")
    assert len(accepted) == 1


@on_a_loop
async def test_overlapping_requests_take_a_connection_each_and_keep_them() -> None:
    async with serving(echo_forever) as (url, accepted):
        calls = AgentConnections(url, b"Bearer x")
        answers = await asyncio.gather(
            *(calls.request("GET", f"/v1/attempts/{i}", None, timeout=5) for i in range(3))
        )
        await asyncio.gather(*(calls.request("GET", "/again", None, timeout=5) for _ in range(3)))
        calls.close()
    assert [a[1].split(b"|")[0] for a in answers] == [
        f"GET /v1/attempts/{i} HTTP/1.1".encode() for i in range(3)
    ]
    assert len(accepted) == 3  # the second round reused all three


@on_a_loop
async def test_an_agent_that_closes_after_answering_gets_a_new_connection_next_time() -> None:
    async with serving(answering_once(answer(b'{"ok": true}', close=True))) as (url, accepted):
        calls = AgentConnections(url, b"Bearer x")
        for _ in range(2):
            assert await calls.request("GET", "/v1/health", None, timeout=5) == (
                200,
                b'{"ok": true}',
            )
        calls.close()
    assert len(accepted) == 2


@on_a_loop
async def test_an_error_status_comes_back_with_its_body() -> None:
    refusal = answer(b'{"code": "conflict"}', status="409 Conflict")
    async with serving(answering_once(refusal)) as (url, _):
        calls = AgentConnections(url, b"Bearer x")
        assert await calls.request("POST", "/v1/attempts", b"{}", timeout=5) == (
            409,
            b'{"code": "conflict"}',
        )
        calls.close()


@on_a_loop
async def test_an_agent_that_dies_mid_request_is_an_error_not_an_answer() -> None:
    async def die(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)  # and closes without a word

    async with serving(die) as (url, _):
        calls = AgentConnections(url, b"Bearer x")
        with pytest.raises(AgentHTTPError, match="closed the connection"):
            await calls.request("POST", "/v1/reset", b"{}", timeout=5)


@on_a_loop
async def test_an_answer_that_is_not_http_is_an_error() -> None:
    async def babble(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"SSH-2.0-OpenSSH_9.2\r\n")
        await writer.drain()
        await asyncio.sleep(1)

    async with serving(babble) as (url, _):
        calls = AgentConnections(url, b"Bearer x")
        with pytest.raises(AgentHTTPError, match="not HTTP"):
            await calls.request("GET", "/v1/health", None, timeout=5)


@on_a_loop
async def test_a_hung_agent_times_out_and_its_connection_is_not_reused() -> None:
    hang = asyncio.Event()

    async def maybe_hang(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                await read_request(reader)
            except asyncio.IncompleteReadError:
                return
            if not hang.is_set():
                hang.set()
                await asyncio.sleep(30)  # this answer never comes in time
            writer.write(answer(b"late or fresh"))
            await writer.drain()

    async with serving(maybe_hang) as (url, accepted):
        calls = AgentConnections(url, b"Bearer x")
        with pytest.raises(TimeoutError):
            await calls.request("GET", "/v1/health", None, timeout=0.2)
        # A late answer on the old connection must never be taken for this request's.
        assert await calls.request("GET", "/v1/health", None, timeout=5) == (
            200,
            b"late or fresh",
        )
        calls.close()
    assert len(accepted) == 2


@on_a_loop
async def test_nothing_listening_is_an_os_error() -> None:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    calls = AgentConnections(f"http://127.0.0.1:{port}", b"Bearer x")
    with pytest.raises(OSError):
        await calls.request("GET", "/v1/health", None, timeout=5)


@pytest.mark.parametrize("url", ["https://127.0.0.1:1", "127.0.0.1:8080", "http://", ""])
def test_a_request_to_an_agent_url_that_is_not_plain_http_fails(url: str) -> None:
    # "" is a Kubernetes pod's URL before it has an address: its client is made, its calls
    # fail as an unreachable agent's do (the AgentClient says UnavailableError).
    calls = AgentConnections(url, b"Bearer x")
    with pytest.raises(AgentHTTPError, match="an agent URL is http://host:port"):
        asyncio.run(calls.request("GET", "/v1/health", None, timeout=5))


def test_an_agent_client_without_an_address_is_unavailable_not_broken() -> None:
    async def health() -> None:
        async with AgentClient("", "secret") as client:
            await client.health()

    with pytest.raises(UnavailableError, match="an agent URL is http://host:port"):
        asyncio.run(health())
