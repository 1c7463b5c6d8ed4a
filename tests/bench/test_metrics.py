"""`bench metrics`' renderer and dashboard parts at tiny sizes (the load part is `bench
throughput`'s, tested there): its JSON is self-consistent. No figure is compared with a
target (the machine is shared)."""

from __future__ import annotations

import json
from pathlib import Path

from firepool.bench import metrics


def test_metrics_benchmark_times_both_writers_and_the_dashboard(tmp_path: Path) -> None:
    out = tmp_path / "metrics.json"
    argv = ["--skip-load", "--dashboard-jobs", "120", "--loads", "3", "--renders", "20"]
    assert metrics.main([*argv, "--json", str(out)]) == 0
    d = json.loads(out.read_text())["dashboard"]
    assert d["jobs_in_store"] == 120 and d["loads"] == 3 and d["renders"] == 20
    assert 0 < d["render_ms_p50"] <= d["render_ms_p99"]
    assert 0 < d["generate_latest_ms_p50"] <= d["generate_latest_ms_p99"]
    assert d["samples"] > 50  # the real registry after real jobs, histograms included
    assert 0 < d["panel_ms_p50"] <= d["page_ms_p50"]  # the page is the shell plus the panel
    # the panel shows the newest 50 of the viewer's 120 jobs (+ its other tables' rows)
    assert 50 < d["panel_rows"] < 120
