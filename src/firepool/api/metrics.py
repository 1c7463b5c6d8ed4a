"""Prometheus metrics for the API, in a registry of the app's own (several apps in one
process, as in tests, never collide), served at `/metrics`."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class ApiMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "firepool_http_requests",
            "HTTP requests by route template and status.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "firepool_http_request_seconds",
            "HTTP request latency by route template.",
            ["route"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10),
            registry=self.registry,
        )
        self.jobs_submitted = Counter(
            "firepool_jobs_submitted", "Jobs created through the API.", registry=self.registry
        )
        self.submit_replays = Counter(
            "firepool_job_submit_replays",
            "Submissions answered from an earlier request_id.",
            registry=self.registry,
        )
        self.packages_stored = Counter(
            "firepool_packages_stored",
            "Packages uploaded, by whether the blob was new.",
            ["new"],
            registry=self.registry,
        )
        self.auth = Counter(
            "firepool_auth_lookups",
            "Token validations by outcome of the cache.",
            ["cache"],
            registry=self.registry,
        )


class MetricsMiddleware:
    def __init__(self, app: ASGIApp, *, metrics: ApiMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        began = time.perf_counter()
        status = 500

        async def watching_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, watching_send)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", "unmatched")
            self.metrics.requests.labels(scope["method"], template, str(status)).inc()
            self.metrics.latency.labels(template).observe(time.perf_counter() - began)
