"""What every route needs, built once by `create_app` and reached through dependencies."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Annotated, Protocol

from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool

from firepool.api.auth import TokenAuthenticator
from firepool.api.hooks import (
    JobSignals,
    PodAccess,
    PoolAdmin,
    ProgressReports,
    ReadModels,
)
from firepool.api.metrics import ApiMetrics
from firepool.api.waiters import JobWaiters
from firepool.model import ForbiddenError, PoolSpec, Principal, TokenRole
from firepool.packages import PackageStore
from firepool.store import AsyncSubmit, JobStore, Submitted
from firepool.store.logs import LogChunk


class LogSource(Protocol):
    """What the API needs of log storage: byte ranges of an attempt's output."""

    def read(self, job_id: str, retry: int, *, offset: int, limit: int) -> LogChunk: ...


@dataclass
class ApiContext:
    """The parts routes use. The broker's hooks come as one field per concern (usually one
    object behind all five): a route reaches only the small Protocol it needs, so a test or
    another face can stand in for just that part."""

    store: JobStore
    packages: PackageStore
    pools: Callable[[], Iterable[PoolSpec]]
    signals: JobSignals
    pod_access: PodAccess
    views: ReadModels
    pool_admin: PoolAdmin
    progress: ProgressReports
    logs: LogSource
    auth: TokenAuthenticator
    metrics: ApiMetrics
    clock: Callable[[], float]
    #: The store's event-loop submit, when it has one (looked up once: a runtime Protocol
    #: check per request costs more than the rest of the route's own work).
    submit_async: Callable[..., Awaitable[Submitted]] | None = None
    #: Requests parked by `GET /v1/jobs/{id}?wait_s=N`, released by `signals.job_finished`.
    waiters: JobWaiters = field(default_factory=JobWaiters)

    def __post_init__(self) -> None:
        if self.submit_async is None and isinstance(self.store, AsyncSubmit):
            self.submit_async = self.store.submit_async
        self.signals.subscribe_finished(self.waiters.job_finished)

    def pool(self, name: str) -> PoolSpec | None:
        for spec in self.pools():
            if spec.name == name:
                return spec
        return None


async def get_context(request: Request) -> ApiContext:
    """Async on purpose: FastAPI runs a sync dependency on a worker thread, per request."""
    context: ApiContext = request.app.state.firepool
    return context


Context = Annotated[ApiContext, Depends(get_context)]


@dataclass(frozen=True, slots=True)
class Session:
    """An authenticated request's view: the API context, the caller it acts for and the
    token's role."""

    context: ApiContext
    caller: str
    role: TokenRole = TokenRole.CALLER

    @property
    def admin(self) -> bool:
        return self.role is TokenRole.ADMIN


async def authenticate(request: Request) -> Session:
    """The one dependency of authenticated routes (FastAPI's dependency solving costs more
    per level than the token check itself, so this stays flat). A cached token is checked on
    the event loop; only a cache miss goes to the store, on a worker thread."""
    context: ApiContext = request.app.state.firepool
    header = request.headers.get("authorization")
    hit = context.auth.cached(header)
    if hit is not None:
        context.metrics.auth.labels("hit").inc()
        return Session(context, hit.caller, hit.role)
    context.metrics.auth.labels("miss").inc()
    found: Principal = await run_in_threadpool(context.auth.principal, header)
    return Session(context, found.caller, found.role)


Authed = Annotated[Session, Depends(authenticate)]


async def require_admin(session: Authed) -> Session:
    """The dependency of admin routes (changing pools): a caller token gets a typed 403
    before the route body runs, so nothing is changed."""
    if not session.admin:
        raise ForbiddenError(
            f"this operation needs an admin token; {session.caller!r} holds a caller token",
            field="Authorization",
        )
    return session


#: An authenticated admin request: `async def route(session: AdminSession)`.
AdminSession = Annotated[Session, Depends(require_admin)]


def bearer(request: Request) -> str:
    """The request's bearer token, or "" (for routes that authenticate another way)."""
    header = request.headers.get("authorization", "")
    return header[7:].strip() if header.lower().startswith("bearer ") else ""

#: The bearer scheme as published in the OpenAPI document (`create_app` installs it).
SECURITY_SCHEME = {
    "bearer": {
        "type": "http",
        "scheme": "bearer",
        "description": "A caller token: `Authorization: Bearer fp_...`",
    }
}
