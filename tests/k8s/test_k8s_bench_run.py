"""`python -m firepool.bench kubernetes` end to end at a small scale against the session's
control plane: it runs, cleans up after itself, and reports every figure it promises (the
figures' values are the benchmark's business, not a test's)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from firepool.backends.kubernetes.rest import Rest
from firepool.bench.kubernetes import main

pytestmark = pytest.mark.k8s

FIGURES = (
    "create_to_running_p50_s", "create_to_running_p90_s", "claim_latency_p50_ms",
    "claim_latency_p99_ms", "claims_per_s", "watch_lag_p99_s", "rss_cached_mib",
    "rss_relist_peak_mib", "gil_hold_max_ms", "gil_gap_quiet_ms", "gc_pause_max_ms",
    "relist_s",
)  # fmt: skip


def test_a_small_run_reports_every_figure_and_leaves_nothing(
    kubeconfig: str, admin: Rest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bench.json"
    argv = ["--kubeconfig", kubeconfig, "--nodes", "3", "--pods", "30", "--lag-samples", "5"]
    assert main([*argv, "--claimers", "4", "--callers", "8", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    for figure in FIGURES:
        assert isinstance(result[figure], int | float) and math.isfinite(result[figure]), figure
    assert result["pods"] == result["cached_pods"] == result["relist_pods"] == 30
    assert result["watch_lag_missing"] == 0
    assert "claims/s" in capsys.readouterr().out
    listed = admin.request("GET", "/api/v1/namespaces", "list namespaces")["items"]
    live = {n["metadata"]["name"] for n in listed if not n["metadata"].get("deletionTimestamp")}
    assert result["namespace"] not in live
