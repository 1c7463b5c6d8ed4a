"""Each MILP policy's choice is optimal for its objective, computed here independently.

The objectives below are written from the papers' formulas (OAK section III/IV-D, Sia's
simulator settings, Lookahead's docstring) with their own restart-penalty table, and the optimum
comes from enumerating every assignment; none of the implementation's utility functions is
called. A policy that assigned nothing, mis-signed a term or dropped a pin would fail.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from firepool.scheduling import Configuration, JobRoundState, RoundInput, make_policy
from firepool.scheduling.milp import MIP_GAP

TYPES = ("A", "B")
PENALTY = {"cifar10": 50.0, "imagenet": 250.0, "ncf": 25.0}  # the paper's table; else 30 s
SETTINGS = settings(max_examples=80, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

Choice = dict[str, Configuration | None]
Score = Callable[[RoundInput, JobRoundState, Configuration], float | None]


def penalty(job: JobRoundState) -> float:
    return job.p_restart if job.p_restart is not None else PENALTY.get(job.app, 30.0)


def fits(r: RoundInput, cfg: Configuration) -> bool:
    return cfg.replicas <= r.capacity.get(cfg.gpu_type, 0)


def has_current(r: RoundInput, job: JobRoundState) -> bool:
    return (job.current is not None and job.current in job.configurations
            and fits(r, job.current))


def sia_set(cfg: Configuration) -> bool:
    n = cfg.replicas
    return n in (1, 2, 4) or n % 4 == 0


def pinned(r: RoundInput, job: JobRoundState) -> bool:
    return job.restoring and has_current(r, job)


def candidate(r: RoundInput, job: JobRoundState, cfg: Configuration) -> bool:
    """In Sia's configuration set, or the configuration a restoring job is pinned to."""
    return sia_set(cfg) or (pinned(r, job) and cfg == job.current)


def normalised(job: JobRoundState, cfg: Configuration) -> float:
    pairs = dict(zip(job.configurations, job.goodputs, strict=True))
    base = [g for c, g in pairs.items() if g > 1e-4 and sia_set(c)]
    g = pairs[cfg] / min(base) if base else pairs[cfg]
    return max(g, 1e-4)


def oak_score(r: RoundInput, job: JobRoundState, cfg: Configuration) -> float | None:
    p = penalty(job)
    if job.t_progress <= 0 or job.age_s < p:
        rf = 1.0
    else:
        rf = job.t_progress / (job.t_progress + job.t_ckpt_failures + p)
    if has_current(r, job) and cfg == job.current:
        rf = 1.0  # r only on changed configurations
    k = min(math.exp(min(0.01 * job.t_queue, 700.0)), 100.0)
    return math.sqrt(dict(zip(job.configurations, job.goodputs, strict=True))[cfg] * rf) * k


def sia_score(sign: float) -> Score:
    def score(r: RoundInput, job: JobRoundState, cfg: Configuration) -> float | None:
        if not candidate(r, job, cfg):
            return None
        g = normalised(job, cfg)
        if has_current(r, job) and cfg != job.current:
            p = penalty(job)
            a, n = job.age_s, job.restarts
            g *= 1.0 if a < p else max(a - n * p, 0.0) / (a + p)
            if sign < 0:
                g = max(g, 1e-4)
        value = g ** (0.5 * sign) if g > 0 else 0.0
        return min(round(value, 2), 3000.0)
    return score


def lookahead_score(r: RoundInput, job: JobRoundState, cfg: Configuration) -> float | None:
    if not candidate(r, job, cfg):
        return None
    failures = sum(j.failures for j in r.jobs)
    live = sum(j.t_progress + j.t_ckpt for j in r.jobs)
    lam = failures * r.round_s / live if failures and live > 0 else 0.0
    horizon = max(1.0 / (lam / r.round_s + 1.0 / 1800.0), 60.0)
    keeps = has_current(r, job) and cfg == job.current
    cost = 0.0 if keeps or job.t_progress <= 0 else penalty(job)
    return math.sqrt(normalised(job, cfg) * max(horizon - cost, 0.0) / horizon)


