"""`sim fragmentation` (broker paper Figure 5, appendix C.5): one late-bound pool against a
pool per environment, as the number of distinct environments E grows.

Sessions arrive as a Poisson stream; each picks its environment with Zipf (s = 1) popularity.
`shared`: one pool, jobs bind their environment late; `per-env`: one pool per environment,
each may grow to the whole 64-pod budget; `split`: the budget split evenly between them.
Production CPU start, 900 s keep-alive, no floor.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from firepool.model import PoolSpec
from firepool.sim.agentic import Tagger, session_starts, w_agent, w_rl
from firepool.sim.experiments.runs import run_programs, summarize
from firepool.sim.programs import Program
from firepool.sim.report import md_table, write_outputs
from firepool.sim.stats import pct
from firepool.sim.sweep import Cell, run_cells

ENVS = (1, 2, 4, 8, 16, 32, 64)
MODES = ("shared", "per-env", "split")
BUDGET = 64


def zipf_pick(rng: random.Random, n: int) -> int:
    weights = [1.0 / (k + 1) for k in range(n)]
    return rng.choices(range(n), weights)[0]


def fragmentation_cell(
    panel: str,
    mode: str,
    envs: int,
    seed: int,
    horizon: float = 3600.0,
    rate_per_h: float = 30.0,
    venue: str = "production-cpu",
    keep_alive: float = 900.0,
) -> dict[str, Any]:
    n_pools = 1 if mode == "shared" else envs
    ceiling = BUDGET if mode != "split" else max(1, BUDGET // envs)
    pools = [
        PoolSpec(
            name=f"env-{k}",
            cpus_per_pod=1.0,
            min_count=0,
            max_idle_count=ceiling,
            max_count=ceiling,
            idle_timeout=keep_alive,
            step=8,
        )
        for k in range(n_pools)
    ]
    taggers = [Tagger("on", p.name) for p in pools]

    def programs(rng: random.Random) -> list[tuple[float, Program]]:
        out: list[tuple[float, Program]] = []
        for i, start in enumerate(session_starts("steady", rng, horizon, rate_per_h)):
            env = zipf_pick(rng, envs)
            tagger = taggers[0 if mode == "shared" else env]
            sub = random.Random(rng.getrandbits(64))
            if panel == "rl":
                out.append((start, w_rl(tagger, sub, f"s{i}")))
            else:
                out.append((start, w_agent(tagger, sub, f"s{i}", iterations=sub.randint(3, 8))))
        return out

    broker, runner, t0 = run_programs(venue, pools, {"cpu": BUDGET}, seed, programs)
    return summarize(broker, runner, t0)


def run_fragmentation(
    out: str | Path,
    seeds: int = 10,
    workers: int | None = None,
    progress: bool = True,
    envs: tuple[int, ...] = ENVS,
    horizon: float = 3600.0,
) -> dict[str, Any]:
    keys = [(panel, mode, e) for panel in ("rl", "agent") for mode in MODES for e in envs]
    cells: list[Cell] = [
        (fragmentation_cell, {"panel": p, "mode": m, "envs": e, "seed": s, "horizon": horizon})
        for p, m, e in keys
        for s in range(seeds)
    ]
    res = iter(run_cells(cells, workers=workers, label="fragmentation", progress=progress))
    data: dict[str, Any] = {"seeds": seeds, "points": []}
    rows = []
    for panel, mode, e in keys:
        rs = [next(res) for _ in range(seeds)]
        point = {
            "panel": panel,
            "mode": mode,
            "envs": e,
            "hit_rate": pct([r["hit_rate"] for r in rs], 50),
            "held_ratio": pct([r["held_ratio"] for r in rs], 50),
            "start_p90": pct([x for r in rs for x in r["start"]], 90),
        }
        data["points"].append(point)
        rows.append(
            [
                panel,
                mode,
                e,
                f"{point['hit_rate']:.2f}",
                f"{point['held_ratio']:.2f}",
                f"{point['start_p90']:.1f}",
            ]
        )
    md = md_table(
        ["panel", "mode", "E", "warm hit rate", "held / always-on", "p90 start (s)"], rows
    )

    def plot(fig: Any) -> None:
        for k, (metric, label) in enumerate(
            (
                ("hit_rate", "warm-or-standby hit rate"),
                ("held_ratio", "held pod-time / always-on"),
                ("start_p90", "p90 start latency (s)"),
            )
        ):
            ax = fig.add_subplot(1, 3, k + 1)
            for panel, style in (("rl", "-"), ("agent", "--")):
                for mode in MODES:
                    pts = [p for p in data["points"] if p["panel"] == panel and p["mode"] == mode]
                    ax.plot(
                        [p["envs"] for p in pts],
                        [p[metric] for p in pts],
                        style,
                        marker="o",
                        ms=3,
                        label=f"{mode} ({panel})",
                    )
            ax.set_xscale("log", base=2)
            ax.set_xlabel("distinct environments E")
            ax.set_ylabel(label)
            if metric == "start_p90":
                ax.set_yscale("log")
        fig.axes[0].legend(fontsize=6)
        fig.suptitle("Figure 5: environment fragmentation")

    write_outputs(out, "fragmentation", data, md, plot)
    data["markdown"] = md
    return data
