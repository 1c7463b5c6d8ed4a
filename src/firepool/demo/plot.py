"""The demo's figure: start latency and makespan by arm, for each workload, on this machine
(measured) and on the production H200 venue (simulated), written as one PNG."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from firepool.demo.report import ARM_NAMES

COLORS = {"on": "#3182bd", "off": "#9ecae1", "fresh": "#fd8d3c"}


def write_plot(
    local: list[dict[str, Any]], simulated: list[dict[str, Any]], path: Path, *, scale: float
) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(f"this machine (measured, durations x{scale:g})", local)]
    if simulated:
        panels.append(("production-h200 (simulated, paper durations)", simulated))
    fig, axes = plt.subplots(len(panels), 2, figsize=(11, 3.6 * len(panels)), squeeze=False)
    for row, (venue, rows) in enumerate(panels):
        workloads = list(dict.fromkeys(r["workload"] for r in rows))
        for col, (key, label) in enumerate(
            (("start_p50_s", "start latency p50 (s)"), ("makespan_s", "makespan (s)"))
        ):
            ax = axes[row][col]
            width = 0.8 / len(COLORS)
            for i, arm in enumerate(COLORS):
                values = [
                    next((r[key] for r in rows if r["workload"] == w and r["arm"] == arm), 0.0)
                    for w in workloads
                ]
                xs = [x + (i - 1) * width for x in range(len(workloads))]
                ax.bar(xs, values, width, label=ARM_NAMES[arm], color=COLORS[arm])
            ax.set_xticks(range(len(workloads)), workloads, fontsize=8)
            ax.set_ylabel(label)
            ax.set_title(venue, fontsize=9)
            ax.grid(axis="y", alpha=0.3)
            if row == 0 and col == 0:
                ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
