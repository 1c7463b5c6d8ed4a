"""The demo's figures per arm, in the layout of the broker paper's Table 5."""

from __future__ import annotations

from collections import Counter
from typing import Any

from rich.console import Console
from rich.table import Table

from firepool.bench.common import percentile
from firepool.demo.live import ArmResult


def start_latencies(result: ArmResult) -> list[float]:
    """Submit -> first instruction of each job, in seconds."""
    out = []
    for job in result.jobs:
        t = job.timings
        if t.submitted is not None and t.first_instruction is not None:
            out.append(t.first_instruction - t.submitted)
    return out


def figures(result: ArmResult, fresh: ArmResult | None) -> dict[str, Any]:
    starts = start_latencies(result)
    paths = Counter(p.acquisition.value for job in result.jobs for p in job.pods)
    total = sum(paths.values()) or 1
    speedup = fresh.makespan_s / result.makespan_s if fresh and result.makespan_s else None
    return {
        "workload": result.workload,
        "arm": result.arm,
        "jobs": len(result.jobs),
        "failed": sum(1 for j in result.jobs if j.state.value != "SUCCEEDED"),
        "start_p50_s": percentile(starts, 50),
        "start_p90_s": percentile(starts, 90),
        "makespan_s": result.makespan_s,
        "speedup_vs_fresh": speedup,
        "paths": dict(paths),
        "cold_start_share": paths.get("new", 0) / total,
        "held_pod_s": result.held_pod_s,
    }


ARM_NAMES = {"on": "Reuse On", "off": "Reuse Off", "fresh": "Fresh pod"}


def print_tables(
    rows: list[dict[str, Any]],
    console: Console,
    simulated: list[dict[str, Any]] | None = None,
    *,
    venue: str = "this machine",
    sim_venue: str = "production-h200, simulated",
) -> None:
    """Each workload's table; with `simulated`, the same workload on the simulated venue
    right after it."""
    for workload in dict.fromkeys(r["workload"] for r in rows):
        console.print(_table(rows, workload, f"{workload} - {venue}"))
        if simulated:
            console.print(_table(simulated, workload, f"{workload} - {sim_venue}"))


def _table(rows: list[dict[str, Any]], workload: str, title: str) -> Table:
    table = Table(title=title)
    for column in (
        "arm", "jobs", "start p50 s", "start p90 s", "makespan s", "speedup",
        "warm/rec/sb/new", "cold", "held pod-s",
    ):  # fmt: skip
        table.add_column(column, justify="left" if column == "arm" else "right")
    for r in (r for r in rows if r["workload"] == workload):
        p = r["paths"]
        speed = r["speedup_vs_fresh"]
        table.add_row(
            ARM_NAMES[r["arm"]],
            f"{r['jobs']}" + (f" ({r['failed']} failed)" if r["failed"] else ""),
            f"{r['start_p50_s']:.2f}",
            f"{r['start_p90_s']:.2f}",
            f"{r['makespan_s']:.1f}",
            "-" if speed is None else f"{speed:.2f}x",
            "/".join(str(p.get(k, 0)) for k in ("warm", "recycled", "standby", "new")),
            f"{100 * r['cold_start_share']:.0f}%",
            f"{r['held_pod_s']:.0f}",
        )
    return table
