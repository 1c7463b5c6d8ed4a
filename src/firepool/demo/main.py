"""Run every workload under the three arms and print the paper's Table 5 layout.

Local pods start in about a second, not the 20-35 s of a production GPU pod, so the speedups
here are far smaller than the paper's; the cold-start share column says how many jobs paid a
pod start, which is what a slower venue would multiply.
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

from firepool.demo.live import WORKLOADS, count_jobs, run_arm
from firepool.demo.report import figures, print_tables

ARMS = ("on", "off", "fresh")


def _scratch_root() -> Path:
    """Outside /tmp: a pod's private mount namespace covers /tmp only when its own state lives
    elsewhere (otherwise pods run with private /dev/shm but a shared /tmp)."""
    root = Path.home() / ".cache" / "firepool"
    root.mkdir(parents=True, exist_ok=True)
    return root


async def _run(seed: int, scale: float, cap: int, workloads: list[str] | None) -> list[Any]:
    chosen = [w for w in WORKLOADS if workloads is None or w.name in workloads]
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


def run_demo(
    *,
    seed: int = 2027,
    scale: float = 0.5,
    cap: int = 4,
    json_path: str | None = None,
    workloads: list[str] | None = None,
) -> int:
    console = Console(width=None if Console().is_terminal else 110)
    console.print(
        f"firepool demo: W-Agent and W-RL loops under three arms on an embedded broker "
        f"(local pods, pool cap {cap}, job bodies and pauses x{scale} of the paper's)."
    )
    started = time.monotonic()
    results = asyncio.run(_run(seed, scale, cap, workloads))
    rows = []
    for result in results:
        fresh = next(
            (r for r in results if r.workload == result.workload and r.arm == "fresh"), None
        )
        rows.append(figures(result, fresh))
    print_tables(rows, console)
    console.print(f"total {time.monotonic() - started:.0f} s")
    if json_path:
        Path(json_path).write_text(
            json.dumps({"arms": rows, "seed": seed, "scale": scale}, indent=2)
        )
    return 0 if all(r["failed"] == 0 for r in rows) else 1
