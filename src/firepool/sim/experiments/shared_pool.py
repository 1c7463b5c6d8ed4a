"""Elastic training and short agent jobs on one CPU pool, through the one broker core.

Neither paper runs this mix: the broker paper's loops have the pool to themselves, the
scheduler paper's training jobs have the cluster to themselves. Here W-Agent loops and elastic
training jobs (sized by OAK's rounds) share one pool of warm pods in the simulator, executed by
the same core as the service, so the claims, the rounds and the scaler meet as they would in
production. Three arms per seed, paired: agents alone, training alone, both.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from firepool.control.elastic_jobs import ElasticRules
from firepool.model import ElasticSpec, PoolSpec
from firepool.sim.agentic import Tagger, w_agent
from firepool.sim.broker import JobRequest, SimBroker
from firepool.sim.loop import EventLoop
from firepool.sim.programs import Runner
from firepool.sim.report import md_table, write_outputs
from firepool.sim.stats import pct
from firepool.sim.sweep import Cell, run_cells
from firepool.sim.venue import load_venue

ARMS = ("agents", "training", "both")
POOL = PoolSpec(name="cpu", cpus_per_pod=1.0, min_count=8, max_idle_count=8, max_count=8,
                idle_timeout=900.0, step=8)
#: Each trainer's work, in seconds at one pod's goodput (CIFAR-10's fitted model).
TRAIN_WORK_S = 1800.0
HORIZON_S = 50_000.0


def shared_pool_cell(arm: str, seed: int, agents: int = 4, trainers: int = 2,
                     policy: str = "oak") -> dict[str, Any]:
    loop = EventLoop()
    broker = SimBroker(loop, load_venue("production-cpu"), [POOL], {"cpu": POOL.max_count},
                       random.Random(f"venue/{seed}"), elastic=ElasticRules(policy=policy))
    broker.warm_up()
    t0 = loop.now
    runner = Runner(broker)
    rng = random.Random(f"workload/{seed}")
    if arm in ("agents", "both"):
        tagger = Tagger("on", POOL.name)
        for a in range(agents):
            sub = random.Random(rng.getrandbits(64))
            runner.start(w_agent(tagger, sub, f"agent-{a}", iterations=6), t0)
    trainers_ids = []
    if arm in ("training", "both"):
        spec = ElasticSpec(app="cifar10", min_pods=1, max_pods=POOL.max_count)
        for i in range(trainers):
            trainers_ids.append(broker.submit(
                JobRequest(f"trainer-{i}", POOL.name, TRAIN_WORK_S, elastic=spec)))
    loop.run(until=t0 + HORIZON_S, stop=lambda: (
        (arm == "training" or (runner.finished_at >= 0.0 and not runner.active))
        and all(broker.records[j].state.terminal for j in trainers_ids)))
    short = [s for s in broker.finished() if s.job not in broker.elastic_work]
    work = [broker.elastic_work[j] for j in trainers_ids]
    return {
        "arm": arm,
        "seed": seed,
        "agent_jobs": len(short),
        "agent_makespan": runner.finished_at - t0 if short else None,
        "agent_start": [s.start_latency for s in short],
        "train_jct": [w.finished - t0 if w.finished >= 0 else None for w in work],
        "train_attempts": [w.attempts for w in work],
        "rounds": broker.core.elastic.rounds if broker.core.elastic is not None else 0,
        "events": loop.events,
    }


def run_shared_pool(out: str | Path, seeds: int = 5, workers: int | None = None,
                    progress: bool = True) -> dict[str, Any]:
    cells: list[Cell] = [(shared_pool_cell, {"arm": arm, "seed": s})
                         for s in range(seeds) for arm in ARMS]
    results = run_cells(cells, workers=workers, label="shared-pool", progress=progress)
    by_arm: dict[str, list[dict[str, Any]]] = {arm: [] for arm in ARMS}
    for r in results:
        by_arm[r["arm"]].append(r)
    rows = []
    summary: dict[str, Any] = {"seeds": seeds, "pool": POOL.model_dump(), "arms": {}}
    for arm in ARMS:
        runs = by_arm[arm]
        starts = [x for r in runs for x in r["agent_start"]]
        jcts = [x for r in runs for x in r["train_jct"] if x is not None]
        unfinished = sum(1 for r in runs for x in r["train_jct"] if x is None)
        makespans = [r["agent_makespan"] for r in runs if r["agent_makespan"] is not None]
        attempts = [a for r in runs for a in r["train_attempts"]]
        entry = {
            "agent_start_p50": pct(starts, 50) if starts else None,
            "agent_start_p90": pct(starts, 90) if starts else None,
            "agent_makespan_p50": pct(makespans, 50) if makespans else None,
            "train_jct_mean": sum(jcts) / len(jcts) if jcts else None,
            "train_unfinished": unfinished,
            "train_attempts_mean": sum(attempts) / len(attempts) if attempts else None,
        }
        summary["arms"][arm] = entry
        rows.append([
            arm,
            _num(entry["agent_start_p50"], 2), _num(entry["agent_start_p90"], 1),
            _num(entry["agent_makespan_p50"], 0), _num(entry["train_jct_mean"], 0),
            unfinished, _num(entry["train_attempts_mean"], 1),
        ])
    md = md_table(["arm", "agent start p50 (s)", "agent start p90 (s)",
                   "agent loop makespan p50 (s)", "training JCT mean (s)", "unfinished",
                   "attempts per trainer"], rows)
    summary["runs"] = results
    write_outputs(out, "shared-pool", summary, md)
    summary["markdown"] = md
    return summary


def _num(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"
