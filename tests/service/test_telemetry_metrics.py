"""`/metrics` after real jobs on a real embedded broker: the exposition text is the contract an
operator's Prometheus reads, so these tests parse it rather than peek at broker objects."""

from __future__ import annotations

import re

import httpx
from prometheus_client.parser import text_string_to_metric_families

from firepool.service.telemetry import HeldClock, held_counts
from firepool.testing.control import cpu_pool, gpu_pool
from firepool.testing.service import BrokerThread, run, settled

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(broker: BrokerThread) -> tuple[str, Samples]:
    text = httpx.get(f"{broker.url}/metrics", timeout=30).raise_for_status().text
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return text, samples


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sum of `name`'s samples whose labels include `labels` (0 when none)."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= set(ls))


def test_metrics_after_real_jobs(broker: BrokerThread) -> None:
    client = broker.client()
    ok = [run(client, command=["python", "-c", "pass"], lease_tag="m") for _ in range(2)]
    bad = run(client, command=["python", "-c", "raise SystemExit(3)"], lease_tag="m")
    assert [j["state"] for j in ok] == ["SUCCEEDED", "SUCCEEDED"]
    assert bad["error_class"] == "NonZeroExit"
    settled(broker, bad["pods"][0]["name"])  # an attempt's latencies are noted after its reset
    text, samples = scrape(broker)

    # per job: how each got its pod, how long it waited, how long it ran, how it ended
    paths = [j["pods"][0]["acquisition"] for j in [*ok, bad]]
    for path in set(paths):
        assert value(samples, "firepool_pod_acquisitions_total", pool="cpu", path=path) == (
            paths.count(path)
        )
    assert value(samples, "firepool_job_start_latency_seconds_count", pool="cpu") == 3
    assert value(samples, "firepool_job_start_latency_seconds_sum", pool="cpu") > 0
    assert value(samples, "firepool_job_run_seconds_count", pool="cpu") == 3
    finished = "firepool_jobs_finished_total"
    assert value(samples, finished, pool="cpu", state="SUCCEEDED", error_class="") == 2
    assert value(samples, finished, pool="cpu", state="FAILED", error_class="NonZeroExit") == 1
    assert value(samples, "firepool_pod_resets_total", pool="cpu", outcome="clean") == 3
    assert value(samples, "firepool_pod_resets_total", outcome="unclean") == 0

    # broker: its decisions and commits
    assert value(samples, "firepool_dispatch_decision_seconds_count") >= 3
    assert value(samples, "firepool_dispatch_commit_seconds_count") == 3
    assert value(samples, "firepool_pod_actions_total", pool="cpu", action="create") >= 1

    # per pool: pods, knobs, queue, budget
    assert value(samples, "firepool_pool_pods", pool="cpu") >= 1
    assert value(samples, "firepool_pool_pods_limit", pool="cpu", knob="floor") == 1
    assert value(samples, "firepool_pool_pods_limit", pool="cpu", knob="idle_cap") == 1
    assert value(samples, "firepool_pool_pods_limit", pool="cpu", knob="ceiling") == 4
    assert value(samples, "firepool_queue_depth", pool="cpu") == 0
    assert value(samples, "firepool_budget_limit_units", resource="cpu") == 8
    assert value(samples, "firepool_budget_used_units", resource="cpu") >= 1
    assert value(samples, "firepool_held_gpu_seconds_total", pool="cpu") == 0

    # bounded labels: no job id, no caller-chosen name appears anywhere in the text
    for job in [*ok, bad]:
        assert job["id"] not in text
    assert 'lease_tag="' not in text and '"m"' not in text

    # held pod-seconds only grow, and grow while pods are held
    before = value(samples, "firepool_held_pod_seconds_total", pool="cpu")
    last = run(client, command=["python", "-c", "pass"], lease_tag="m")
    settled(broker, last["pods"][0]["name"])
    _, later = scrape(broker)
    assert value(later, "firepool_held_pod_seconds_total", pool="cpu") > before
    assert value(later, "firepool_job_start_latency_seconds_count", pool="cpu") == 4


def test_metric_names_follow_prometheus_conventions(broker: BrokerThread) -> None:
    text, _ = scrape(broker)
    names = set(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    for name, kind in names:
        assert name.startswith("firepool_"), name
        assert re.fullmatch(r"[a-z_]+", name), name
        if kind == "counter":
            assert name.endswith("_total") and not name.endswith("_total_total"), name
    kinds = dict(names)
    assert kinds["firepool_held_pod_seconds_total"] == "counter"
    assert kinds["firepool_job_start_latency_seconds"] == "histogram"
    assert kinds["firepool_pool_pods"] == "gauge"


def test_held_clock_integrates_the_count_it_last_saw() -> None:
    clock = HeldClock(now=100.0)
    assert clock.accrue("p", 100.0, pods=2, gpus=1) == (0.0, 0.0)
    assert clock.accrue("p", 110.0, pods=5, gpus=3) == (20.0, 10.0)  # 2 pods for 10 s
    assert clock.accrue("p", 111.0, pods=0, gpus=0) == (25.0, 13.0)  # then 5 for 1 s
    assert clock.accrue("p", 111.0, pods=0, gpus=0) == (25.0, 13.0)  # never decreases


def test_a_gpu_group_counts_its_gpus_once() -> None:
    gpu = gpu_pool("g", accelerator="H100", standbys_per_active=1)
    assert held_counts(gpu, ["a", "a", "b", None]) == (4, 3)  # groups a, b and a lone pod
    wide = gpu_pool("w", accelerator="H100", accelerators_per_pod=4)
    assert held_counts(wide, ["x", "y"]) == (2, 8)
    assert held_counts(cpu_pool("c"), [None, None]) == (2, 0)
