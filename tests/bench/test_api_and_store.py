"""The store and API benchmarks run end to end (tiny sizes) and write their flat JSON."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from firepool.api import create_app, issue_token
from firepool.api.server import ServedApp
from firepool.bench import api, dispatch
from firepool.model import JobState
from firepool.packages import DiskPackageStore
from firepool.store import open_store
from firepool.testing.control import cpu_pool


def test_dispatch_benchmark_writes_commits_per_s(tmp_path: Path) -> None:
    out = tmp_path / "dispatch.json"
    argv = ["--store", "sqlite", "--workers", "1,4", "--jobs", "120", "--seconds", "2"]
    assert dispatch.main([*argv, "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["commits_per_s"] == result["commits_per_s_w4"] > 0
    assert result["commits_per_s_w1"] > 0 and result["store"] == "sqlite"


def test_api_benchmark_writes_rate_and_latency(tmp_path: Path) -> None:
    out = tmp_path / "api.json"
    assert api.main(["--clients", "4", "--seconds", "1", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["submits_per_s"] > 0
    assert 0 < result["p50_ms"] <= result["p99_ms"]


def test_dispatch_benchmark_counts_each_durable_commit_once(tmp_path: Path) -> None:
    """What the benchmark counts is what the store holds: every counted commit is a RUNNING
    job with one attempt and its binding, and none is counted twice (4 workers, 60 jobs, no
    time pressure)."""
    store = open_store(data_dir=tmp_path)
    try:
        commits, _ = dispatch.run_once(store, workers=4, jobs=60, seconds=600.0)
        running = store.list_jobs(states=[JobState.RUNNING], limit=1000)
        queued = store.list_jobs(states=[JobState.QUEUED], limit=1000)
        assert commits == len(running) == 60 and queued == []
        for job in running:
            (attempt,) = store.attempts(job.id)
            assert [b.pod for b in job.pods] == [f"pod-{job.id}"] == [b.pod for b in attempt.pods]
    finally:
        store.close()


def test_api_benchmark_counts_each_durable_submission_once(tmp_path: Path) -> None:
    """Every submission the load generator counts is a QUEUED row in the store, and the
    store holds nothing else but the warm-up requests (3 per connection)."""
    store = open_store(data_dir=tmp_path)
    packages = DiskPackageStore(tmp_path / "packages")
    app = create_app(store, packages, [cpu_pool()], data_dir=tmp_path)
    token = issue_token(store, "bench")
    try:
        with ServedApp(app) as served:
            failures, latencies, _ = asyncio.run(api._drive(served.url, token, 2, 0.3))
        queued = store.list_jobs(states=[JobState.QUEUED], limit=100_000)
        assert failures == 0 and latencies
        assert len(queued) == len(latencies) + 3 * 2
        assert {job.caller for job in queued} == {"bench"}
    finally:
        store.close()
