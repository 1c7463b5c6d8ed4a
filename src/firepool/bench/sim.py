"""`python -m firepool.bench sim`: simulator throughput and the wall time of its big runs.

events_per_s: heap events executed per second of wall time on a broker run (frontier cell,
bursty sessions, production CPU start) — control-plane calls included, as they happen.
oak_table_grid_s: the full `sim oak-table` grid (4 workloads x 3 lambda x 10 seeds x 2
policies) on all cores. loops_10_repeats_s: `sim loops` with 10 repeats.

The 1-minute load average is recorded next to each figure (`load_*`): on a shared machine
another process's load moves these numbers by 2-4x, so a figure means little without it.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from firepool.bench.common import machine, print_table, write_json


def events_per_s(seconds: float = 3.0) -> float:
    """Simulated events per second of wall time over back-to-back cells (a new seed each).
    One cell runs untimed first: the modules a cell imports on first use (the broker core,
    the scaler, the workload generators) took a fifth of a 3 s window, which is Python's
    start-up, not the simulator's speed."""
    from firepool.sim.experiments.runs import sessions_cell

    def cell(seed: int) -> int:
        r = sessions_cell(
            "production-cpu",
            "bursty",
            "on",
            seed,
            7200.0,
            60.0,
            idle_timeout=60.0,
            min_count=0,
            max_idle_count=16,
        )
        return int(r["events"])

    cell(-1)  # untimed: imports and first-use set-up
    events = 0
    t0 = time.perf_counter()
    seed = 0
    while time.perf_counter() - t0 < seconds:
        events += cell(seed)
        seed += 1
    return events / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="firepool.bench sim")
    parser.add_argument("--json", dest="json_path")
    parser.add_argument("--quick", action="store_true", help="events/s only (skip the grids)")
    parser.add_argument("--seconds", type=float, default=3.0, help="events/s measuring window")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    result: dict[str, object] = {"machine": machine()}
    result["load_before_events"] = os.getloadavg()[0]
    eps = events_per_s(args.seconds)
    result["events_per_s"] = eps
    rows = [("simulated events/s", f"{eps:,.0f}", ">= 100,000")]
    if not args.quick:
        from firepool.sim.experiments.loops import run_loops
        from firepool.sim.experiments.oak import run_oak_table

        with tempfile.TemporaryDirectory() as out:
            result["load_before_grid"] = os.getloadavg()[0]
            t0 = time.perf_counter()
            run_oak_table(out, args.seeds, args.workers, progress=False)
            grid = time.perf_counter() - t0
            result["load_after_grid"] = os.getloadavg()[0]
            t0 = time.perf_counter()
            run_loops(out, 10, args.workers, progress=False)
            loops = time.perf_counter() - t0
        result["oak_table_grid_s"] = grid
        result["loops_10_repeats_s"] = loops
        rows += [
            ("oak-table grid (s)", f"{grid:.1f}", "<= 180 on 2 cores"),
            ("loops, 10 repeats (s)", f"{loops:.1f}", ""),
        ]
    rows.append(("load average (1 min) at the end", f"{os.getloadavg()[0]:.2f}", ""))
    print_table("simulator", rows)
    write_json(args.json_path, result)
    return 0
