"""`sim oak-table` (scheduler paper Table II), `sim oak-ablation` (Table III) and `sim oak-sweep`
(section V-C/V-E: lambda up to 0.15 with Pollux, Gavel, DRF and the NSGA-II hybrid).

Every policy of a cell sees the same workload (same seed) and the same failure stream.
Ablation cells: (a) Sia; (b) goodput + age: OAK with progress hidden from the policy, so r = 1;
(c) goodput + restart: OAK with alpha = 0, so K = 1; (d) full OAK.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from firepool.scheduling import OakParams, OakPolicy, available_backends, make_policy
from firepool.scheduling.rounds import RoundPolicy
from firepool.sim.report import md_table, write_outputs
from firepool.sim.stats import bootstrap_ci, pct
from firepool.sim.sweep import Cell, run_cells
from firepool.sim.training import simulate
from firepool.sim.trainloads import SIZES, paper_workload, relative_load_workload

WORKLOADS = tuple(SIZES)
LAMBDAS = (0.0, 0.05, 0.10)
CELLS = {"a": "Sia", "b": "+Age", "c": "+Restart", "d": "Full OAK", "e": "Lookahead (ours)"}


def _policy(name: str) -> tuple[RoundPolicy, bool]:
    """A policy by name, with the ablation variants; the flag hides progress (r = 1)."""
    if name == "cell-a":
        return make_policy("sia"), False
    if name == "cell-b":
        return OakPolicy(name="oak+age"), True
    if name == "cell-c":
        return OakPolicy(OakParams(alpha=0.0), name="oak+restart"), False
    if name == "cell-d":
        return make_policy("oak"), False
    if name == "cell-e":
        return make_policy(OURS), False
    return make_policy(name), False


def train_cell(policy: str, workload: str, lam: float, seed: int) -> dict[str, Any]:
    """One (policy, workload, lambda, seed) run; `workload` may be a relative-load CSV path."""
    jobs = (
        relative_load_workload(workload)
        if workload.endswith(".csv")
        else paper_workload(workload, seed)
    )
    pol, mask = _policy(policy)
    available_backends()  # import the solvers now, so decide_ms times decisions, not imports
    res = simulate(pol, jobs, lam=lam, seed=seed, mask_restart=mask)
    return {
        "policy": policy,
        "workload": workload,
        "lam": lam,
        "seed": seed,
        "jct": res.all_jct,  # unfinished jobs censored at the horizon
        "mean": res.mean_jct,
        "max": res.max_jct,
        "restarts": res.restarts,
        "rounds": res.rounds,
        "decisions": res.decisions,
        "decide_ms": 1000.0 * res.decide_s / max(1, res.decisions),
        "t_ckpt": res.t_ckpt,
        "unfinished": res.unfinished,
    }


def _grid(
    policies: tuple[str, ...],
    workloads: tuple[str, ...],
    lams: tuple[float, ...],
    seeds: int,
    workers: int | None,
    progress: bool,
    label: str,
) -> dict[tuple[str, str, float], list[dict[str, Any]]]:
    keys = [(p, w, lam) for w in workloads for lam in lams for p in policies]
    cells: list[Cell] = [
        (train_cell, {"policy": p, "workload": w, "lam": lam, "seed": s})
        for p, w, lam in keys
        for s in range(seeds)
    ]
    res = iter(run_cells(cells, workers=workers, label=label, progress=progress))
    return {k: [next(res) for _ in range(seeds)] for k in keys}


def _mean(runs: list[dict[str, Any]], key: str) -> float:
    return float(sum(r[key] for r in runs)) / len(runs)


#: Table II's policies: OAK, the two faithful Sia modes, and ours.
TABLE_POLICIES = ("oak", "sia", "sia-reference", "lookahead")
#: The policy of our own, compared with the faithful Sia ("sia") like OAK.
OURS = "lookahead"
BASELINE = "sia"


def _paired(runs: list[dict[str, Any]], base: list[dict[str, Any]], key: str
            ) -> tuple[float, float, float]:
    """Mean over seeds of the seed's own 1 - policy/baseline, with its 95% bootstrap CI."""
    return bootstrap_ci([1 - r[key] / b[key] for r, b in zip(runs, base, strict=True)],
                        stat="mean")


