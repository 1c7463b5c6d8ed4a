"""Run every workload under the three arms and print the paper's Table 5 layout.

Local pods start in about a second, not the 20-35 s of a production GPU pod, so the speedups
here are far smaller than the paper's; the cold-start share column says how many jobs paid a
pod start, which is what a slower venue would multiply. That is why each local table is
followed by the same workload on the `production-h200` venue in the simulator (a few
seconds), and why the PNG written at the end shows both.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from firepool.demo.live import WORKLOADS, Workload, count_jobs, run_arm
from firepool.demo.plot import write_plot
from firepool.demo.report import figures, print_tables
from firepool.demo.simulated import VENUE, simulated_rows

ARMS = ("on", "off", "fresh")


def _scratch_root() -> Path:
    """Outside /tmp: a pod's private mount namespace covers /tmp only when its own state lives
    elsewhere (otherwise pods run with private /dev/shm but a shared /tmp)."""
    root = Path.home() / ".cache" / "firepool"
    root.mkdir(parents=True, exist_ok=True)
    return root


def choose(keys: list[str] | None) -> list[Workload]:
    """The workloads named by key (`agent2`, `agent4`, `rl`), in the demo's order; every one
    for None. An unknown key is a ValueError naming the known ones."""
    if keys is None:
        return list(WORKLOADS)
    known = {w.key for w in WORKLOADS}
    unknown = [k for k in keys if k not in known]
    if unknown or not keys:
        raise ValueError(
            f"unknown workload(s) {', '.join(unknown) or '(none given)'}; "
            f"choose from {', '.join(sorted(known))}"
        )
    return [w for w in WORKLOADS if w.key in keys]


async def _run(seed: int, scale: float, cap: int, chosen: list[Workload]) -> list[Any]:
    total = sum(count_jobs(w, seed) for w in chosen) * len(ARMS)
    results = []
    with (
        tempfile.TemporaryDirectory(prefix="firepool-demo-", dir=_scratch_root()) as tmp,
        Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
        ) as progress,  # fmt: skip
    ):
        task = progress.add_task("starting", total=total)
        for workload in chosen:
            for arm in ARMS:
                progress.update(task, description=f"{workload.name}: {arm}")
                results.append(
                    await run_arm(
                        workload,
                        arm,
                        seed=seed,
                        scale=scale,
                        cap=cap,
                        data_dir=Path(tmp) / f"{workload.name}-{arm}".replace(" ", ""),
                        on_job=lambda: progress.advance(task),
                    )
                )
    return results


def _job_record(result: Any) -> dict[str, Any]:
    """Every job of an arm with its timings and pods: what a stall would show up in."""
    return {
        "workload": result.workload,
        "arm": result.arm,
        "jobs": [
            {
                "id": j.id,
                "tag": j.lease_tag,
                "state": j.state.value,
                "timings": j.timings.model_dump(),
                "pods": [(p.name, p.acquisition.value, p.reason) for p in j.pods],
            }
            for j in result.jobs
        ],
    }


def run_demo(
    *,
    seed: int = 2027,
    scale: float = 0.5,
    cap: int = 4,
    json_path: str | None = None,
    workloads: list[str] | None = None,
    plot_path: str | None = "firepool-demo.png",
    sim_seeds: int = 5,
) -> int:
    chosen = choose(workloads)
    console = Console(width=None if Console().is_terminal else 110)
    console.print(
        f"firepool demo: W-Agent and W-RL loops under three arms on an embedded broker "
        f"(local pods, pool cap {cap}, job bodies and pauses x{scale} of the paper's)."
    )
    started = time.monotonic()
    results = asyncio.run(_run(seed, scale, cap, chosen))
    rows = []
    for result in results:
        fresh = next(
            (r for r in results if r.workload == result.workload and r.arm == "fresh"), None
        )
        rows.append(figures(result, fresh))
    simulated = simulated_rows([(w.name, w.key) for w in chosen], sim_seeds) if sim_seeds else []
    print_tables(rows, console, simulated, sim_venue=f"{VENUE}, simulated, {sim_seeds} seeds")
    if simulated:
        console.print(
            f"Simulated rows: the same loops at the paper's durations on the {VENUE} venue "
            "(pods start in 20-35 s), medians over seeds; this machine's pods start in about "
            "a second, so reuse is worth far more there."
        )
    console.print(f"total {time.monotonic() - started:.0f} s")
    if plot_path:
        where = write_plot(rows, simulated, Path(plot_path), scale=scale)
        console.print(f"plot of start latency and makespan by arm: {where.resolve()}")
    if json_path:
        Path(json_path).write_text(
            json.dumps(
                {
                    "arms": rows,
                    "simulated": simulated,
                    "seed": seed,
                    "scale": scale,
                    "jobs": [_job_record(r) for r in results],
                },
                indent=2,
            )
        )
    return 0 if all(r["failed"] == 0 for r in rows) else 1
