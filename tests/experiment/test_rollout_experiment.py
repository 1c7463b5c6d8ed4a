"""`firepool experiment rollout`, smoke-sized: a real broker, real local pods, an admin's
template edit under load; the table comes out with no failed job and the drain bound held."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from firepool.cli.main import app


def test_a_small_real_rollout_prints_the_table(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["experiment", "rollout", "--out", str(out),
                                      "--callers", "3", "--load-s", "2", "--window-s", "8"])
    assert result.exit_code == 0, result.output
    assert "| converged after the edit (s) | 324 [286, 359] |" in result.output
    data = json.loads((out / "rollout.json").read_text())
    rolled, plain = data["arms"]
    assert rolled["converged_s"] is not None
    assert rolled["failed_jobs"] == plain["failed_jobs"] == 0
    assert rolled["max_retiring"] <= 1 and rolled["max_pods"] <= 8
