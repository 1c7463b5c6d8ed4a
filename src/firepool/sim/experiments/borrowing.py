"""Borrowed capacity (broker paper, section 7 and appendix A.7, run in C.3), in the simulator.

The paper's run (kwok, a stub capacity controller): 10 ceiling cycles and 10 owner cycles;
time to borrow 11.8 s [10.5, 13.2]; release to a lowered ceiling 30.0 s; owners placed 80 of
80 pods within 240 s; 1.0 borrowed GPU released per owner GPU in every cycle; 0 over-placement.

Here: a 16-card cluster whose owner reserved 8 cards; the broker's own budget is the other 8;
a stub controller publishes the owner's unused cards; the broker polls it every 10 s (the
paper's default) and feeds each reading to the core, which grows the ledger's limit or gives
back one card per card (idle pods first, then the youngest job, retried as `Reclaimed`).
16 callers with no think time keep the broker wanting every card it may hold. A ceiling cycle
publishes 8 cards, then withdraws them; an owner cycle publishes 8, then the owner asks for 8
pods and places each on a free card. Given back per owner GPU is the units the core's give-back
plans freed over the units they were asked for (beyond what was already leaving) in the
cycle. The venue is `local-cluster` (pods start in about 3 s,
closer to kwok's simulated nodes than production's 22 s).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from firepool.model import JobState, PodState, PoolSpec
from firepool.sim.broker import JobRequest, SimBroker
from firepool.sim.loop import EventLoop
from firepool.sim.report import md_table, write_outputs
from firepool.sim.stats import bootstrap_ci
from firepool.sim.sweep import Cell, run_cells
from firepool.sim.venue import load_venue

MODEL = "H200"
CLUSTER = 16
OWN = 8  # the broker's own budget
OWNER = 8  # the owner's reserved cards (what the broker may borrow when unused)
POOL = PoolSpec(name="h200", accelerator=MODEL, accelerators_per_pod=1, min_count=0,
                max_idle_count=0, max_count=CLUSTER, idle_timeout=60.0, step=8)
CALLERS = 16
JOB_S = (60.0, 180.0)  # our choice: jobs outlast a poll, so reclaims meet busy pods
POLL_S = 10.0  # the paper's default poll of the controller
CYCLE_S = 300.0
OWNER_WAIT_S = 240.0
CYCLES = 10
SAMPLE_S = 0.1
PAPER = {
    "borrow_s": "11.8 [10.5, 13.2]",
    "release_s": "30.0",
    "owner_pods": "80/80 within 240 s",
    "per_gpu": "1.0 in all cycles",
    "over_placement": "0",
    "failed_jobs": "-",
}


class _Controller:
    """The stub capacity controller: the owner's unused cards, and the owner's own pods."""

    def __init__(self) -> None:
        self.unused = 0
        self.owner_wants = 0
        self.owner_placed = 0


def borrowing_cell(seed: int) -> dict[str, Any]:
    loop = EventLoop()
    broker = SimBroker(loop, load_venue("local-cluster"), [POOL], {MODEL: OWN},
                       random.Random(f"venue/{seed}"))
    broker.warm_up()
    rng = random.Random(f"workload/{seed}")
    ctl = _Controller()
    t0 = loop.now
    end = t0 + 2 * CYCLES * CYCLE_S

    def submit(caller: str) -> None:
        if loop.now < end:
            broker.submit(JobRequest(caller, POOL.name, rng.uniform(*JOB_S), tag=caller,
                                     max_retries=0),
                          on_done=lambda st: submit(st.caller))

    for i in range(CALLERS):
        submit(f"caller-{i}")

    def poll(_: object = None) -> None:
        broker.borrowable({MODEL: ctl.unused})
        if loop.now < end:
            loop.after(POLL_S, poll)

    loop.after(rng.uniform(0.0, POLL_S), poll)  # the poll's phase is the broker's own
    state: dict[str, Any] = {"over": 0, "borrow": [], "release": [], "owner_placed": [],
                             "per_gpu": [], "mark": None, "kind": None, "counts": (0, 0)}

    def live_pods() -> int:
        return sum(1 for p in broker.tracker.pool_pods(POOL.name)
                   if p.state in (PodState.IDLE, PodState.HELD, PodState.ASSIGNED,
                                  PodState.RUNNING))

    def sample(_: object = None) -> None:
        used = broker.ledger.used(MODEL)
        free = CLUSTER - used - ctl.owner_placed
        while ctl.owner_placed < ctl.owner_wants and free > 0:
            ctl.owner_placed += 1
            free -= 1
        if used + ctl.owner_placed > CLUSTER:
            state["over"] += 1
        mark, kind = state["mark"], state["kind"]
        if kind == "borrow" and live_pods() > OWN:
            state["borrow"].append(loop.now - mark)
            state["kind"] = None
        elif kind == "release" and used <= OWN:
            state["release"].append(loop.now - mark)
            state["kind"] = None
        if loop.now < end:
            loop.after(SAMPLE_S, sample)

    loop.after(0.0, sample)

    def publish(_: object = None) -> None:
        ctl.unused = OWNER
        state["mark"], state["kind"] = loop.now, "borrow"

    def withdraw(_: object = None) -> None:
        ctl.unused = 0
        state["mark"], state["kind"] = loop.now, "release"

    def owner_asks(_: object = None) -> None:
        state["counts"] = (broker.core.units_asked, broker.core.units_given)
        ctl.unused = 0
        ctl.owner_wants = OWNER
        state["kind"] = None

    def owner_counts(_: object = None) -> None:
        state["owner_placed"].append(ctl.owner_placed)
        asked0, given0 = state["counts"]
        asked = broker.core.units_asked - asked0
        if asked:
            state["per_gpu"].append((broker.core.units_given - given0) / asked)

    def owner_leaves(_: object = None) -> None:
        ctl.owner_wants = ctl.owner_placed = 0

    for cycle in range(CYCLES):
        start = t0 + 2 * cycle * CYCLE_S
        loop.at(start + 10.0, publish)
        loop.at(start + CYCLE_S / 2, withdraw)
        owner = start + CYCLE_S
        loop.at(owner + 10.0, publish)
        loop.at(owner + 40.0, owner_asks)
        loop.at(owner + 40.0 + OWNER_WAIT_S, owner_counts)
        loop.at(owner + 40.0 + OWNER_WAIT_S + 1.0, owner_leaves)
    loop.run(until=end)
    broker.stop()
    failed = sum(1 for r in broker.records.values() if r.state is JobState.FAILED)
    return {
        "seed": seed,
        "borrow_s": state["borrow"],
        "release_s": state["release"],
        "owner_placed": state["owner_placed"],
        "per_gpu": state["per_gpu"],
        "over_placement": state["over"],
        "failed_jobs": failed,
        "preempted": broker.core.reclaimed,
    }


def run_borrowing(out: str | Path, seeds: int = 3, workers: int | None = None,
                  progress: bool = True) -> dict[str, Any]:
    cells: list[Cell] = [(borrowing_cell, {"seed": s}) for s in range(seeds)]
    results = run_cells(cells, workers=workers, label="borrowing", progress=progress)
    borrow = [x for r in results for x in r["borrow_s"]]
    release = [x for r in results for x in r["release_s"]]
    placed = [x for r in results for x in r["owner_placed"]]
    per_gpu = [x for r in results for x in r["per_gpu"]]
    mid, low, high = bootstrap_ci(borrow)
    rmid, rlow, rhigh = bootstrap_ci(release)
    ours = {
        "borrow_s": f"{mid:.1f} [{low:.1f}, {high:.1f}] ({len(borrow)} cycles)",
        "release_s": f"{rmid:.1f} [{rlow:.1f}, {rhigh:.1f}] ({len(release)} cycles)",
        "owner_pods": f"{sum(placed)}/{OWNER * len(placed)} within {OWNER_WAIT_S:.0f} s",
        "per_gpu": f"{min(per_gpu):.2f}-{max(per_gpu):.2f} over {len(per_gpu)} cycles",
        "over_placement": str(sum(r["over_placement"] for r in results)),
        "failed_jobs": f"{sum(r['failed_jobs'] for r in results)} "
                       f"({sum(r['preempted'] for r in results)} attempts reclaimed, retried)",
    }
    labels = {
        "borrow_s": "time to borrow (s): published -> first borrowed pod ready",
        "release_s": "release to a lowered ceiling (s)",
        "owner_pods": "owner pods placed",
        "per_gpu": "borrowed GPUs released per owner GPU",
        "over_placement": "over-placement (samples above the cluster)",
        "failed_jobs": "failed jobs",
    }
    md = md_table(["quantity", "paper (A.7, C.3)", "ours"],
                  [[labels[k], PAPER[k], ours[k]] for k in labels])
    summary: dict[str, Any] = {"seeds": seeds, "pool": POOL.model_dump(), "job_s": JOB_S,
                               "poll_s": POLL_S, "paper": PAPER, "ours": ours,
                               "runs": results}
    write_outputs(out, "borrowing", summary, md)
    summary["markdown"] = md
    return summary
