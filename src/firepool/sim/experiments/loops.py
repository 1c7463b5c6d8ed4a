"""`sim loops` (broker paper Table 5) and `sim standby` (Table 6): paired arms per seed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from firepool.sim.experiments.runs import loop_cell, standby_cell
from firepool.sim.report import md_table, write_outputs
from firepool.sim.stats import bootstrap_ci, fmt_ci, pct
from firepool.sim.sweep import Cell, run_cells

#: Table 5's columns: (label, venue, workload, arm compared against Reuse On, paper speedup).
COLUMNS: tuple[tuple[str, str, str, str, float], ...] = (
    ("H200 W-Agent vs fresh", "production-h200", "agent4", "fresh", 13.0),
    ("H200 W-RL vs fresh", "production-h200", "rl", "fresh", 10.8),
    ("H200 Agent vs Reuse Off", "production-h200", "agent2", "off", 3.6),
    ("CPU RL vs Reuse Off", "production-cpu", "rl", "off", 4.5),
    ("CPU Agent vs Reuse Off", "production-cpu", "agent4", "off", 2.2),
)


def run_loops(
    out: str | Path,
    repeats: int = 10,
    workers: int | None = None,
    progress: bool = True,
    columns: tuple[tuple[str, str, str, str, float], ...] = COLUMNS,
) -> dict[str, Any]:
    cells: list[Cell] = []
    for _, venue, wl, arm, _ in columns:
        for seed in range(repeats):
            for a in ("on", arm):
                cells.append((loop_cell, {"venue": venue, "workload": wl, "arm": a, "seed": seed}))
    results = iter(run_cells(cells, workers=workers, label="loops", progress=progress))
    data: dict[str, Any] = {"repeats": repeats, "columns": []}
    rows = []
    for label, venue, wl, arm, paper in columns:
        on, off = [], []
        for _ in range(repeats):
            on.append(next(results))
            off.append(next(results))
        s_on = [x for r in on for x in r["start"]]
        s_off = [x for r in off for x in r["start"]]
        p50_diff = bootstrap_ci(
            [pct(b["start"], 50) - pct(a["start"], 50) for a, b in zip(on, off, strict=True)]
        )
        mk_on = pct([r["makespan"] for r in on], 50)
        mk_off = pct([r["makespan"] for r in off], 50)
        mk_diff = bootstrap_ci(
            [b["makespan"] - a["makespan"] for a, b in zip(on, off, strict=True)]
        )
        speedup = mk_off / mk_on
        col = {
            "label": label,
            "venue": venue,
            "workload": wl,
            "arm": arm,
            "jobs": sum(r["jobs"] for r in on + off),
            "start_p50": [pct(s_on, 50), pct(s_off, 50)],
            "start_p90": [pct(s_on, 90), pct(s_off, 90)],
            "paired_p50_diff": p50_diff,
            "makespan": [mk_on, mk_off],
            "paired_makespan_diff": mk_diff,
            "speedup": speedup,
            "paper_speedup": paper,
            "in_band": 0.69 * paper <= speedup <= 1.44 * paper,
            "paths": [_merge(r["paths"] for r in on), _merge(r["paths"] for r in off)],
        }
        data["columns"].append(col)
        rows.append(
            [
                f"{label} ({col['jobs']})",
                f"{col['start_p50'][0]:.2f} / {col['start_p50'][1]:.1f}",
                f"{col['start_p90'][0]:.2f} / {col['start_p90'][1]:.1f}",
                fmt_ci(p50_diff),
                f"{mk_on:.1f} / {mk_off:.1f}",
                f"{speedup:.1f}x (paper {paper}x)",
            ]
        )
    md = md_table(
        [
            "column (N)",
            "start p50 On/Other (s)",
            "start p90 On/Other (s)",
            "paired p50 diff (s)",
            "makespan On/Other (s)",
            "loop speedup",
        ],
        rows,
    )
    write_outputs(out, "loops", data, md, lambda fig: _plot_speedups(fig, data))
    data["markdown"] = md
    return data


def _merge(dicts: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for d in dicts:
        for k, v in d.items():
            out[k] = out.get(k, 0) + v
    return out


def _plot_speedups(fig: Any, data: dict[str, Any]) -> None:
    ax = fig.add_subplot(1, 1, 1)
    cols = data["columns"]
    x = range(len(cols))
    ax.bar([i - 0.2 for i in x], [c["speedup"] for c in cols], 0.4, label="simulated")
    ax.bar([i + 0.2 for i in x], [c["paper_speedup"] for c in cols], 0.4, label="paper")
    for i, c in enumerate(cols):
        ax.plot([i - 0.4, i + 0.4], [0.69 * c["paper_speedup"]] * 2, "k:", lw=0.8)
        ax.plot([i - 0.4, i + 0.4], [1.44 * c["paper_speedup"]] * 2, "k:", lw=0.8)
    ax.set_xticks(list(x), [c["label"] for c in cols], rotation=15, fontsize=8)
    ax.set_ylabel("loop speedup of Reuse On (x)")
    ax.set_title("Table 5: makespan speedup (dotted: paper prediction band x0.69-1.44)")
    ax.legend()


def run_standby(
    out: str | Path,
    repeats: int = 10,
    workers: int | None = None,
    progress: bool = True,
    venue: str = "production-h200",
) -> dict[str, Any]:
    cells: list[Cell] = []
    for seed in range(repeats):
        for on in (True, False):
            cells.append((standby_cell, {"venue": venue, "standby": on, "seed": seed}))
    res = run_cells(cells, workers=workers, label="standby", progress=progress)
    arms = {"on": res[0::2], "off": res[1::2]}
    data: dict[str, Any] = {"repeats": repeats, "venue": venue}
    rows = []
    for name, runs in arms.items():
        hand = [x for r in runs for x in r["handover"]]
        by = _merge(r["handover_paths"] for r in runs)
        starts = [x for r in runs for x in r["start"]]
        data[name] = {
            "handovers": len(hand),
            "by_standby": by.get("standby", 0),
            "handover_wait_p50": pct(hand, 50),
            "start_p50": pct(starts, 50),
            "start_p90": pct(starts, 90),
            "makespan_p50": pct([r["makespan"] for r in runs], 50),
        }
    diff = bootstrap_ci(
        [b["makespan"] - a["makespan"] for a, b in zip(arms["on"], arms["off"], strict=True)]
    )
    data["paired_makespan_diff"] = diff
    on, off = data["on"], data["off"]
    data["ratio"] = off["makespan_p50"] / on["makespan_p50"]
    rows = [
        [
            "handovers served by standby",
            f"{on['by_standby']}/{on['handovers']}",
            f"{off['by_standby']}/{off['handovers']}",
            "101/117 vs 0/156",
        ],
        [
            "queue wait at handover, median (s)",
            f"{on['handover_wait_p50']:.2f}",
            f"{off['handover_wait_p50']:.1f}",
            "0.94 vs 51.0",
        ],
        [
            "submit->first p50 (s)",
            f"{on['start_p50']:.2f}",
            f"{off['start_p50']:.1f}",
            "1.66 vs 28.2",
        ],
        [
            "loop makespan median (s)",
            f"{on['makespan_p50']:.0f}",
            f"{off['makespan_p50']:.0f} ({data['ratio']:.1f}x)",
            "337 vs 1,023 (3.0x)",
        ],
        ["paired makespan diff (s)", fmt_ci(diff, 0), "", "+685 [591, 766]"],
    ]
    md = md_table(["metric", "standby on", "standby off", "paper (on vs off)"], rows)

    def plot(fig: Any) -> None:
        ax = fig.add_subplot(1, 1, 1)
        for name, runs in arms.items():
            xs = sorted(max(x, 1e-3) for r in runs for x in r["start"])
            ax.plot(xs, [(i + 1) / len(xs) for i in range(len(xs))], label=f"standby {name}")
        ax.set_xscale("log")
        ax.set_xlabel("submit -> first instruction (s, log)")
        ax.set_ylabel("fraction of jobs")
        ax.set_title("Table 6 / Figure 4d: standby benchmark")
        ax.legend()

    write_outputs(out, "standby", data, md, plot)
    data["markdown"] = md
    return data
