"""`sim gang-starvation`: a gang under a stream of one-pod jobs, with and without age-keyed
reservations (control/reservations.py). An extension beyond the papers, which name gang
starvation an open problem and measure nothing of it.

A fixed pool of 16 one-CPU pods (no owner hold: a pod retires after its job and the scaler
starts a fresh one) serves a Poisson stream of one-pod jobs at a utilisation near 0.85. Ten
minutes in, one caller submits a gang of 8 pods. Without reservations each pod that frees up
goes to a small job and the gang waits for 8 to be free at once; with them, the gang keeps the
pods that free up, up to the reservation's bound. Reported per arm: the gang's queue wait
(submit -> its pods start taking it; a gang not placed by the end counts as the whole
remaining run, marked censored), the small jobs' waits, and the reservation's cost: pods it
kept idle, in pod-seconds.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from firepool.control.reservations import ReservationRules
from firepool.model import PoolSpec
from firepool.sim.broker import JobRequest, SimBroker
from firepool.sim.loop import EventLoop
from firepool.sim.report import md_table, write_outputs
from firepool.sim.stats import pct
from firepool.sim.sweep import Cell, run_cells
from firepool.sim.venue import load_venue

PODS = 16
GANG = 8
ARMS = ("off", "on")


def gang_cell(
    arm: str,
    seed: int,
    *,
    horizon: float = 3600.0,
    utilisation: float = 0.85,
    mean_s: float = 60.0,
    gang_at: float = 600.0,
    gang_s: float = 300.0,
    hold_s: float = 600.0,
    venue: str = "production-cpu",
) -> dict[str, Any]:
    v = load_venue(venue)
    pool = PoolSpec(name="cpu", cpus_per_pod=1.0, min_count=PODS, max_idle_count=PODS,
                    max_count=PODS, idle_timeout=900.0, step=PODS, caller_hold_seconds=0.0)
    loop = EventLoop()
    rules = ReservationRules(hold_s=hold_s, rest_s=hold_s) if arm == "on" else None
    broker = SimBroker(loop, v, [pool], {"cpu": PODS}, random.Random(seed * 2 + 1),
                       gang_reservations=rules)
    broker.warm_up()
    t0 = loop.now
    work = random.Random(seed)
    # A pod is busy for the job plus the start of its replacement (no hold: pods retire).
    busy = mean_s + v.create.median + v.delete.median
    rate = utilisation * PODS / busy
    t, small = 0.0, 0

    def submit_small(req: JobRequest) -> None:
        broker.submit(req)

    while True:
        t += work.expovariate(rate)
        if t >= horizon:
            break
        req = JobRequest(caller=f"s{small % 50}", pool="cpu", duration=work.expovariate(1 / mean_s))
        loop.at(t0 + t, submit_small, req)
        small += 1
    gang: list[str] = []

    def submit_gang(_: object) -> None:
        gang.append(broker.submit(JobRequest(caller="gang", pool="cpu", duration=gang_s,
                                             pods=GANG)))

    loop.at(t0 + gang_at, submit_gang)
    loop.run(until=t0 + horizon)
    broker.stop()
    end = loop.now
    g = broker.stats[gang[0]]
    placed = g.launched >= 0.0
    smalls = [s for j, s in broker.stats.items() if j != gang[0] and s.launched >= 0.0]
    core = broker.core
    return {
        "arm": arm,
        "gang_wait": (g.launched if placed else end) - g.submitted,
        "censored": not placed,
        "small_wait": [s.queue_wait for s in smalls],
        "small_jobs": len(smalls),
        "held_pod_s": core.reservations.held_pod_seconds if core.reservations else 0.0,
        "reservations": core.reservations.opened if core.reservations else 0,
        "lapsed": core.reservations.lapsed if core.reservations else 0,
    }


def run_gang_starvation(
    out: str | Path,
    seeds: int = 10,
    workers: int | None = None,
    progress: bool = True,
    horizon: float = 3600.0,
    hold_s: float = 600.0,
) -> dict[str, Any]:
    cells: list[Cell] = [
        (gang_cell, {"arm": arm, "seed": s, "horizon": horizon, "hold_s": hold_s})
        for arm in ARMS
        for s in range(seeds)
    ]
    res = iter(run_cells(cells, workers=workers, label="gang-starvation", progress=progress))
    data: dict[str, Any] = {"seeds": seeds, "horizon": horizon, "hold_s": hold_s, "arms": []}
    rows = []
    for arm in ARMS:
        rs = [next(res) for _ in range(seeds)]
        waits = [r["gang_wait"] for r in rs]
        point = {
            "arm": arm,
            "gang_wait_p50": pct(waits, 50),
            "gang_wait_max": max(waits),
            "censored": sum(r["censored"] for r in rs),
            "small_wait_p50": pct([w for r in rs for w in r["small_wait"]], 50),
            "small_wait_p90": pct([w for r in rs for w in r["small_wait"]], 90),
            "held_pod_s_p50": pct([r["held_pod_s"] for r in rs], 50),
            "held_pod_s_max": max(r["held_pod_s"] for r in rs),
            "lapsed": sum(r["lapsed"] for r in rs),
            "runs": rs,
        }
        data["arms"].append(point)
        rows.append([
            "reservations " + arm,
            f"{point['gang_wait_p50']:.0f}",
            f"{point['gang_wait_max']:.0f}",
            f"{point['censored']}/{seeds}",
            f"{point['small_wait_p50']:.1f}",
            f"{point['small_wait_p90']:.1f}",
            f"{point['held_pod_s_p50']:.0f} (max {point['held_pod_s_max']:.0f})",
            point["lapsed"],
        ])
    md = md_table(
        ["arm", "gang wait p50 (s)", "gang wait max (s)", "gang not placed",
         "small wait p50 (s)", "small wait p90 (s)", "held pod-s p50", "lapsed"],
        rows,
    )
    write_outputs(out, "gang_starvation", data, md)
    data["markdown"] = md
    return data
