"""Run independent cells across processes with a progress bar; results keep cell order.

Each cell is a picklable (function, kwargs) pair computed from a seed, so a sweep gives the same
numbers on 1 or 64 workers.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Callable, Sequence
from typing import Any

from rich.progress import Progress

Cell = tuple[Callable[..., Any], dict[str, Any]]


def _call(cell: Cell) -> Any:
    fn, kwargs = cell
    return fn(**kwargs)


def run_cells(
    cells: Sequence[Cell], *, workers: int | None = None, label: str = "sim", progress: bool = True
) -> list[Any]:
    n = workers if workers is not None else (os.cpu_count() or 1)
    n = max(1, min(n, len(cells)))
    out: list[Any] = []
    with Progress(disable=not progress, transient=True) as bar:
        task = bar.add_task(label, total=len(cells))
        if n == 1:
            for cell in cells:
                out.append(_call(cell))
                bar.advance(task)
            return out
        ctx = mp.get_context("fork") if hasattr(os, "fork") else mp.get_context()
        with ctx.Pool(n) as pool:
            for result in pool.imap(_call, cells, chunksize=1):
                out.append(result)
                bar.advance(task)
    return out
