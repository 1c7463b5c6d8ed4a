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


def print_table(title: str, rows: Sequence[tuple[str, str, str]]) -> None:
    """Rows of (metric, value, target) printed as one table."""
    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("target", justify="right")
    for metric, value, target in rows:
        table.add_row(metric, value, target)
    Console().print(table)


def write_json(path: str | None, result: Mapping[str, object]) -> None:
    if path is None:
        return
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(dict(result), indent=2, sort_keys=True) + "\n")
