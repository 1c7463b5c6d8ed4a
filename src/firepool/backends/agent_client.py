"""The broker's client for one pod agent (async, httpx).

Every method maps the agent's typed error body back to the same `FirepoolError` subclass the
agent raised (`ConflictError` for a stale attempt id or a dirty pod, `LaunchFailedError`,
`DependencyInstallFailedError`, `BadPackageError`...), and a connection failure to
`UnavailableError`, so the dispatcher can branch on types, never on strings.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel

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


class AgentClient:
    def __init__(
        self,
        base_url: str,
        secret: str,
        *,
        timeout: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {secret}"},
            timeout=timeout,
            transport=transport,
            # Plain http:// (local pods): no TLS, so no CA bundle to load for each client.
            verify=not self.base_url.startswith("http://"),
        )

    async def __aenter__(self) -> AgentClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _call(
        self, method: str, path: str, model: type[M], body: Any = None, timeout: float | None = None
    ) -> M:
        kwargs: dict[str, Any] = {}
        if body is not None:
            kwargs["content"] = body.model_dump_json() if isinstance(body, BaseModel) else body
            kwargs["headers"] = {"Content-Type": "application/json"}
        if timeout is not None:
            kwargs["timeout"] = timeout
        try:
            resp = await self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise UnavailableError(f"agent at {self.base_url}: {exc!r}") from None
        if resp.status_code >= 400:
            try:
                payload: Any = resp.json()
            except ValueError:
                payload = resp.text
            raise error_from_body(payload, resp.status_code)
        return model.model_validate_json(resp.content)

    async def health(self) -> Health:
        return await self._call("GET", "/v1/health", Health)

    async def launch(self, request: LaunchRequest) -> LaunchResponse:
        """Start an attempt; returns once its process runs (after fetch/unpack/install)."""
        return await self._call(
            "POST", "/v1/attempts", LaunchResponse, request, timeout=LAUNCH_TIMEOUT_S
        )

    async def status(self, attempt: str) -> AttemptStatus:
        return await self._call("GET", f"/v1/attempts/{attempt}", AttemptStatus)

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
        params = {"stream": stream, "offset": str(offset), "follow": "1" if follow else "0"}
        try:
            async with self._http.stream(
                "GET", f"/v1/attempts/{attempt}/logs", params=params, timeout=None
            ) as resp:
                if resp.status_code >= 400:
                    await resp.aread()
                    raise error_from_body(resp.json(), resp.status_code)
                async for chunk in resp.aiter_bytes():
                    yield chunk
        except httpx.TransportError as exc:
            raise UnavailableError(f"agent at {self.base_url}: {exc!r}") from None
