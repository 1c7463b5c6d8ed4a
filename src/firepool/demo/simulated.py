"""The demo's loops on a production venue, in the simulator: what reuse is worth where a pod
takes 20-35 s to start (`production-h200`, the broker paper's H200 pools), printed beside what
this machine measured, where a local pod starts in about a second.

The same workload programs (`sim.agentic`) run through the same broker core in virtual time,
at the paper's durations (the live demo scales them by `--scale`), for a few seeds; each arm's
figures are medians over the seeds (start latencies pooled), in the live table's layout.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from firepool.bench.common import median, percentile

VENUE = "production-h200"
ARMS = ("on", "off", "fresh")


def simulated_rows(workloads: Sequence[tuple[str, str]], seeds: int) -> list[dict[str, Any]]:
    """`workloads`: (display name, simulator key) pairs; one row per workload and arm."""
    from firepool.sim.experiments.runs import loop_cell

    rows: list[dict[str, Any]] = []
    for name, key in workloads:
        cells = {arm: [loop_cell(VENUE, key, arm, seed) for seed in range(seeds)] for arm in ARMS}
        fresh = median([c["makespan"] for c in cells["fresh"]])
        for arm in ARMS:
            runs = cells[arm]
            starts = [s for c in runs for s in c["start"]]
            paths: Counter[str] = Counter()
            for c in runs:
                paths.update(c["paths"])
            makespan = median([c["makespan"] for c in runs])
            rows.append(
                {
                    "workload": name,
                    "arm": arm,
                    "jobs": round(median([c["jobs"] for c in runs])),
                    "failed": 0,
                    "start_p50_s": percentile(starts, 50),
                    "start_p90_s": percentile(starts, 90),
                    "makespan_s": makespan,
                    "speedup_vs_fresh": fresh / makespan if makespan else None,
                    "paths": {k: round(v / seeds) for k, v in paths.items()},
                    "cold_start_share": paths.get("new", 0) / (sum(paths.values()) or 1),
                    "held_pod_s": median([c["held"] for c in runs]),
                }
            )
    return rows
