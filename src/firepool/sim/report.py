"""Experiment outputs: one JSON file, one markdown table and one PNG per experiment."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def md_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def write_outputs(
    out_dir: str | Path,
    name: str,
    data: dict[str, Any],
    markdown: str,
    plot: Callable[[Any], None] | None = None,
) -> list[Path]:
    """Write `<name>.json`, `<name>.md` and (when `plot` is given) `<name>.png`."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.json", out / f"{name}.md"]
    paths[0].write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    paths[1].write_text(markdown)
    if plot is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig = plt.figure(figsize=(9, 4.5))
        plot(fig)
        fig.tight_layout()
        png = out / f"{name}.png"
        fig.savefig(png, dpi=110)
        plt.close(fig)
        paths.append(png)
    return paths
