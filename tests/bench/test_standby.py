"""The standby benchmark runs end to end on real local pods with a fake card (one handover per
arm) and its JSON is self-consistent: every next job ran on the standby in that arm, waits are
positive, and the promotion is part of the handover. No figure is compared with a target."""

from __future__ import annotations

import json
from pathlib import Path

from firepool.bench import standby


def test_standby_benchmark_measures_both_arms(tmp_path: Path) -> None:
    out = tmp_path / "standby.json"
    assert standby.main(["--handovers", "1", "--rounds", "1", "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["handovers_per_arm"] == 1
    assert r["standby_path_share"] == 1.0
    # The promotion instant is the first job's verdict, written in the same core step as the
    # gate passing: after the first job's exit, so within the handover.
    assert r["standby_promotion_to_first_s_p50"] <= r["standby_handover_s_p50"]
    assert r["standby_handover_s_p50"] > 0
    assert r["none_handover_s_p50"] > 0
