"""Template rollout under saturated load (broker paper, appendix C.3), in the simulator.

The paper's run: an 8-pod pool (floor 4, idle cap 6, ceiling 8, drain budget 1), 12 callers
with no think time, one template edit. Its figures: converged in 324 s [286, 359]; all 12
callers served in every run; longest wait 181-242 s; 0 overtakes of the longest waiter; 0
failed jobs; at most one pod retiring and never more than 8 pods; p50 start +0.03 s against
no rollout. The paper ran it on its local cluster, so this uses the `local-cluster` venue. It
gives no job length; ours is a stated choice (`JOB_S`). Two arms per seed, paired: the edit,
and no edit (for the start-latency difference).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from firepool.control.records import RetireReason
from firepool.model import JobState, PodState, PoolSpec
from firepool.sim.broker import JobRequest, JobStats, SimBroker
from firepool.sim.loop import EventLoop
from firepool.sim.report import md_table, write_outputs
from firepool.sim.stats import bootstrap_ci, pct
from firepool.sim.sweep import Cell, run_cells
from firepool.sim.venue import load_venue

POOL = PoolSpec(name="cpu", min_count=4, max_idle_count=6, max_count=8, idle_timeout=300.0,
                step=8)
CALLERS = 12
#: Job bodies, uniform in this range: our choice (the paper states none).
JOB_S = (30.0, 90.0)
LOAD_S = 300.0  # saturated load before the edit
WINDOW_S = 900.0  # measured after the edit
SAMPLE_S = 0.25
ARMS = ("rollout", "none")
PAPER = {
    "converged_s": "324 [286, 359]",
    "callers_served": "12/12 in every run",
    "longest_wait_s": "181-242",
    "overtakes": "0",
    "failed_jobs": "0",
    "max_retiring": "1",
    "max_pods": "8",
    "delta_p50_s": "+0.03",
}


def rollout_cell(arm: str, seed: int) -> dict[str, Any]:
    loop = EventLoop()
    broker = SimBroker(loop, load_venue("local-cluster"), [POOL], {"cpu": POOL.max_count},
                       random.Random(f"venue/{seed}"))
    broker.warm_up()
    rng = random.Random(f"workload/{seed}")
    t0 = loop.now
    edit_at = t0 + LOAD_S
    end = edit_at + WINDOW_S

    def submit(caller: str) -> None:
        if loop.now < end:
            body = rng.uniform(*JOB_S)
            broker.submit(JobRequest(caller, POOL.name, body, tag=caller),
                          on_done=lambda st: submit(st.caller))

    for i in range(CALLERS):
        submit(f"caller-{i}")
    seen = {"max_pods": 0, "max_retiring": 0, "converged": -1.0}

    def sample(_: object = None) -> None:
        pods = broker.tracker.pool_pods(POOL.name)
        seen["max_pods"] = max(seen["max_pods"], len(pods))
        draining = sum(1 for p in pods if p.state is PodState.RETIRING
                       and p.retire_after is RetireReason.STALE_TEMPLATE)
        seen["max_retiring"] = max(seen["max_retiring"], draining)
        if (arm == "rollout" and loop.now >= edit_at and seen["converged"] < 0
                and broker.core.rollout(POOL.name).done):
            seen["converged"] = loop.now - edit_at
        if loop.now < end:
            loop.after(SAMPLE_S, sample)

    loop.after(0.0, sample)
    if arm == "rollout":
        edited = POOL.model_copy(update={"image": "firepool/base:next"})
        loop.at(edit_at, lambda _: broker.set_pool(edited))
    loop.run(until=end)
    broker.stop()
    window = [s for s in broker.stats.values() if s.submitted >= edit_at and s.launched >= 0]
    waits = [s.queue_wait for s in window]
    longest = max(window, key=lambda s: s.queue_wait) if window else None
    failed = sum(1 for r in broker.records.values() if r.state is JobState.FAILED)
    return {
        "arm": arm,
        "seed": seed,
        "converged_s": seen["converged"] if seen["converged"] >= 0 else None,
        "callers_served": len({s.caller for s in window}),
        "longest_wait_s": max(waits) if waits else None,
        "overtakes": _overtakes(longest, window),
        "failed_jobs": failed,
        "max_retiring": seen["max_retiring"],
        "max_pods": seen["max_pods"],
        "start_p50_s": pct([s.start_latency for s in window if s.first >= 0], 50),
        "jobs": len(window),
    }


def _overtakes(longest: JobStats | None, jobs: list[JobStats]) -> int:
    """Jobs submitted after the longest waiter that started before it on a pod it could have
    had (a caller's next job on its own held pod takes nothing from the waiter)."""
    if longest is None:
        return 0
    return sum(1 for s in jobs if s.submitted > longest.submitted
               and s.launched < longest.launched and "same_session" not in s.reasons)


def run_rollout(out: str | Path, seeds: int = 10, workers: int | None = None,
                progress: bool = True) -> dict[str, Any]:
    cells: list[Cell] = [(rollout_cell, {"arm": arm, "seed": s})
                         for s in range(seeds) for arm in ARMS]
    results = run_cells(cells, workers=workers, label="rollout", progress=progress)
    runs = sorted((r for r in results if r["arm"] == "rollout"), key=lambda r: r["seed"])
    base = {r["seed"]: r for r in results if r["arm"] == "none"}
    converged = [r["converged_s"] for r in runs if r["converged_s"] is not None]
    waits = [r["longest_wait_s"] for r in runs if r["longest_wait_s"] is not None]
    deltas = [r["start_p50_s"] - base[r["seed"]]["start_p50_s"] for r in runs]
    ours = {
        "converged_s": (_median_ci(converged) if converged else "never")
        + f" ({len(converged)}/{len(runs)} runs)",
        "callers_served": f"{min(r['callers_served'] for r in runs)}/{CALLERS} at least",
        "longest_wait_s": f"{min(waits):.0f}-{max(waits):.0f}" if waits else "-",
        "overtakes": str(max(r["overtakes"] for r in runs)),
        "failed_jobs": str(sum(r["failed_jobs"] for r in results)),
        "max_retiring": str(max(r["max_retiring"] for r in runs)),
        "max_pods": str(max(r["max_pods"] for r in results)),
        "delta_p50_s": f"{pct(deltas, 50):+.2f} (median of {len(deltas)} paired seeds)",
    }
    labels = {
        "converged_s": "converged after the edit (s)",
        "callers_served": "callers served",
        "longest_wait_s": "longest wait (s)",
        "overtakes": "overtakes of the longest waiter (max)",
        "failed_jobs": "failed jobs (all runs)",
        "max_retiring": "old pods retiring at once (max)",
        "max_pods": "pods (max, ceiling 8)",
        "delta_p50_s": "start p50 vs no rollout (s)",
    }
    md = md_table(["quantity", "paper (C.3)", "ours"],
                  [[labels[k], PAPER[k], ours[k]] for k in labels])
    summary: dict[str, Any] = {"seeds": seeds, "pool": POOL.model_dump(), "job_s": JOB_S,
                               "paper": PAPER, "ours": ours, "runs": results}
    write_outputs(out, "rollout", summary, md)
    summary["markdown"] = md
    return summary


def _median_ci(values: list[float]) -> str:
    mid, low, high = bootstrap_ci(values)
    return f"{mid:.0f} [{low:.0f}, {high:.0f}]"
