"""`create_app`: the REST API over a store, a package store and a pool catalog.

Everything the API touches is passed in, so the service, the simulator's harness and the
tests build the same app over different parts: a dispatcher attaches through `hooks`, the
service supplies its log source through `logs`, and `pools` may be a callable so a reloaded
catalog shows up without rebuilding the app.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from fastapi import FastAPI

from firepool.api import errors
from firepool.api.auth import TokenAuthenticator
from firepool.api.context import SECURITY_SCHEME, ApiContext, LogSource
from firepool.api.hooks import BrokerHooks, NoHooks
from firepool.api.limits import DEFAULT_JSON_BYTES, BodyLimit
from firepool.api.metrics import ApiMetrics, MetricsMiddleware
from firepool.api.routes import internal, jobs, packages, pods, system
from firepool.api.routes import pools as pool_routes
from firepool.dashboard import routes as dashboard
from firepool.model import PoolSpec
from firepool.packages import PackageStore
from firepool.store import JobStore
from firepool.store.logs import RankLogStorage

API_VERSION = "1"


def create_app(
    store: JobStore,
    packages_store: PackageStore,
    pools: Iterable[PoolSpec] | Callable[[], Iterable[PoolSpec]],
    *,
    hooks: BrokerHooks | None = None,
    logs: LogSource | None = None,
    data_dir: Path | None = None,
    json_body_bytes: int = DEFAULT_JSON_BYTES,
    auth_ttl: float = 60.0,
    clock: Callable[[], float] = time.time,
) -> FastAPI:
    """Build the app. `logs` defaults to files under `<data_dir>/logs` (then `data_dir` is
    required); `clock` stamps submission and cancel times."""
    if logs is None:
        if data_dir is None:
            raise ValueError("create_app needs a log source or a data directory")
        logs = RankLogStorage(Path(data_dir) / "logs")
    if callable(pools):
        catalog = pools
    else:
        fixed = tuple(pools)

        def catalog() -> Iterable[PoolSpec]:
            return fixed

    metrics = ApiMetrics()
    hooks = hooks or NoHooks()
    metrics.attach(hooks.pool_stats, hooks.metric_collectors())
    app = FastAPI(
        title="firepool",
        version=API_VERSION,
        description="A broker for warm GPU and CPU capacity. Every error body is "
        '`{"error": <stable class>, "message": ..., "field": ...}`.',
        # The broker publishes its own Prometheus metrics; FastAPI's built-in OpenTelemetry
        # hooks would only add a provider check to every request.
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    # One broker behind every hook; each route sees only the small Protocol it needs.
    app.state.firepool = ApiContext(
        store=store,
        packages=packages_store,
        pools=catalog,
        signals=hooks,
        pod_access=hooks,
        views=hooks,
        pool_admin=hooks,
        progress=hooks,
        logs=logs,
        auth=TokenAuthenticator(store, ttl=auth_ttl),
        metrics=metrics,
        clock=clock,
    )
    errors.install(app)
    app.include_router(jobs.router)
    app.include_router(packages.router)
    app.include_router(system.router)
    app.include_router(pool_routes.router)
    app.include_router(pods.router)
    app.include_router(internal.router)
    app.include_router(dashboard.router)
    app.add_middleware(BodyLimit, json_bytes=json_body_bytes, upload_bytes=packages_store.max_bytes)
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    _publish_security(app)
    return app


def _publish_security(app: FastAPI) -> None:
    """Add the bearer scheme to the generated document (routes reference it by name)."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = generate()
            document.setdefault("components", {})["securitySchemes"] = SECURITY_SCHEME
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
