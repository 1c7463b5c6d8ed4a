"""The gang-starvation experiment on a few paired seeds: with reservations the gang is placed
in every run and waits less than without; the reservation's cost is counted."""

from __future__ import annotations

import statistics

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
