"""Rich tables for jobs, pods and pools: pure functions from the API's models to renderables,
so the commands stay one call each and the layout can be tested without a terminal."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.table import Table

if TYPE_CHECKING:
    from firepool.api.schemas import JobOut, PodView
    from firepool.model import PoolSpec

STATE_STYLE = {
    "QUEUED": "yellow",
    "PENDING": "yellow",
    "RUNNING": "cyan",
    "SUCCEEDED": "green",
    "FAILED": "red",
    "CANCELLED": "magenta",
}


def ago(at: float | None, now: float) -> str:
    """A compact age: 4s, 3m, 2h, 5d."""
    if at is None:
        return "-"
    seconds = max(0.0, now - at)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def duration(start: float | None, end: float | None) -> str:
    if start is None or end is None:
        return "-"
    return f"{end - start:.2f}s"


def _dash(value: object) -> str:
    return "-" if value is None or value == "" else str(value)


def jobs_table(jobs: Sequence[JobOut], now: float | None = None) -> Table:
    now = time.time() if now is None else now
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("ID", no_wrap=True)
    for name in ("STATE", "POOL", "QUEUE", "TAG", "EXIT", "ERROR", "RETRIES", "PODS"):
        table.add_column(name)
    table.add_column("RAN")
    table.add_column("AGE", justify="right")
    for job in jobs:
        state = job.state.value
        pods = ", ".join(f"{p.name} ({p.acquisition.value})" for p in job.pods)
        table.add_row(
            job.id,
            f"[{STATE_STYLE.get(state, 'white')}]{state}[/]",
            job.pool,
            job.queue,
            _dash(job.lease_tag),
            _dash(job.exit_code),
            _dash(job.error_class.value if job.error_class else None),
            str(job.retries),
            pods or "-",
            duration(job.timings.started, job.timings.finished),
            ago(job.timings.submitted, now),
        )
    return table


def pods_table(pods: Sequence[PodView], now: float | None = None) -> Table:
    now = time.time() if now is None else now
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("NAME", no_wrap=True)
    for name in ("POOL", "ROLE", "STATE", "OWNER", "QUEUE", "TAG", "JOB", "HOLD", "ISOLATION"):
        table.add_column(name)
    table.add_column("AGE", justify="right")
    for pod in pods:
        hold = "-" if pod.hold_until is None else f"{max(0.0, pod.hold_until - now):.0f}s"
        table.add_row(
            pod.name,
            pod.pool,
            pod.role,
            pod.state,
            _dash(pod.owner),
            _dash(pod.queue),
            _dash(pod.lease_tag),
            _dash(pod.job),
            hold,
            _dash(pod.isolation),
            ago(pod.created_at, now),
        )
    return table


def pools_table(pools: Sequence[PoolSpec]) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold")
    for name in ("NAME", "SHAPE", "MEMORY", "FLOOR", "IDLE CAP", "CEILING", "KEEP-ALIVE"):
        table.add_column(name)
    for name in ("HOLD", "STANDBYS", "TAGS"):
        table.add_column(name)
    for pool in pools:
        shape = (
            f"{pool.accelerators_per_pod}x {pool.accelerator}"
            if pool.accelerator
            else f"{pool.cpus_per_pod:g} cpu"
        )
        table.add_row(
            pool.name,
            shape,
            f"{pool.memory_mib_per_pod} MiB",
            str(pool.min_count),
            str(pool.max_idle_count),
            str(pool.max_count),
            f"{pool.idle_timeout:g}s",
            f"{pool.hold_seconds:g}s",
            str(pool.standbys_per_active),
            pool.lease_tag_mode.value,
        )
    return table