def table_cells(
    grid: dict[tuple[str, str, float], list[dict[str, Any]]],
    policies: tuple[str, ...],
    workloads: tuple[str, ...],
    lams: tuple[float, ...],
    baseline: str,
) -> list[dict[str, Any]]:
    """One JSON cell per (workload, lambda, policy); paired gains against `baseline` when it
    ran (positive = lower JCT than the baseline)."""
    cells: list[dict[str, Any]] = []
    for w in workloads:
        for lam in lams:
            base = grid.get((baseline, w, lam))
            for p in policies:
                runs = grid[(p, w, lam)]
                cell: dict[str, Any] = {
                    "workload": w,
                    "lambda": lam,
                    "policy": p,
                    "seeds": len(runs),
                    "mean_jct_s": _mean(runs, "mean"),
                    "max_jct_s": _mean(runs, "max"),
                    "median_seed_mean_s": pct([r["mean"] for r in runs], 50),
                    "unfinished": sum(r["unfinished"] for r in runs),
                    "restarts": _mean(runs, "restarts"),
                    "decide_ms": _mean(runs, "decide_ms"),
                    "seed_means": [r["mean"] for r in runs],
                    "seed_maxes": [r["max"] for r in runs],
                }
                if base is not None and p != baseline:
                    cell["vs"] = baseline
                    cell["delta_mean"] = 1 - cell["mean_jct_s"] / _mean(base, "mean")
                    cell["delta_max"] = 1 - cell["max_jct_s"] / _mean(base, "max")
                    cell["paired_mean_gain"] = _paired(runs, base, "mean")
                    cell["paired_max_gain"] = _paired(runs, base, "max")
                cells.append(cell)
    return cells


def _ci_text(ci: tuple[float, float, float]) -> str:
    return f"{100 * ci[0]:+.1f}% [{100 * ci[1]:+.1f}, {100 * ci[2]:+.1f}]"


def run_oak_table(
    out: str | Path,
    seeds: int = 10,
    workers: int | None = None,
    progress: bool = True,
    workloads: tuple[str, ...] = WORKLOADS,
    lams: tuple[float, ...] = LAMBDAS,
    policies: tuple[str, ...] = TABLE_POLICIES,
) -> dict[str, Any]:
    """Table II for `policies`, each against the faithful Sia (run it too for the deltas)."""
    grid = _grid(policies, workloads, lams, seeds, workers, progress, "oak-table")
    cells = table_cells(grid, policies, workloads, lams, BASELINE)
    data: dict[str, Any] = {"seeds": seeds, "ours": OURS, "baseline": BASELINE,
                            "policies": list(policies), "cells": cells}
    rows = []
    for c in cells:
        rows.append([
            c["workload"],
            f"{c['lambda']:.2f}",
            c["policy"],
            f"{c['mean_jct_s']:,.0f}",
            f"{c['max_jct_s']:,.0f}",
            _ci_text(c["paired_mean_gain"]) if "vs" in c else "-",
            _ci_text(c["paired_max_gain"]) if "vs" in c else "-",
            f"{c['restarts']:.0f}",
            str(c["unfinished"]),
        ])
    md = md_table(
        ["workload", "lambda", "policy", "mean JCT", "max JCT",
         f"mean gain vs {BASELINE} [95% CI]", f"max gain vs {BASELINE} [95% CI]",
         "restarts", "unfinished"],
        rows,
    )

    def plot(fig: Any) -> None:
        ax = fig.add_subplot(1, 1, 1)
        for p in policies:
            if p == BASELINE:
                continue
            for w in workloads:
                pts = [c for c in cells if c["workload"] == w and c["policy"] == p]
                if pts and "vs" in pts[0]:
                    ax.plot([c["lambda"] for c in pts],
                            [100 * c["paired_mean_gain"][0] for c in pts],
                            marker="o", label=f"{p} {w}")
        ax.fill_between([0.097, 0.103], 15.2, 70.9, color="g", alpha=0.25,
                        label="paper: OAK 15.2-70.9% at 0.10")
        ax.axhline(0, color="k", lw=0.6)
        ax.set_xlabel("failure rate lambda (per round per running job)")
        ax.set_ylabel(f"mean JCT reduction over {BASELINE} (%, paired per seed)")
        ax.set_title("Table II")
        ax.legend(fontsize=6)

    write_outputs(out, "oak-table", data, md, plot)
    data["markdown"] = md
    return data


