"""`render`: the same samples as prometheus_client's own `generate_latest` (read back by its
parser), minus the `_created` series, with label values escaped."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from firepool.api.metrics import render

Sample = tuple[str, tuple[tuple[str, str], ...], float]


def samples(text: bytes) -> set[Sample]:
    return {
        (s.name, tuple(sorted(s.labels.items())), s.value)
        for family in text_string_to_metric_families(text.decode())
        for s in family.samples
        if not s.name.endswith("_created")
    }


def test_render_matches_the_library_without_created_series() -> None:
    registry = CollectorRegistry()
    requests = Counter("demo_requests", "Requests.\nSecond line \\ here.", ["route", "status"],
                       registry=registry)  # fmt: skip
    latency = Histogram("demo_seconds", "Latency.", ["route"], buckets=(0.01, 1),
                        registry=registry)  # fmt: skip
    depth = Gauge("demo_depth", "Depth.", registry=registry)
    requests.labels('/v1/"odd"\\path\n', "200").inc(3)
    requests.labels("/v1/jobs", "201").inc()
    latency.labels("/v1/jobs").observe(0.5)
    latency.labels("/v1/jobs").observe(5)
    depth.set(-2.5)
    ours = render(registry)
    assert samples(ours) == samples(generate_latest(registry))
    assert b"_created" not in ours and b'le="+Inf"' in ours
    assert b"# TYPE demo_requests_total counter" in ours
    assert b'route="/v1/\\"odd\\"\\\\path\\n"' in ours  # quote, backslash, newline escaped
    assert b"# HELP demo_requests_total Requests.\\nSecond line \\\\ here." in ours
