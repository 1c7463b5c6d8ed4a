"""The store and API benchmarks run end to end (tiny sizes) and write their flat JSON."""

from __future__ import annotations

import json
from pathlib import Path

from firepool.bench import api, dispatch


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
