"""`sim frontier` (broker paper Figure 6b, appendix C.1) and `sim lengths` (Figure 7).

Frontier: held capacity (unit-seconds held from create to delete over the run, divided by an
always-on pool sized to peak concurrency) against median start latency, for keep-alives, floor
x idle-cap configurations, a fresh pod per job and the always-on pool, on steady, bursty and
diurnal agent sessions with the production CPU start. Lengths: Reuse On over Reuse Off loop
speedup as job bodies and think times grow.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from firepool.sim.experiments.runs import loop_cell, sessions_cell
from firepool.sim.report import md_table, write_outputs
from firepool.sim.stats import pct
from firepool.sim.sweep import Cell, run_cells

KEEP_ALIVES = (15.0, 60.0, 120.0, 300.0, 900.0)
CEILING = 16


def frontier_configs() -> list[tuple[str, str, dict[str, Any]]]:
    """(label, arm, pool overrides) for every point of the frontier."""
    out: list[tuple[str, str, dict[str, Any]]] = [
        (
            f"keep-alive {int(t)} s",
            "on",
            {"min_count": 0, "max_idle_count": CEILING, "idle_timeout": t},
        )
        for t in KEEP_ALIVES
    ]
    for floor in (1, 2, 4):
        out.append(
            (
                f"floor {floor}, idle cap 2, 60 s",
                "on",
                {"min_count": floor, "max_idle_count": 2, "idle_timeout": 60.0},
            )
        )
    out.append(("fresh pod per job", "fresh", {"min_count": 0, "max_idle_count": 0}))
    out.append(
        (
            "floor = ceiling (16)",
            "on",
            {"min_count": CEILING, "max_idle_count": CEILING, "idle_timeout": 900.0},
        )
    )
    return out


def run_frontier(
    out: str | Path,
    seeds: int = 3,
    workers: int | None = None,
    progress: bool = True,
    horizon: float = 7200.0,
    rate_per_h: float = 12.0,
    venue: str = "production-cpu",
    patterns: tuple[str, ...] = ("steady", "bursty", "diurnal"),
) -> dict[str, Any]:
    configs = frontier_configs()
    cells: list[Cell] = []
    for pattern in patterns:
        for _, arm, over in configs:
            for seed in range(seeds):
                cells.append(
                    (
                        sessions_cell,
                        {
                            "venue": venue,
                            "pattern": pattern,
                            "arm": arm,
                            "seed": seed,
                            "horizon": horizon,
                            "rate_per_h": rate_per_h,
                            **over,
                        },
                    )
                )
    res = iter(run_cells(cells, workers=workers, label="frontier", progress=progress))
    data: dict[str, Any] = {"seeds": seeds, "venue": venue, "horizon": horizon, "points": []}
    rows = []
    for pattern in patterns:
        runs = {label: [next(res) for _ in range(seeds)] for label, _, _ in configs}
        base = runs["floor = ceiling (16)"]
        base_p50 = pct([pct(r["start"], 50) for r in base], 50)
        for label, _, _ in configs:
            rs = runs[label]
            held = pct([r["held_ratio"] for r in rs], 50)
            p50 = pct([pct(r["start"], 50) for r in rs], 50)
            p90 = pct([pct(r["start"], 90) for r in rs], 50)
            point = {
                "pattern": pattern,
                "config": label,
                "held_ratio": held,
                "start_p50": p50,
                "start_p90": p90,
                "delta_p50": p50 - base_p50,
                "peak_units": pct([r["peak_units"] for r in rs], 50),
            }
            data["points"].append(point)
            rows.append([pattern, label, f"{held:.3f}", f"{p50 - base_p50:+.2f}", f"{p90:.1f}"])
    md = md_table(
        ["pattern", "configuration", "held / always-on peak", "delta p50 (s)", "p90 (s)"], rows
    )

    def plot(fig: Any) -> None:
        marks = {"steady": "o", "bursty": "s", "diurnal": "^"}
        labels = [label for label, _, _ in configs]
        colours = {label: f"C{k % 10}" for k, label in enumerate(labels)}
        for k, (metric, name) in enumerate(
            (
                ("start_p50", "start latency p50 (s, log)"),
                ("start_p90", "start latency p90 (s, log)"),
            )
        ):
            ax = fig.add_subplot(1, 2, k + 1)
            for p in data["points"]:
                ax.scatter(
                    p["held_ratio"],
                    max(p[metric], 1e-2),
                    s=28,
                    marker=marks.get(p["pattern"], "o"),
                    color=colours[p["config"]],
                    label=p["config"] if p["pattern"] == patterns[0] else None,
                )
            ax.axvline(1.0, color="k", lw=0.6, ls=":")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("held unit-time / always-on pool at peak (log)")
            ax.set_ylabel(name)
            if k == 0:
                ax.legend(fontsize=6, loc="upper left")
        fig.suptitle(
            "Figure 6b: held capacity vs start latency "
            "(o steady, s bursty, ^ diurnal; lower-left is better)"
        )

    write_outputs(out, "frontier", data, md, plot)
    data["markdown"] = md
    return data


LENGTHS = (1.0, 2.0, 5.0, 10.0, 30.0, 100.0, 300.0, 1000.0)
THINKS = (0.0, 30.0, 120.0, 600.0, 1800.0)


def run_lengths(
    out: str | Path,
    replicates: int = 3,
    workers: int | None = None,
    progress: bool = True,
    venue: str = "production-cpu",
    lengths: tuple[float, ...] = LENGTHS,
    thinks: tuple[float, ...] = THINKS,
) -> dict[str, Any]:
    cells: list[Cell] = []
    keys = []
    for wl in ("rl", "agent4"):
        for think in thinks:
            for body in lengths:
                keys.append((wl, think, body))
                for seed in range(replicates):
                    for arm in ("on", "off"):
                        cells.append(
                            (
                                loop_cell,
                                {
                                    "venue": venue,
                                    "workload": wl,
                                    "arm": arm,
                                    "seed": seed,
                                    "body": body,
                                    "think": think,
                                },
                            )
                        )
    res = iter(run_cells(cells, workers=workers, label="lengths", progress=progress))
    data: dict[str, Any] = {"replicates": replicates, "venue": venue, "points": []}
    rows = []
    for wl, think, body in keys:
        ratios = []
        for _ in range(replicates):
            on, off = next(res), next(res)
            ratios.append(off["makespan"] / on["makespan"])
        point = {
            "workload": wl,
            "think": think,
            "body": body,
            "speedup": pct(ratios, 50),
            "low": min(ratios),
            "high": max(ratios),
        }
        data["points"].append(point)
        rows.append([wl, f"{think:g}", f"{body:g}", f"{point['speedup']:.2f}"])
    md = md_table(["workload", "think (s)", "body (s)", "speedup On over Off"], rows)

    def plot(fig: Any) -> None:
        for k, wl in enumerate(("rl", "agent4")):
            ax = fig.add_subplot(1, 2, k + 1)
            for think in thinks:
                pts = [p for p in data["points"] if p["workload"] == wl and p["think"] == think]
                xs = [p["body"] for p in pts]
                ax.plot(xs, [p["speedup"] for p in pts], label=f"think {think:g} s")
                ax.fill_between(xs, [p["low"] for p in pts], [p["high"] for p in pts], alpha=0.2)
            ax.axhline(1.1, color="k", lw=0.6, ls=":")
            ax.set_xscale("log")
            ax.set_xlabel("job body length L (s, log)")
            ax.set_ylabel("makespan Reuse Off / Reuse On")
            ax.set_title(f"Figure 7: {'CPU RL loop' if wl == 'rl' else 'CPU agent loop'}")
            ax.legend(fontsize=7)

    write_outputs(out, "lengths", data, md, plot)
    data["markdown"] = md
    return data
