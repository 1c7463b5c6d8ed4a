"""Rich tables for jobs, pods and pools: pure functions from the API's models to renderables,
so the commands stay one call each and the layout can be tested without a terminal.

Identifying columns (ids, names, states) are never wrapped nor cut, whatever the width: a
narrow terminal wraps the free-text columns instead. `wide` adds the columns an operator
reads less often (acquisition reasons, start latency, groups, per-caller limits).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.table import Table

if TYPE_CHECKING:
    from firepool.api.schemas import JobOut, PodView, RolloutOut
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


def _table() -> Table:
    return Table(box=None, pad_edge=False, header_style="bold")


def _key_column(table: Table, name: str, values: Sequence[str]) -> None:
    """A column that is never wrapped or cut: at least as wide as its longest value."""
    width = max([len(name), *(len(v) for v in values)])
    table.add_column(name, no_wrap=True, min_width=width, overflow="ignore")


def jobs_table(jobs: Sequence[JobOut], now: float | None = None, *, wide: bool = False) -> Table:
    now = time.time() if now is None else now
    table = _table()
    _key_column(table, "ID", [j.id for j in jobs])
    _key_column(table, "STATE", [j.state.value for j in jobs])
    for name in ("POOL", "QUEUE", "TAG", "EXIT", "ERROR", "RETRIES", "PODS"):
        table.add_column(name)
    if wide:
        for name in ("ATTEMPT", "WAITED", "MESSAGE"):
            table.add_column(name)
    table.add_column("RAN")
    table.add_column("AGE", justify="right")
    for job in jobs:
        state = job.state.value
        if wide:
            pods = ", ".join(f"{p.name} ({p.acquisition.value}: {p.reason})" for p in job.pods)
        else:
            pods = ", ".join(f"{p.name} ({p.acquisition.value})" for p in job.pods)
        extra = (
            [
                job.attempt,
                duration(job.timings.submitted, job.timings.first_instruction),
                _dash(job.message),
            ]
            if wide
            else []
        )
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
            *extra,
            duration(job.timings.started, job.timings.finished),
            ago(job.timings.submitted, now),
        )
    return table


def pods_table(pods: Sequence[PodView], now: float | None = None, *, wide: bool = False) -> Table:
    now = time.time() if now is None else now
    table = _table()
    _key_column(table, "NAME", [p.name for p in pods])
    table.add_column("POOL")
    table.add_column("ROLE")
    _key_column(table, "STATE", [p.state for p in pods])
    for name in ("OWNER", "QUEUE", "TAG", "JOB", "HOLD", "ISOLATION", "NETWORK", "IMAGE"):
        table.add_column(name)
    if wide:
        table.add_column("GROUP")
        table.add_column("CREATED")
    table.add_column("AGE", justify="right")
    for pod in pods:
        hold = "-" if pod.hold_until is None else f"{max(0.0, pod.hold_until - now):.0f}s"
        extra = [_dash(pod.group), _clock(pod.created_at)] if wide else []
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
            _dash(pod.isolation) + ("+pid-ns" if pod.pid_namespace else ""),
            _network(pod.network),
            _dash(pod.image),
            *extra,
            ago(pod.created_at, now),
        )
    return table


def _network(network: str | None) -> str:
    """`host` is said for what it is: the pod's jobs share the host's network."""
    return "host (not isolated)" if network == "host" else _dash(network)


def _clock(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


def pools_table(
    pools: Sequence[PoolSpec], *, wide: bool = False, rollouts: Sequence[RolloutOut] = ()
) -> Table:
    table = _table()
    _key_column(table, "NAME", [p.name for p in pools])
    for name in ("SHAPE", "MEMORY", "FLOOR", "IDLE CAP", "CEILING", "KEEP-ALIVE"):
        table.add_column(name)
    for name in ("HOLD", "STANDBYS", "TAGS", "ROLLOUT", "SPEC"):
        table.add_column(name)
    progress = {r.pool: r for r in rollouts}
    if wide:
        for name in ("STEP", "IMAGE", "PODS/CALLER", "GPUS/CALLER", "TEMPLATE"):
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
            rollout_cell(progress.get(pool.name)),
            spec_source(progress.get(pool.name)),
            *(
                [
                    str(pool.step),
                    pool.image,
                    _dash(pool.max_pods_per_caller),
                    _dash(pool.max_gpus_per_caller),
                    str(pool.template_version),
                ]
                if wide
                else []
            ),
        )
    return table


def spec_source(progress: RolloutOut | None) -> str:
    """Where the pool's spec came from: an admin's applied edit (kept across restarts) or
    the broker's catalog file; `-` when the API runs no broker."""
    if progress is None:
        return "-"
    return "applied edit" if progress.edited else "catalog"


def rollout_cell(progress: RolloutOut | None) -> str:
    """`v3 done`, or `v3 2/4` (pods on the current template / all) with what is left."""
    if progress is None:
        return "-"
    head = f"v{progress.template_version}"
    if progress.done:
        return f"{head} done"
    left = []
    if progress.stale_idle:
        left.append(f"{progress.stale_idle} idle old")
    if progress.stale_busy:
        left.append(f"{progress.stale_busy} busy old")
    if progress.retiring:
        left.append(f"{progress.retiring} draining")
    return f"{head} {progress.current}/{progress.pods} ({', '.join(left)})"
