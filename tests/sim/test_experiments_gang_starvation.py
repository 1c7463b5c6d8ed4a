"""The gang-starvation experiment on a few paired seeds: with reservations the gang is placed
in every run and waits less than without; the reservation's cost is counted."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from typer.testing import CliRunner

from firepool.cli.sim import sim_app
from firepool.sim.experiments.gang_starvation import gang_cell


def test_reservations_bound_the_gangs_wait_and_count_their_cost() -> None:
    seeds = range(4)
    off = [gang_cell("off", s, horizon=2400.0) for s in seeds]
    on = [gang_cell("on", s, horizon=2400.0) for s in seeds]
    assert not any(r["censored"] for r in on)
    assert all(r["reservations"] >= 1 for r in on)
    assert statistics.median(r["gang_wait"] for r in on) < statistics.median(
        r["gang_wait"] for r in off)
    assert all(r["held_pod_s"] == 0.0 for r in off)
    assert any(r["held_pod_s"] > 0.0 for r in on)


def test_the_command_writes_its_table(tmp_path: Path) -> None:
    args = ["gang-starvation", "--seeds", "2", "--out", str(tmp_path), "--workers", "1"]
    result = CliRunner().invoke(sim_app, args)
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "gang_starvation.json").read_text())
    off, on = data["arms"]
    assert (off["arm"], on["arm"]) == ("off", "on")
    assert on["censored"] == 0 and on["held_pod_s_p50"] > 0 == off["held_pod_s_max"]
    assert (tmp_path / "gang_starvation.md").read_text().startswith("| arm |")
