"""Keep-alive HTTP/1.1 exchanges with one pod agent, on asyncio's transports and httptools'
parser: the broker's launch and reset calls, two per job, on its event loop.

Why not httpcore (which `AgentClient.logs` still streams through): for a small request and
its small answer, httpcore's connection pool, anyio streams and pure-Python h11 state machine
took about a quarter of the broker's CPU under `bench throughput` (py-spy, GIL samples),
as much as the whole API serving the callers. What is left to write by hand is little, and
the agent is ours: one request at a time per connection, bodies with a Content-Length,
connections kept while the agent keeps them. The response is parsed by httptools (llhttp,
the parser uvicorn serves with); the request is a few formatted lines.

Nothing is retried: a request that fails on a connection the agent closed meanwhile raises,
as httpcore's did, and the caller (the broker) decides what a lost call means.
"""

from __future__ import annotations

import asyncio
from typing import cast
from urllib.parse import urlsplit

import httptools

#: Idle connections kept per agent: calls to one pod overlap only briefly (a status poll
#: beside a launch), so a few cover every burst without holding descriptors for nothing.
MAX_IDLE = 4


class AgentHTTPError(ConnectionError):
    """The agent's connection failed, closed before an answer, or answered what is not HTTP."""


class _Connection(asyncio.Protocol):
    """One connection to the agent, carrying one exchange at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self._answer: asyncio.Future[tuple[int, bytes]] | None = None
        self._body: list[bytes] = []

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(AgentHTTPError(f"the agent's answer is not HTTP: {exc}"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(AgentHTTPError(f"the agent closed the connection: {exc or 'end of stream'}"))

    # httptools callbacks
    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        if not self.parser.should_keep_alive():
            self.close()
        if self._answer is not None and not self._answer.done():
            self._answer.set_result((self.parser.get_status_code(), b"".join(self._body)))

    def _fail(self, exc: Exception) -> None:
        if self._answer is not None and not self._answer.done():
            self._answer.set_exception(exc)

    async def exchange(self, request: bytes) -> tuple[int, bytes]:
        assert self.transport is not None
        self._answer = asyncio.get_running_loop().create_future()
        self._body = []
        self.transport.write(request)
        return await self._answer

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class AgentConnections:
    """Exchanges with the agent at `base_url` over kept-alive connections; `authorization`
    is the Authorization header's value."""

    def __init__(self, base_url: str, authorization: bytes) -> None:
        parts = urlsplit(base_url)
        # Not refused here: a pod may not have its address yet (a Kubernetes pod before it
        # is scheduled has the URL ""); each request fails until its client is made again.
        self._unusable = (
            None
            if parts.scheme == "http" and parts.hostname
            else f"an agent URL is http://host:port, not {base_url!r}"
        )
        self.host, self.port = parts.hostname or "", parts.port or 80
        self._head = f"Host: {parts.netloc}\r\nAuthorization: ".encode() + authorization + b"\r\n"
        self._idle: list[_Connection] = []
        self._closed = False

    async def request(
        self, method: str, target: str, body: bytes | None, timeout: float
    ) -> tuple[int, bytes]:
        """(status, body) of one exchange; `timeout` bounds connecting and answering both.
        Raises AgentHTTPError, TimeoutError or OSError."""
        if self._unusable is not None:
            raise AgentHTTPError(self._unusable)
        lines = [f"{method} {target} HTTP/1.1\r\n".encode(), self._head]
        if body is not None:
            lines.append(b"Content-Type: application/json\r\n")
        lines.append(b"Content-Length: %d\r\n\r\n" % len(body or b""))
        if body:
            lines.append(body)
        request = b"".join(lines)
        async with asyncio.timeout(timeout):
            connection = self._take() or await self._connect()
            try:
                answer = await connection.exchange(request)
            except BaseException:  # cancelled or failed mid-exchange: its state is unknown
                connection.close()
                raise
        self._give_back(connection)
        return answer

    def _take(self) -> _Connection | None:
        while self._idle:
            connection = self._idle.pop()
            if not connection.closed:
                return connection
        return None

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        _, connection = await loop.create_connection(_Connection, self.host, self.port)
        return connection

    def _give_back(self, connection: _Connection) -> None:
        if self._closed or connection.closed or len(self._idle) >= MAX_IDLE:
            connection.close()
        else:
            self._idle.append(connection)

    def close(self) -> None:
        self._closed = True
        while self._idle:
            self._idle.pop().close()
