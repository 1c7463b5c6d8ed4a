"""One broker run: a venue, a pool configuration, a workload and an arm, for one seed.

Cells are plain functions of plain arguments returning plain dicts, so sweeps can ship them to
worker processes. The workload's generator and the venue's generator are seeded separately from
the seed, which pairs arms: the same seed gives every arm the very same jobs.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from typing import Any

from firepool.model import PoolSpec
from firepool.sim.agentic import Tagger, session_programs, standby_loop, w_agent, w_rl
from firepool.sim.broker import SimBroker
from firepool.sim.loop import EventLoop
from firepool.sim.programs import Program, Runner
from firepool.sim.venue import load_venue

WARM_PATHS = frozenset({"warm", "recycled", "standby"})


def pool_for(venue: str, arm: str, **over: Any) -> tuple[PoolSpec, dict[str, int]]:
    """The benchmark pool of the broker paper's venue (appendix B.1), with overrides."""
    fresh = arm == "fresh"
    if "h200" in venue:
        base: dict[str, Any] = dict(
            name="h200",
            accelerator="H200",
            accelerators_per_pod=1,
            standbys_per_active=3,
            min_count=0 if fresh else 2,
            max_idle_count=0 if fresh else 2,
            max_count=2,
            idle_timeout=900.0,
            step=2,
        )
        budgets = {"H200": int(over.pop("budget", 2))}
    else:
        base = dict(
            name="cpu",
            cpus_per_pod=1.0,
            min_count=0 if fresh else 2,
            max_idle_count=0 if fresh else 4,
            max_count=16,
            idle_timeout=900.0,
            step=8,
        )
        budgets = {"cpu": int(over.pop("budget", 16))}
    base.update(over)
    return PoolSpec(**base), budgets


def summarize(broker: SimBroker, runner: Runner, t0: float) -> dict[str, Any]:
    jobs = broker.finished()
    end = runner.finished_at
    held = broker.backend.held_area()
    window = max(end - t0, 1e-9)
    paths = Counter(p for s in jobs for p in s.paths)
    return {
        "jobs": len(jobs),
        "makespan": end - t0,
        "start": [s.start_latency for s in jobs],
        "queue": [s.queue_wait for s in jobs],
        "paths": dict(paths),
        "handover": [s.queue_wait for s in jobs if s.paths and s.paths[0] in ("standby", "new")],
        "handover_paths": dict(
            Counter(s.paths[0] for s in jobs if s.paths and s.paths[0] in ("standby", "new"))
        ),
        "hit_rate": sum(1 for s in jobs if s.paths and s.paths[0] in WARM_PATHS)
        / max(1, len(jobs)),
        "held": held,
        "held_ratio": held / max(1e-9, broker.peak_units * window),
        "peak_units": broker.peak_units,
        "pods_created": broker.backend.created,
        "events": broker.loop.events,
    }


def run_programs(
    venue: str,
    pools: list[PoolSpec],
    budgets: dict[str, int],
    seed: int,
    programs: Callable[[random.Random], list[tuple[float, Program]]],
) -> tuple[SimBroker, Runner, float]:
    loop = EventLoop()
    broker = SimBroker(loop, load_venue(venue), pools, budgets, random.Random(f"venue/{seed}"))
    broker.warm_up()
    t0 = loop.now
    runner = Runner(broker)
    for start, prog in programs(random.Random(f"workload/{seed}")):
        runner.start(prog, t0 + start)
    loop.run()
    return broker, runner, t0


def loop_cell(
    venue: str,
    workload: str,
    arm: str,
    seed: int,
    body: float | None = None,
    think: float | None = None,
    **pool_over: Any,
) -> dict[str, Any]:
    """Table 5 / Figure 7 cell: `agent2`, `agent4` or `rl` under one arm."""
    spec, budgets = pool_for(venue, arm, **pool_over)
    tagger = Tagger(arm, spec.name)

    def programs(rng: random.Random) -> list[tuple[float, Program]]:
        if workload == "rl":
            kw: dict[str, Any] = {}
            if body is not None:
                kw["body"] = (body, body)
            if think is not None:
                kw["think"] = think
            return [(0.0, w_rl(tagger, rng, **kw))]
        n = int(workload.removeprefix("agent"))
        out: list[tuple[float, Program]] = []
        for a in range(n):
            sub = random.Random(rng.getrandbits(64))
            kw = {}
            if body is not None:
                kw["body"] = (body, body)
            if think is not None:
                kw["think"] = (think, think)
                kw["between"] = (think, think)
            out.append((0.0, w_agent(tagger, sub, f"agent{a}", **kw)))
        return out

    broker, runner, t0 = run_programs(venue, [spec], budgets, seed, programs)
    return summarize(broker, runner, t0)


def standby_cell(venue: str, standby: bool, seed: int, jobs: int = 30) -> dict[str, Any]:
    """Table 6 cell: one caller, sequential jobs, a fresh tag each, standbys on or off."""
    spec, budgets = pool_for(venue, "off", standbys_per_active=3 if standby else 0)
    tagger = Tagger("off", spec.name)
    broker, runner, t0 = run_programs(
        venue, [spec], budgets, seed, lambda rng: [(0.0, standby_loop(tagger, rng, jobs=jobs))]
    )
    return summarize(broker, runner, t0)


def sessions_cell(
    venue: str,
    pattern: str,
    arm: str,
    seed: int,
    horizon: float,
    rate_per_h: float,
    **pool_over: Any,
) -> dict[str, Any]:
    """Figure 6 cell: agent sessions arriving by `pattern` against one pool configuration."""
    spec, budgets = pool_for(venue, arm, **pool_over)
    tagger = Tagger(arm, spec.name)
    broker, runner, t0 = run_programs(
        venue,
        [spec],
        budgets,
        seed,
        lambda rng: session_programs(pattern, tagger, rng, horizon=horizon, rate_per_h=rate_per_h),
    )
    return summarize(broker, runner, t0)
