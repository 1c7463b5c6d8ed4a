"""`python -m firepool.bench sim` writes the figures the issue asks for, with the load average."""

from __future__ import annotations

import json
from pathlib import Path

from firepool.bench.sim import main


def test_quick_bench_writes_events_per_s_and_load(tmp_path: Path) -> None:
    out = tmp_path / "sim.json"
    assert main(["--quick", "--seconds", "0.3", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["events_per_s"] > 0 and data["load_before_events"] >= 0