# name -> (score, idle term, sense): the objective is sense * (sum score + idle * #idle).
OBJECTIVES: dict[str, tuple[Score, float, float]] = {
    "oak": (oak_score, 1.1, 1.0),
    "sia": (sia_score(1.0), -1.0, 1.0),
    "sia-reference": (sia_score(-1.0), 1.1, -1.0),
    "lookahead": (lookahead_score, -1.0, 1.0),
}


def objective(name: str, r: RoundInput, choice: Choice) -> float:
    score, idle, sense = OBJECTIVES[name]
    total = 0.0
    for job in r.jobs:
        cfg = choice[job.job_id]
        if cfg is None:
            total += idle
        else:
            s = score(r, job, cfg)
            assert s is not None, f"{name} chose {cfg} outside its configuration set"
            total += s
    return sense * total


def feasible(r: RoundInput, choice: Choice) -> bool:
    used: dict[str, int] = {}
    for cfg in choice.values():
        if cfg is not None:
            used[cfg.gpu_type] = used.get(cfg.gpu_type, 0) + cfg.replicas
    return all(n <= r.capacity.get(t, 0) for t, n in used.items())


def brute_force(name: str, r: RoundInput) -> float:
    score = OBJECTIVES[name][0]
    per_job: list[list[Configuration | None]] = []
    for job in r.jobs:
        if pinned(r, job):
            per_job.append([job.current])
            continue
        opts: list[Configuration | None] = [None]
        opts += [c for c in job.configurations if fits(r, c) and score(r, job, c) is not None]
        per_job.append(opts)
    best = -math.inf
    for combo in itertools.product(*per_job):
        choice = {j.job_id: c for j, c in zip(r.jobs, combo, strict=True)}
        if feasible(r, choice):
            best = max(best, objective(name, r, choice))
    return best


@st.composite
def rounds(draw: st.DrawFn, max_jobs: int = 4) -> RoundInput:
    capacity = {t: draw(st.integers(0, 8)) for t in TYPES}
    jobs = []
    pinned_use: dict[str, int] = {}
    for i in range(draw(st.integers(0, max_jobs))):
        cfgs = draw(st.lists(
            st.builds(Configuration, st.sampled_from(TYPES), st.integers(1, 8)),
            min_size=0, max_size=4, unique=True))
        goods = draw(st.lists(st.floats(0.0, 20.0), min_size=len(cfgs), max_size=len(cfgs)))
        current = draw(st.sampled_from([None, *cfgs])) if cfgs else None
        restoring = False
        if current is not None and draw(st.booleans()):
            # a restoring job holds its GPUs: only as many as the cluster has
            used = pinned_use.get(current.gpu_type, 0) + current.replicas
            if used <= capacity[current.gpu_type]:
                pinned_use[current.gpu_type] = used
                restoring = True
        t_ckpt = draw(st.floats(0.0, 2000.0))
        restarts = draw(st.integers(0, 5))
        jobs.append(JobRoundState(
            job_id=f"j{i}", configurations=tuple(cfgs), goodputs=tuple(goods),
            app=draw(st.sampled_from(["cifar10", "imagenet", "ncf", "other"])),
            t_progress=draw(st.floats(0.0, 5000.0)), t_ckpt=t_ckpt,
            t_ckpt_failures=draw(st.floats(0.0, 1.0)) * t_ckpt,
            t_queue=draw(st.floats(0.0, 1000.0)), current=current,
            age_s=draw(st.floats(0.0, 9000.0)), restarts=restarts,
            failures=draw(st.integers(0, restarts)), restoring=restoring,
        ))
    return RoundInput(capacity, tuple(jobs))


@SETTINGS
@given(rounds(), st.sampled_from(sorted(OBJECTIVES)))
def test_milp_policies_reach_the_independently_computed_optimum(r: RoundInput,
                                                                name: str) -> None:
    result = make_policy(name).decide(r)
    choice = dict(result.assignments)
    assert set(choice) == {j.job_id for j in r.jobs}
    assert feasible(r, choice)
    for job in r.jobs:
        if pinned(r, job):
            assert choice[job.job_id] == job.current, "a restoring job must stay pinned"
    optimum = brute_force(name, r)
    got = objective(name, r, choice)
    tol = MIP_GAP * max(1.0, abs(optimum)) + 1e-6
    assert got >= optimum - tol, (name, got, optimum)
