"""`firepool top`: a live terminal view of the pools, the pods and the queue.

Every refresh reads what the CLI's other listings read (`/v1/pools`, `/v1/pods`, the caller's
queued jobs) plus each pool's queue depth over every caller from `/metrics` (the only place
the API publishes it; it needs no token). On a terminal the view is redrawn in place with
rich's `Live`; written to a pipe or a file, each refresh is printed after the last, so
`firepool top --iterations 3 > log` records three snapshots. `--once` is `--iterations 1`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import typer

from firepool.cli.common import TokenOption, UrlOption, broker_errors, connect, stdout

if TYPE_CHECKING:
    from rich.console import Group
    from rich.table import Table

    from firepool.api.schemas import JobOut, PodView
    from firepool.client import Client
    from firepool.model import PoolSpec

#: Pod states in which a job holds the pod.
BUSY = frozenset({"assigned", "running"})


@dataclass(frozen=True)
class Snapshot:
    url: str
    at: float
    pools: Sequence[PoolSpec]
    pods: Sequence[PodView]
    #: Queued jobs per pool over every caller (None where the broker publishes no figure).
    depth: dict[str, int] | None
    queued: Sequence[JobOut]


def queue_depths(metrics_text: str) -> dict[str, int] | None:
    """`firepool_queue_depth{pool}` from a /metrics body; None when it has no sample (an
    API-only broker has no queue of its own to report)."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(metrics_text):
        if family.name == "firepool_queue_depth":
            return {s.labels["pool"]: int(s.value) for s in family.samples} or None
    return None


def read(client: Client) -> Snapshot:
    import httpx

    from firepool.model import JobState

    pools = client.pools()
    pods = client.pods()
    queued = client.list(state=JobState.QUEUED, limit=100)
    try:
        text = httpx.get(f"{client.url}/metrics", timeout=client.timeout).text
        depth = queue_depths(text)
    except (httpx.HTTPError, ValueError):
        depth = None
    return Snapshot(client.url, time.time(), pools, pods, depth, queued)


def pool_rows(snap: Snapshot) -> Table:
    from firepool.cli.tables import _key_column, _table

    table = _table()
    _key_column(table, "POOL", [p.name for p in snap.pools])
    for name in ("FLOOR/IDLE/CEIL", "HELD", "BUSY", "IDLE", "STARTING", "QUEUED", "HELD/CEIL"):
        table.add_column(name, justify="left" if name == "HELD/CEIL" else "right")
    for pool in snap.pools:
        mine = [p for p in snap.pods if p.pool == pool.name]
        busy = sum(1 for p in mine if p.state in BUSY)
        idle = sum(1 for p in mine if p.state == "idle")
        starting = sum(1 for p in mine if p.state == "starting")
        depth = "-" if snap.depth is None else str(snap.depth.get(pool.name, 0))
        table.add_row(
            pool.name,
            f"{pool.min_count}/{pool.max_idle_count}/{pool.max_count}",
            str(len(mine)),
            str(busy),
            str(idle),
            str(starting),
            depth,
            bar(len(mine), busy, pool.max_count),
        )
    return table


def bar(held: int, busy: int, ceiling: int, width: int = 20) -> str:
    """Busy (#), held but not busy (+) and free capacity up to the ceiling (.)."""
    scale = max(ceiling, held, 1)
    n_busy = round(width * busy / scale)
    n_held = max(round(width * held / scale) - n_busy, 0)
    return "#" * n_busy + "+" * n_held + "." * max(width - n_busy - n_held, 0)


def queue_rows(queued: Sequence[JobOut], now: float) -> Table:
    from firepool.cli.tables import _key_column, _table, ago

    table = _table()
    _key_column(table, "JOB", [j.id for j in queued])
    for name in ("POOL", "QUEUE", "TAG", "PODS", "WAITING"):
        table.add_column(name, justify="right" if name == "WAITING" else "left")
    for job in queued:
        table.add_row(
            job.id,
            job.pool,
            job.queue,
            job.lease_tag or "-",
            str(job.spec.pods),
            ago(job.timings.submitted, now),
        )
    return table


def view(snap: Snapshot, refresh: int) -> Group:
    from rich.console import Group
    from rich.text import Text

    from firepool.cli.tables import pods_table

    stamp = time.strftime("%H:%M:%S", time.localtime(snap.at))
    total = "-" if snap.depth is None else str(sum(snap.depth.values()))
    return Group(
        Text(f"firepool top  {snap.url}  {stamp}  refresh {refresh}", style="bold"),
        Text(""),
        pool_rows(snap),
        Text(""),
        Text(f"pods: {len(snap.pods)}", style="bold"),
        pods_table(sorted(snap.pods, key=lambda p: (p.pool, p.name)), snap.at),
        Text(""),
        Text(f"queue: {total} job(s) queued over every caller; yours:", style="bold"),
        queue_rows(snap.queued, snap.at),
    )


def top(
    interval: float = typer.Option(2.0, "--interval", "-n", help="Seconds between refreshes."),
    iterations: int | None = typer.Option(
        None, "--iterations", help="Stop after this many refreshes (default: until Ctrl-C)."
    ),
    once: bool = typer.Option(False, "--once", help="One refresh, then exit."),
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """A live view of the pools (held, busy, idle, queued), the pods and the queue."""
    if interval <= 0:
        raise typer.BadParameter("must be > 0", param_hint="--interval")
    if iterations is not None and iterations < 1:
        raise typer.BadParameter("must be >= 1", param_hint="--iterations")
    limit = 1 if once else iterations
    with connect(url, token) as client, broker_errors():
        try:
            _loop(client, interval, limit)
        except KeyboardInterrupt:
            raise typer.Exit(0) from None


def _loop(client: Client, interval: float, limit: int | None) -> None:
    """On a terminal, one view redrawn in place; otherwise each refresh printed in full after
    the last, at full width (a table in a file is never cut)."""
    from rich.live import Live

    from firepool.cli.common import PIPE_WIDTH

    console = stdout()
    live = None
    if console.is_terminal:
        live = Live(console=console, auto_refresh=False, screen=False)
        live.start()
    else:
        console = stdout(width=PIPE_WIDTH)
    try:
        refresh = 0
        while limit is None or refresh < limit:
            if refresh:
                time.sleep(interval)
            refresh += 1
            frame = view(read(client), refresh)
            if live is not None:
                live.update(frame, refresh=True)
            else:
                if refresh > 1:
                    console.print()
                console.print(frame)
    finally:
        if live is not None:
            live.stop()


def register(app: typer.Typer) -> None:
    app.command()(top)
