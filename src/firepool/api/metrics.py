"""Prometheus metrics for the API, in a registry of the app's own (several apps in one
process, as in tests, never collide), served at `/metrics`.

Besides the API's own counters the registry holds the broker's (registered from
`ReadModels.metric_collectors`) and `PoolCollector`, which reads the pools' gauges from
`ReadModels.pool_stats` at scrape time: a gauge kept up to date at every pod event would put
work on the job path for a figure read once every scrape interval.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from firepool.model import PoolStats


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

    def attach(self, stats: Callable[[], list[PoolStats]], collectors: list[Collector]) -> None:
        """Serve a broker's figures too: its pools' gauges and its counters/histograms."""
        self.registry.register(PoolCollector(stats))
        for collector in collectors:
            self.registry.register(collector)


class PoolCollector(Collector):
    """Per-pool gauges and held-capacity counters, computed by the broker when scraped."""

    def __init__(self, stats: Callable[[], list[PoolStats]]) -> None:
        self.stats = stats

    def describe(self) -> list[Metric]:
        return []  # families are known only at collect time; skip the registry's dry run

    def collect(self) -> Iterator[Metric]:
        pods = GaugeMetricFamily(
            "firepool_pool_pods", "Pods by role and state.", labels=["pool", "role", "state"]
        )
        knobs = GaugeMetricFamily(
            "firepool_pool_pods_limit",
            "The pool's scaling knobs in pods: floor, idle cap and ceiling.",
            labels=["pool", "knob"],
        )
        queued = GaugeMetricFamily(
            "firepool_queue_depth", "Jobs queued for the pool.", labels=["pool"]
        )
        pod_s = CounterMetricFamily(
            "firepool_held_pod_seconds",
            "Pod-seconds held (every pod from creation to deletion).",
            labels=["pool"],
        )
        gpu_s = CounterMetricFamily(
            "firepool_held_gpu_seconds",
            "GPU-seconds held (an active pod and its standbys count once).",
            labels=["pool"],
        )
        used = GaugeMetricFamily(
            "firepool_budget_used_units",
            "Budget units reserved, per accelerator model (cpu: cores).",
            labels=["resource"],
        )
        limit = GaugeMetricFamily(
            "firepool_budget_limit_units",
            "Budget limit per accelerator model (absent when unlimited).",
            labels=["resource"],
        )
        resources: set[str] = set()
        for pool in self.stats():
            name = pool.pool
            for (role, state), count in sorted(pool.pods.items()):
                pods.add_metric([name, role, state], count)
            knobs.add_metric([name, "floor"], pool.floor)
            knobs.add_metric([name, "idle_cap"], pool.idle_cap)
            knobs.add_metric([name, "ceiling"], pool.ceiling)
            queued.add_metric([name], pool.queued)
            pod_s.add_metric([name], pool.held_pod_seconds)
            gpu_s.add_metric([name], pool.held_gpu_seconds)
            if pool.budget_resource not in resources:
                resources.add(pool.budget_resource)
                used.add_metric([pool.budget_resource], pool.budget_used)
                if pool.budget_limit is not None:
                    limit.add_metric([pool.budget_resource], pool.budget_limit)
        yield from (pods, knobs, queued, pod_s, gpu_s, used, limit)


def render(registry: CollectorRegistry) -> bytes:
    """The registry in the Prometheus text format (0.0.4), as `generate_latest` writes it but
    without the `_created` series and in about half the time.

    Why not `generate_latest`: a scrape renders some 200-300 samples, and the library validates
    and escapes every metric and label name of every sample on every scrape (half its time),
    while ours are fixed at registration. Here a sample's name-and-labels prefix is formatted
    once and cached; label values are escaped as the format says. `_created` (each series'
    creation time) is left out: in this format Prometheus only stores it as one more plain
    series (creation times mean something in OpenMetrics only), and it is a third of the
    counter and histogram lines.
    """
    out: list[str] = []
    for metric in registry.collect():
        name, kind = metric.name, metric.type
        if kind == "counter":
            name += "_total"
        elif kind == "unknown":
            kind = "untyped"
        doc = metric.documentation.replace("\\", "\\\\").replace("\n", "\\n")
        out.append(f"# HELP {name} {doc}\n# TYPE {name} {kind}\n")
        for sample in metric.samples:
            if sample.name.endswith("_created"):
                continue
            labels = tuple(sorted(sample.labels.items()))
            out.append(f"{_prefix(sample.name, labels)} {_number(sample.value)}\n")
    return "".join(out).encode()


@functools.lru_cache(maxsize=8192)
def _prefix(name: str, labels: tuple[tuple[str, str], ...]) -> str:
    if not labels:
        return name
    pairs = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
    return f"{name}{{{pairs}}}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    if value == math.inf:
        return "+Inf"
    if value == -math.inf:
        return "-Inf"
    if value != value:
        return "NaN"
    return repr(float(value))


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
