"""`bench warm-start`: the broker as `firepool serve` (the default) and on a thread, side by
side."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from firepool.bench import warm_start
from firepool.bench.warm_start_parts import POOL, _catalog_toml
from firepool.service.catalog import parse_catalog

pytestmark = pytest.mark.timeout(300)


def test_the_default_measures_a_served_broker_through_the_sdk(tmp_path: Path) -> None:
    out = tmp_path / "warm.json"
    assert warm_start.main(["--jobs", "3", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["broker"] == "serve"
    assert result["jobs"] == 3  # every job after the cold first one found the warm pod
    parts = ("accept", "dispatch", "handoff", "first_instruction")
    assert all(result[f"{p}_ms_p50"] > 0 for p in parts)
    assert result["total_ms_p50"] <= result["total_ms_p90"]


def test_alternated_rounds_report_both_brokers_and_their_ratio(tmp_path: Path) -> None:
    out = tmp_path / "warm.json"
    assert warm_start.main(["--jobs", "2", "--broker-rounds", "2", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    rounds = result["total_ms_p50_per_round"]
    assert len(rounds["serve"]) == len(rounds["thread"]) == 2
    assert all(v > 0 for v in rounds["serve"] + rounds["thread"])
    ratio = result["total_ms_p50_serve"] / result["total_ms_p50_thread"]
    assert result["serve_over_thread"] == pytest.approx(ratio)


def test_the_served_catalog_is_the_threaded_benchmarks_pool() -> None:
    import tomllib

    catalog = parse_catalog(tomllib.loads(_catalog_toml(POOL)))
    assert catalog.pools == (POOL,)
