"""`firepool demo`'s new faces without the minutes of live arms: the workload choice, the
simulated production-h200 rows (the real simulator, one seed) and the PNG (real matplotlib)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from firepool.cli.main import app
from firepool.demo.main import choose
from firepool.demo.plot import write_plot
from firepool.demo.simulated import simulated_rows


def test_unknown_workloads_are_refused_naming_the_known_ones() -> None:
    result = CliRunner().invoke(app, ["demo", "--workloads", "agent2,agnet4"])
    assert result.exit_code == 2
    assert "agnet4" in result.output and "agent4" in result.output and "rl" in result.output
    with pytest.raises(ValueError, match="none given"):
        choose([])
    assert [w.key for w in choose(["rl", "agent2"])] == ["agent2", "rl"]  # the demo's order


def test_simulated_rows_show_reuse_paying_where_pods_start_slowly(tmp_path: Path) -> None:
    rows = simulated_rows([("W-Agent, 2 agents", "agent2")], seeds=1)
    by_arm = {r["arm"]: r for r in rows}
    assert set(by_arm) == {"on", "off", "fresh"}
    assert by_arm["fresh"]["speedup_vs_fresh"] == pytest.approx(1.0)
    assert by_arm["fresh"]["cold_start_share"] == 1.0  # every fresh job waited for a new pod
    # a production pod takes 20-35 s to start: reuse makes the loop several times faster
    assert by_arm["on"]["speedup_vs_fresh"] > 3.0
    assert by_arm["on"]["start_p50_s"] < by_arm["fresh"]["start_p50_s"]

    png = write_plot(rows, rows, tmp_path / "out" / "demo.png", scale=0.5)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
