"""`bench.flood`'s arithmetic on made-up phases: what it counts, what it leaves out, and the
cost it derives (the live part runs in `test_throughput.py`)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from firepool.bench.flood import summarize


def _phase(index: int, scrapes: int, broker_cpu_s: float) -> dict[str, Any]:
    start = 100.0 + 2.0 * index
    return {
        "index": index,
        "start": start,
        "end": start + 2.0,
        "flood": index % 2 == 0,
        "scrapes": scrapes,
        "broker_cpu_s": broker_cpu_s,
        "scraper_cpu_s": scrapes * 0.0004,
    }


def _finishing(start: float, end: float, per_s: float) -> list[float]:
    count = round((end - start) * per_s)
    return [start + (i + 0.5) / per_s for i in range(count)]


def test_flood_phases_are_compared_with_the_quiet_phase_after_them() -> None:
    # Quiet phases: 100 jobs/s at 5 ms of broker CPU each (0.5 s of CPU per second). Flood
    # phases: 90 jobs/s and 100 scrapes/s, each scrape 1.5 ms: 0.45 + 0.15 s per second.
    phases = [_phase(0, 200, 1.2), _phase(1, 0, 1.0), _phase(2, 200, 1.2), _phase(3, 0, 1.0)]
    finished: list[float] = []
    for p in phases:
        # The first 0.5 s of every phase is not counted: a burst there must change nothing.
        finished += _finishing(p["start"], p["start"] + 0.5, 1000.0)
        finished += _finishing(p["start"] + 0.5, p["end"], 90.0 if p["flood"] else 100.0)
    s = summarize(phases, finished, settle_s=0.5, rates={"every 0.25 s": 4.0})
    assert (s["phases"], s["pairs"]) == (4, 2)
    assert math.isclose(s["jobs_per_s_flood"], 90.0) and math.isclose(s["jobs_per_s_quiet"], 100)
    assert math.isclose(s["ratio_pooled"], 0.9) and s["ratio_per_pair"] == pytest.approx([0.9] * 2)
    assert math.isclose(s["flood_scrapes_per_s"], 100.0)
    # 10% of jobs/s for 100 scrapes/s: 0.1% per scrape per second, 0.4% at 4 per second.
    assert math.isclose(s["loss_per_scrape_per_s"], 0.001)
    assert math.isclose(s["projected_loss"]["every 0.25 s"], 0.004)
    # The flood's jobs took their quiet CPU per job; the rest of its CPU is the scrapes'.
    assert math.isclose(s["broker_cpu_ms_per_scrape"], 1.5)
    assert math.isclose(s["scraper_cpu_ms_per_scrape"], 0.4)


def test_a_trailing_flood_phase_without_its_quiet_one_is_left_out() -> None:
    phases = [_phase(0, 200, 1.2), _phase(1, 0, 1.0), _phase(2, 400, 2.0)]
    finished = _finishing(100.5, 102.0, 90.0) + _finishing(102.5, 104.0, 100.0)
    finished += _finishing(104.5, 106.0, 10.0)  # the unpaired phase: not in the figures
    s = summarize(phases, finished, settle_s=0.5, rates={})
    assert (s["phases"], s["pairs"]) == (3, 1)
    assert math.isclose(s["ratio_pooled"], 0.9) and math.isclose(s["flood_scrapes_per_s"], 100)


def test_too_short_a_run_is_an_error_not_a_figure() -> None:
    with pytest.raises(ValueError, match="no flood/quiet pair of 1 phases"):
        summarize([_phase(0, 200, 1.2)], [100.7, 101.0], settle_s=0.5, rates={})


def test_a_quiet_phase_without_a_job_is_no_baseline_and_its_pair_is_left_out() -> None:
    # The first pair's quiet phase saw no job (a stalled broker): only the second pair counts,
    # its scrapes and CPU included, none of the first's.
    phases = [_phase(0, 999, 9.9), _phase(1, 0, 0.1), _phase(2, 200, 1.2), _phase(3, 0, 1.0)]
    finished = _finishing(100.5, 102.0, 50.0)  # the first flood phase only
    finished += _finishing(104.5, 106.0, 90.0) + _finishing(106.5, 108.0, 100.0)
    s = summarize(phases, finished, settle_s=0.5, rates={})
    assert s["pairs"] == 1 and math.isclose(s["ratio_pooled"], 0.9)
    assert math.isclose(s["flood_scrapes_per_s"], 100.0)
    assert math.isclose(s["broker_cpu_ms_per_scrape"], 1.5)
