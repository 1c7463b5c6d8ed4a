"""`bench warm-start --network-rounds`: the namespace's cost, side by side, reported in full."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from firepool.bench import warm_start

pytestmark = pytest.mark.timeout(300)


def test_alternated_rounds_report_both_networks_and_their_difference(tmp_path: Path) -> None:
    out = tmp_path / "warm.json"
    assert warm_start.main(["--jobs", "3", "--network-rounds", "2", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    rounds = result["total_ms_p50_per_round"]
    assert len(rounds["namespace"]) == len(rounds["host"]) == 2
    assert all(v > 0 for v in rounds["namespace"] + rounds["host"])
    cost = result["total_ms_p50_namespace"] - result["total_ms_p50_host"]
    assert result["namespace_cost_ms"] == pytest.approx(cost)
