"""What every route needs, built once by `create_app` and reached through dependencies."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from firepool.api.auth import TokenAuthenticator
from firepool.api.hooks import BrokerHooks
from firepool.api.logs import LogSource
from firepool.api.metrics import ApiMetrics
from firepool.model import PoolSpec, UnauthorizedError
from firepool.packages import PackageStore
from firepool.store import JobStore


@dataclass
class ApiContext:
    store: JobStore
    packages: PackageStore
    pools: Callable[[], Iterable[PoolSpec]]
    hooks: BrokerHooks
    logs: LogSource
    auth: TokenAuthenticator
    metrics: ApiMetrics
    clock: Callable[[], float]

    def pool(self, name: str) -> PoolSpec | None:
        for spec in self.pools():
            if spec.name == name:
                return spec
        return None


def get_context(request: Request) -> ApiContext:
    context: ApiContext = request.app.state.firepool
    return context


Context = Annotated[ApiContext, Depends(get_context)]

# Declares the scheme in the OpenAPI document; the check itself is ours, so that a missing
# token gets our 401 body rather than the framework's 403.
_bearer = HTTPBearer(auto_error=False, description="A caller token: `Authorization: Bearer fp_...`")


async def get_caller(
    context: Context,
    request: Request,
    _credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> str:
    header = request.headers.get("authorization")
    hit = context.auth.cached(header)
    if hit is not None and hit[1] is not None:
        context.metrics.auth.labels("hit").inc()
        return hit[1]
    context.metrics.auth.labels("miss").inc()
    caller: str = await run_in_threadpool(context.auth.lookup, header)
    if not caller:
        raise UnauthorizedError("unknown token", field="Authorization")
    return caller


Caller = Annotated[str, Depends(get_caller)]
