"""What every benchmark shares: percentiles, a printed table and a flat JSON result."""

from __future__ import annotations

import json
import math
import os
import platform
from collections.abc import Mapping, Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

#: The unit of the CPU times in /proc/PID/stat.
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in [0, 100]), the convention the papers use."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    low = math.floor(pos)
    high = math.ceil(pos)
    if low == high:
        return float(ordered[low])
    return float(ordered[low] + (ordered[high] - ordered[low]) * (pos - low))


def median(values: Sequence[float]) -> float:
    return percentile(values, 50.0)


def machine() -> dict[str, object]:
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "machine": platform.machine(),
    }


def proc_stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (the state onwards: `[11]` and
    `[12]` are its user and system CPU ticks, `[13]` and `[14]` its reaped children's), or
    None when the process is gone (or not on Linux)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def cpu_seconds(pid: int) -> float:
    """User + system CPU of one process so far, its children excluded; NaN when it is gone."""
    fields = proc_stat(pid)
    if fields is None:
        return math.nan
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def print_table(
    title: str,
    rows: Sequence[tuple[str, str, str]],
    columns: tuple[str, str, str] = ("metric", "value", "target"),
) -> None:
    """Rows of (metric, value, target), or of the given `columns`, printed as one table."""
    table = Table(title=title)
    table.add_column(columns[0])
    table.add_column(columns[1], justify="right")
    table.add_column(columns[2], justify="right")
    for metric, value, target in rows:
        table.add_row(metric, value, target)
    Console().print(table)


def write_json(path: str | None, result: Mapping[str, object]) -> None:
    if path is None:
        return
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(dict(result), indent=2, sort_keys=True) + "\n")
