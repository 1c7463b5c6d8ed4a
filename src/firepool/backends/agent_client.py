"""The broker's client for one pod agent (async).

Every method maps the agent's typed error body back to the same `FirepoolError` subclass the
agent raised (`ConflictError` for a stale attempt id or a dirty pod, `LaunchFailedError`,
`DependencyInstallFailedError`, `BadPackageError`...), and a connection failure to
`UnavailableError`, so the dispatcher can branch on types, never on strings.

Calls with a whole answer (launch and reset above all: two per job, on the broker's event
loop, where every millisecond is a job-per-second ceiling) go through `agent_http`'s
keep-alive connections; the log stream, long-lived and rare, through httpcore (the
connection pool httpx itself sends through).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any, TypeVar
from urllib.parse import urlencode

import httpcore
from pydantic import BaseModel

from firepool.backends.agent_http import AgentConnections, AgentHTTPError
from firepool.model import UnavailableError
from firepool.protocol import (
    AttemptStatus,
    Health,
    LaunchRequest,
    LaunchResponse,
    LogAck,
    LogAckResult,
    ResetRequest,
    ResetResult,
    StopRequest,
    error_from_body,
)

M = TypeVar("M", bound=BaseModel)
#: Log streams of an attempt ("install.log" exists when requirements were installed).
LOG_STREAMS = ("stdout", "stderr", "install.log")

#: Launch may fetch a package and install requirements before it answers.
LAUNCH_TIMEOUT_S = 1900.0

#: What a broken connection, a refused one or a timeout raises in httpcore.
_TRANSPORT_ERRORS = (
    httpcore.NetworkError,
    httpcore.TimeoutException,
    httpcore.ProtocolError,
    httpcore.UnsupportedProtocol,
    OSError,
)
#: ... and in `agent_http` (its ConnectionError is an OSError; a timeout is TimeoutError).
_CALL_ERRORS = (AgentHTTPError, TimeoutError, OSError)


class AgentClient:
    def __init__(self, base_url: str, secret: str, *, timeout: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._timeout = timeout
        self._auth = (b"Authorization", f"Bearer {secret}".encode())
        self._calls = AgentConnections(self.base_url, self._auth[1])
        self._pool = httpcore.AsyncConnectionPool()

    async def __aenter__(self) -> AgentClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        self._calls.close()
        await self._pool.aclose()

    def _request(
        self, method: str, path: str, body: bytes | None, timeout: float | None
    ) -> tuple[bytes, str, list[tuple[bytes, bytes]], dict[str, Any]]:
        headers = [self._auth]
        if body is not None:
            headers.append((b"Content-Type", b"application/json"))
        limit = self._timeout if timeout is None else timeout
        timeouts = {"connect": limit, "read": limit, "write": limit, "pool": limit}
        return method.encode(), self.base_url + path, headers, {"timeout": timeouts}

    async def _call(
        self, method: str, path: str, model: type[M], body: Any = None, timeout: float | None = None
    ) -> M:
        content = body.model_dump_json().encode() if isinstance(body, BaseModel) else body
        limit = self._timeout if timeout is None else timeout
        try:
            status, answer = await self._calls.request(method, path, content, limit)
        except _CALL_ERRORS as exc:
            raise UnavailableError(f"agent at {self.base_url}: {exc!r}") from None
        if status >= 400:
            raise _error(answer, status)
        return model.model_validate_json(answer)

    async def health(self) -> Health:
        return await self._call("GET", "/v1/health", Health)

    async def launch(self, request: LaunchRequest) -> LaunchResponse:
        """Start an attempt; returns once its process runs (after fetch/unpack/install)."""
        return await self._call(
            "POST", "/v1/attempts", LaunchResponse, request, timeout=LAUNCH_TIMEOUT_S
        )

    async def status(self, attempt: str) -> AttemptStatus:
        return await self._call("GET", f"/v1/attempts/{attempt}", AttemptStatus)

    async def wait_status(self, attempt: str, wait_s: float) -> AttemptStatus:
        """The status once the attempt exited, or after `wait_s` s (at most the agent's
        `MAX_WAIT_S`) if it still runs: one exchange for an exit, on a kept connection."""
        return await self._call(
            "GET", f"/v1/attempts/{attempt}?wait_s={wait_s:g}", AttemptStatus,
            timeout=wait_s + self._timeout,
        )  # fmt: skip

    async def stop(self, attempt: str, grace_s: float = 10.0, *, kill: bool = False
                   ) -> AttemptStatus:
        """SIGTERM, wait `grace_s`, SIGKILL; returns after the attempt's leader exited.
        `kill` is fault injection: SIGKILL at once."""
        return await self._call(
            "POST",
            f"/v1/attempts/{attempt}/stop",
            AttemptStatus,
            StopRequest(grace_s=grace_s, kill=kill),
            timeout=grace_s + 30.0,
        )

    async def reset(
        self, *, await_logs_s: float = 0.0, logs: LogAck | None = None
    ) -> ResetResult:
        """Verified reset; `clean=False` means the pod must be deleted, never reused. `logs`
        acknowledges the exited attempt's output the broker stored; otherwise the agent keeps
        it up to `await_logs_s` for a separate acknowledgement."""
        if not await_logs_s and logs is None:
            return await self._call("POST", "/v1/reset", ResetResult, b"{}", timeout=60.0)
        return await self._call(
            "POST",
            "/v1/reset",
            ResetResult,
            ResetRequest(await_logs_s=await_logs_s, logs=logs),
            timeout=60.0 + await_logs_s,
        )

    async def ack_logs(self, attempt: str, ack: LogAck) -> LogAckResult:
        """The broker stored the attempt's output up to these offsets."""
        return await self._call("POST", f"/v1/attempts/{attempt}/logs/ack", LogAckResult, ack)

    async def logs(
        self, attempt: str, stream: str = "stdout", *, offset: int = 0, follow: bool = False
    ) -> AsyncIterator[bytes]:
        """Yield the log from `offset`; with `follow`, until the attempt exits."""
        query = urlencode({"stream": stream, "offset": offset, "follow": int(follow)})
        verb, url, headers, extensions = self._request(
            "GET", f"/v1/attempts/{attempt}/logs?{query}", None, None
        )
        extensions["timeout"]["read"] = None  # a followed stream is quiet while the job is
        try:
            async with self._pool.stream(
                verb, url, headers=headers, extensions=extensions
            ) as resp:
                if resp.status >= 400:
                    raise _error(await resp.aread(), resp.status)
                async for chunk in resp.aiter_stream():
                    yield chunk
        except _TRANSPORT_ERRORS as exc:
            raise UnavailableError(f"agent at {self.base_url}: {exc!r}") from None


def _error(content: bytes, status: int) -> Exception:
    try:
        payload: Any = json.loads(content)
    except ValueError:
        payload = content.decode(errors="replace")
    return error_from_body(payload, status)
