"""The broker paper's workloads as programs (section 9 and appendix B.2).

W-RL: 4 barrier-synchronised iterations of 8 rollouts, 2 evaluations and 1 policy update, fixed
1.5-4 s bodies (44 jobs). W-Agent: 2 or 4 concurrent agents, each 3 iterations of 2-4 calls
(0.5-1.6 s bodies, the last a verify step), 0.5-2 s think pauses between calls and 2-5 s between
iterations. Standby benchmark: one caller, 30 sequential W-Agent jobs, a fresh reuse tag each.
Sessions: agent sessions arriving steadily, in bursts or on a diurnal curve, for the frontier.

Arms (appendix B.3): `on` gives each caller one stable tag; `off` a fresh tag per job (the tag a
retiring boundary); `fresh` a single-use pod per job. Every random draw comes from the
workload's own generator, never the venue's, so paired arms see the very same jobs.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable

from firepool.sim.broker import JobRequest
from firepool.sim.programs import Program, Run, Sleep

ARMS = ("on", "off", "fresh")


class Tagger:
    """Turns (caller, arm) into each job's tag and single-use flag."""

    def __init__(self, arm: str, pool: str) -> None:
        if arm not in ARMS:
            raise ValueError(f"unknown arm {arm!r}; choose from {ARMS}")
        self.arm = arm
        self.pool = pool
        self._counter = itertools.count()

    def job(self, caller: str, duration: float, queue: str = "default") -> JobRequest:
        if self.arm == "on":
            return JobRequest(caller, self.pool, duration, tag=f"{caller}/s", queue=queue)
        tag = f"{caller}/{next(self._counter)}"
        return JobRequest(
            caller, self.pool, duration, tag=tag, queue=queue, single_use=self.arm == "fresh"
        )


def w_rl(
    tagger: Tagger,
    rng: random.Random,
    caller: str = "rl",
    *,
    iterations: int = 4,
    rollouts: int = 8,
    evals: int = 2,
    body: tuple[float, float] = (1.5, 4.0),
    think: float = 0.0,
) -> Program:
    """One RL trainer: rollouts fan out, evaluations, then one policy update, per iteration."""
    for it in range(iterations):
        if it and think:
            yield Sleep(think)
        yield Run([tagger.job(caller, rng.uniform(*body)) for _ in range(rollouts)])
        yield Run([tagger.job(caller, rng.uniform(*body)) for _ in range(evals)])
        yield Run([tagger.job(caller, rng.uniform(*body))])


def w_agent(
    tagger: Tagger,
    rng: random.Random,
    caller: str,
    *,
    iterations: int = 3,
    calls: tuple[int, int] = (2, 4),
    body: tuple[float, float] = (0.5, 1.6),
    think: tuple[float, float] = (0.5, 2.0),
    between: tuple[float, float] = (2.0, 5.0),
) -> Program:
    """One agent: iterations of sequential tool calls with think pauses."""
    for it in range(iterations):
        if it:
            yield Sleep(rng.uniform(*between))
        n = rng.randint(*calls)
        for k in range(n):
            if k:
                yield Sleep(rng.uniform(*think))
            yield Run([tagger.job(caller, rng.uniform(*body))])


def standby_loop(
    tagger: Tagger, rng: random.Random, caller: str = "agent", jobs: int = 30
) -> Program:
    """One caller's sequential W-Agent jobs, each with a fresh tag (the `off` arm's tagger)."""
    for k in range(jobs):
        if k:
            yield Sleep(rng.uniform(0.5, 2.0))
        yield Run([tagger.job(caller, rng.uniform(0.5, 1.6))])


# ------------------------------------------------------------------ session arrivals

PATTERNS = ("steady", "bursty", "diurnal")


def session_starts(
    pattern: str, rng: random.Random, horizon: float, rate_per_h: float
) -> list[float]:
    """Session arrival times over `horizon` seconds with mean `rate_per_h` sessions an hour.

    steady: Poisson; bursty: Poisson bursts (a burst every 20 min on average brings 2-6
    sessions within 60 s, same mean rate); diurnal: Poisson thinned by 0.5 * (1 - cos) over
    the horizon, one full day compressed into it.
    """
    rate = rate_per_h / 3600.0
    out: list[float] = []
    if pattern == "steady":
        t = rng.expovariate(rate)
        while t < horizon:
            out.append(t)
            t += rng.expovariate(rate)
    elif pattern == "bursty":
        mean_burst = 4.0
        t = rng.expovariate(rate / mean_burst)
        while t < horizon:
            for _ in range(rng.randint(2, 6)):
                s = t + rng.uniform(0.0, 60.0)
                if s < horizon:
                    out.append(s)
            t += rng.expovariate(rate / mean_burst)
    elif pattern == "diurnal":
        peak = 2.0 * rate
        t = rng.expovariate(peak)
        while t < horizon:
            if rng.random() < 0.5 * (1.0 - math.cos(2.0 * math.pi * t / horizon)):
                out.append(t)
            t += rng.expovariate(peak)
    else:
        raise ValueError(f"unknown pattern {pattern!r}; choose from {PATTERNS}")
    return sorted(out)


def session_programs(
    pattern: str,
    tagger: Tagger,
    rng: random.Random,
    *,
    horizon: float,
    rate_per_h: float,
    agent: Callable[[Tagger, random.Random, str], Program] | None = None,
) -> list[tuple[float, Program]]:
    """(start time, program) per session; each session is one caller running one W-Agent."""
    make = agent or (lambda t, r, c: w_agent(t, r, c, iterations=rng.randint(3, 8)))
    out: list[tuple[float, Program]] = []
    for i, start in enumerate(session_starts(pattern, rng, horizon, rate_per_h)):
        sub = random.Random(rng.getrandbits(64))
        out.append((start, make(tagger, sub, f"s{i}")))
    return out
