"""The throughput benchmark runs end to end on real local pods (tiny sizes) and its JSON is
self-consistent: the callers' count matches the store's, percentiles are ordered, the CPU per
job follows from the totals. No figure is compared with a target (the machine is shared)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from firepool.bench import throughput


def test_throughput_benchmark_counts_what_the_store_shows(tmp_path: Path) -> None:
    out = tmp_path / "throughput.json"
    argv = ["--pods", "2", "--callers", "3", "--seconds", "4", "--warmup", "1"]
    argv += ["--scrape-every", "0.5"]  # a Prometheus-like scraper rides along
    argv += ["--flood-phase", "1"]  # and a flooding one: 1 s phases from 1 s in
    assert throughput.main([*argv, "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert (r["pods"], r["callers"], r["identities"], r["store"]) == (2, 3, 2, "sqlite")
    assert r["errors"] == 0 and r["jobs"] > 0
    # Every job the callers counted in the window is a terminal row of the store, and no other.
    assert r["store_agrees"] is True
    assert r["jobs"] == r["store_jobs_in_window"] == r["succeeded"]
    assert r["warm_acquisitions"] == r["jobs"]  # floor == ceiling: nothing was created late
    assert math.isclose(r["jobs_per_s"], r["jobs"] / r["window_s"], rel_tol=1e-9)
    assert 0 < r["warm_start_ms_p50"] <= r["warm_start_ms_p99"]
    assert 0 < r["latency_ms_p50"] <= r["latency_ms_p99"]
    # A job starts before it ends, and is committed RUNNING before its process starts.
    assert r["warm_start_ms_p50"] <= r["latency_ms_p50"]
    assert r["dispatch_ms_p50"] <= r["warm_start_ms_p50"]
    assert r["broker_cpu_s"] > 0
    assert r["pods_cpu_ms_per_job"] > 0  # the pods' processes were found and measured
    # ... each role of them: the agents, the warm interpreters and the jobs they forked
    roles = ("agents", "interpreters", "jobs")
    assert all(r[f"{role}_cpu_ms_per_job"] > 0 for role in roles)
    assert math.isclose(
        sum(r[f"{role}_cpu_ms_per_job"] for role in roles), r["pods_cpu_ms_per_job"]
    )
    assert math.isclose(
        r["ceiling_jobs_per_s_without_broker_and_pods"],
        r["cores"] * 1000 / (r["jobs_cpu_ms_per_job"] + r["callers_cpu_ms_per_job"]),
    )
    # The broker's own request counters saw the callers' submissions and no exit events (the
    # broker asks each agent for its exit on its own connection: `LaunchRequest.awaits_exit`);
    # a short job's submission waits for its end, so (nearly) no caller polls.
    assert r["submissions_per_job"] > 0 and r["exit_events_per_job"] == 0
    assert r["polls_per_job"] < 0.5 * r["submissions_per_job"]
    assert r["requests_per_job"] >= (
        r["submissions_per_job"] + r["polls_per_job"] + r["exit_events_per_job"]
    )
    assert math.isclose(r["broker_cpu_ms_per_job"], r["broker_cpu_s"] * 1000 / r["jobs"])
    assert r["scrapes"] >= 1 and 0 < r["scrape_ms_p50"] <= r["scrape_ms_p99"]
    assert r["scrape_server_ms_mean"] > 0 and 0 <= r["scrape_server_within_5ms"] <= 1
    # Each scrape's Server-Timing was read: one render time and one CPU time per scrape.
    assert len(r["renders_ms"]) == len(r["render_cpu_ms"]) == r["scrapes"]
    used = zip(r["render_cpu_ms"], r["renders_ms"], strict=True)
    assert all(0 <= cpu <= wall + 0.01 for cpu, wall in used)  # a part of the render's time
    if Path("/proc/thread-self/schedstat").exists():  # the kernel says how long it queued
        assert len(r["render_runqueue_ms"]) == r["scrapes"]
        queued = zip(r["render_runqueue_ms"], r["renders_ms"], strict=True)
        assert all(0 <= q <= wall + 0.01 for q, wall in queued)  # a part of the render's time
    assert 0 < r["scrape_render_ms_p50"] <= r["scrape_render_ms_p99"]
    # The flood ran a flood and a quiet phase (and a third flood phase where the window had
    # room for it; a phase never ends past the window) and measured both.
    flood = r["flood"]
    assert flood["phases"] in (2, 3) and flood["pairs"] == 1
    assert flood["flood_scrapes_per_s"] > 1 and flood["scraper_cpu_ms_per_scrape"] > 0
    assert flood["jobs_per_s_flood"] > 0 and flood["jobs_per_s_quiet"] > 0
    assert math.isclose(
        flood["ratio_pooled"], flood["jobs_per_s_flood"] / flood["jobs_per_s_quiet"]
    )