def run_oak_ablation(
    out: str | Path,
    seeds: int = 10,
    workers: int | None = None,
    progress: bool = True,
    workloads: tuple[str, ...] = ("medium", "congestion"),
    lams: tuple[float, ...] = (0.05, 0.10),
) -> dict[str, Any]:
    pols = tuple(f"cell-{c}" for c in CELLS)
    grid = _grid(pols, workloads, lams, seeds, workers, progress, "oak-ablation")
    data: dict[str, Any] = {"seeds": seeds, "rows": []}
    rows = []
    for lam in lams:
        for w in workloads:
            for c, label in CELLS.items():
                runs = grid[(f"cell-{c}", w, lam)]
                pooled = [x for r in runs for x in r["jct"]]
                means = [r["mean"] for r in runs]
                mu = sum(means) / len(means)
                sd = (sum((m - mu) ** 2 for m in means) / max(1, len(means) - 1)) ** 0.5
                row = {
                    "lam": lam,
                    "workload": w,
                    "cell": c,
                    "mean": mu,
                    "p90": pct(pooled, 90),
                    "p95": pct(pooled, 95),
                    "p99": pct(pooled, 99),
                    "max": max(pooled),
                    "sigma_mean": sd,
                    "unfinished": sum(r["unfinished"] for r in runs),
                }
                data["rows"].append(row)
                rows.append(
                    [
                        f"{lam:.2f}",
                        w,
                        f"({c}) {label}",
                        f"{mu:,.0f}",
                        f"{row['p90']:,.0f}",
                        f"{row['p95']:,.0f}",
                        f"{row['p99']:,.0f}",
                        f"{row['max']:,.0f}",
                        f"{sd:,.0f}",
                        str(row["unfinished"]),
                    ]
                )
    md = md_table(
        ["lambda", "workload", "cell", "mean", "p90", "p95", "p99", "max", "sigma of mean",
         "unfinished at horizon"],
        rows,
    )

    def plot(fig: Any) -> None:
        for k, w in enumerate(workloads):
            ax = fig.add_subplot(1, len(workloads), k + 1)
            for c in CELLS:
                pooled = sorted(x for r in grid[(f"cell-{c}", w, lams[-1])] for x in r["jct"])
                ax.plot(
                    pooled,
                    [(i + 1) / len(pooled) for i in range(len(pooled))],
                    label=f"({c}) {CELLS[c]}",
                )
            ax.set_xscale("log")
            ax.set_xlabel("JCT (s, log)")
            ax.set_ylabel("fraction of jobs")
            ax.set_title(f"Table III: {w}, lambda = {lams[-1]}")
            ax.legend(fontsize=7)

    write_outputs(out, "oak-ablation", data, md, plot)
    data["markdown"] = md
    return data


SWEEP_POLICIES = ("oak", "sia", "sia-reference", "lookahead", "pollux", "gavel", "drf",
                  "oak-nsga2")


def run_oak_sweep(
    out: str | Path,
    seeds: int = 5,
    workers: int | None = None,
    progress: bool = True,
    workloads: tuple[str, ...] = ("medium", "congestion"),
    lams: tuple[float, ...] = (0.0, 0.02, 0.05, 0.10, 0.15),
    policies: tuple[str, ...] = SWEEP_POLICIES,
) -> dict[str, Any]:
    grid = _grid(policies, workloads, lams, seeds, workers, progress, "oak-sweep")
    data: dict[str, Any] = {"seeds": seeds, "rows": []}
    rows = []
    for w in workloads:
        for lam in lams:
            for p in policies:
                runs = grid[(p, w, lam)]
                row = {
                    "workload": w,
                    "lam": lam,
                    "policy": p,
                    "mean": _mean(runs, "mean"),
                    "max": _mean(runs, "max"),
                    "decide_ms": _mean(runs, "decide_ms"),
                    "restarts": _mean(runs, "restarts"),
                    "unfinished": sum(r["unfinished"] for r in runs),
                }
                data["rows"].append(row)
                rows.append(
                    [
                        w,
                        f"{lam:.2f}",
                        p,
                        f"{row['mean']:,.0f}",
                        f"{row['max']:,.0f}",
                        f"{row['decide_ms']:.2f}",
                        f"{row['restarts']:.1f}",
                        str(row["unfinished"]),
                    ]
                )
    md = md_table(
        ["workload", "lambda", "policy", "mean JCT", "max JCT", "decision (ms)", "restarts",
         "unfinished"],
        rows,
    )

    def plot(fig: Any) -> None:
        for k, w in enumerate(workloads):
            ax = fig.add_subplot(1, len(workloads), k + 1)
            for p in policies:
                pts = [r for r in data["rows"] if r["workload"] == w and r["policy"] == p]
                ax.plot([r["lam"] for r in pts], [r["mean"] for r in pts], marker="o", label=p)
            ax.set_xlabel("failure rate lambda")
            ax.set_ylabel("mean JCT (s)")
            ax.set_title(f"lambda sweep: {w}")
            ax.legend(fontsize=7)

    write_outputs(out, "oak-sweep", data, md, plot)
    data["markdown"] = md
    return data
