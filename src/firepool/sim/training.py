"""Elastic training jobs in rounds, sized by a round policy from `scheduling/`.

Follows the scheduler paper's simulator (section IV): a round every 60 s; the policy sees each
active job's candidate configurations, goodput estimates from the fitted model, and the measured
`T_progress`, `T_ckpt`, `T_queue`; a configuration change or a failure costs the job its
application's restart penalty of no progress (added to `T_ckpt`); failures are Bernoulli with
probability lambda per round per running job (the paper's Poisson stream), drawn from a
generator seeded per (seed, job, round) so every policy meets the same failure stream.

The measurements (`T_progress` grows while the job trains, `T_queue` while it has no allocation
or is restoring) belong in `control/elastic.py` once it lands; see the report in
docs/reproduction.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache

import numpy as np

from firepool.scheduling import (
    Configuration,
    GpuSpec,
    JobRoundState,
    RoundInput,
    RoundPolicy,
    app_model,
    candidate_configurations,
    estimate_goodputs,
    p_restart_for,
)

#: The scheduler paper's testbed: 12 V100 16 GB in 3 nodes of 4 (section IV-A). Speed 2.0 against
#: the T4 the traces were measured on is the assumption `scheduling.synthetic` also makes.
V100 = GpuSpec("V100", 16.0, 2.0, 4)
CLUSTER_GPUS: Mapping[str, GpuSpec] = {"V100": V100}
CLUSTER_CAPACITY: Mapping[str, int] = {"V100": 12}
REPLICAS: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12)
_BUCKETS = 10  # goodput is re-estimated at progress 0.0, 0.1, ... (the GNS table's resolution)


@dataclass(frozen=True, slots=True)
class TrainSpec:
    """One elastic job of a workload: application, arrival, and work in samples."""

    name: str
    app: str
    arrival: float
    work: float  # samples to process at the initial batch's efficiency (trace "progress" x M0)
    max_replicas: int = 12


@dataclass(slots=True)
class _Job:
    spec: TrainSpec
    configs: tuple[Configuration, ...]
    done: float = 0.0
    current: Configuration | None = None
    down: float = 0.0  # seconds of restore left
    t_progress: float = 0.0
    t_ckpt: float = 0.0
    t_queue: float = 0.0
    restarts: int = 0
    finished: float = -1.0

    @property
    def fraction(self) -> float:
        return min(1.0, self.done / self.spec.work)


@dataclass(slots=True)
class TrainResult:
    policy: str
    jct: dict[str, float] = field(default_factory=dict)
    restarts: int = 0
    rounds: int = 0
    decide_s: float = 0.0
    unfinished: int = 0

    @property
    def mean_jct(self) -> float:
        return float(np.mean(list(self.jct.values()))) if self.jct else math.nan

    @property
    def max_jct(self) -> float:
        return max(self.jct.values()) if self.jct else math.nan


@cache
def _configs(app: str, max_replicas: int) -> tuple[Configuration, ...]:
    choices = tuple(r for r in REPLICAS if r <= max_replicas)
    keep, _ = candidate_configurations(
        app_model(app), CLUSTER_GPUS, replica_choices=choices, max_replicas=max_replicas
    )
    return keep


@cache
def _goodputs(app: str, configs: tuple[Configuration, ...], bucket: int) -> tuple[float, ...]:
    return estimate_goodputs(app_model(app), configs, CLUSTER_GPUS, progress=bucket / _BUCKETS)


@cache
def _rate(app: str, cfg: Configuration, bucket: int) -> float:
    """Samples per second (at M0 efficiency) of `app` on `cfg` at this progress bucket."""
    spec = CLUSTER_GPUS[cfg.gpu_type]
    value, _ = app_model(app).goodput(
        cfg.nodes,
        cfg.replicas,
        progress=bucket / _BUCKETS,
        speed=spec.speed,
        memory_gib=spec.memory_gib,
    )
    return value


def _fails(seed: int, job: int, rnd: int, lam: float) -> bool:
    """The shared failure stream: the same (seed, job, round) fails under every policy."""
    if lam <= 0.0:
        return False
    x = (seed * 0x9E3779B1 + job * 0x85EBCA77 + rnd * 0xC2B2AE3D) & 0xFFFFFFFF
    x ^= x >> 16
    x = (x * 0x7FEB352D) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * 0x846CA68B) & 0xFFFFFFFF
    x ^= x >> 16
    return x / 4294967296.0 < lam


def simulate(
    policy: RoundPolicy,
    jobs: Sequence[TrainSpec],
    *,
    lam: float = 0.0,
    seed: int = 0,
    round_s: float = 60.0,
    mask_restart: bool = False,
    max_rounds: int = 200_000,
) -> TrainResult:
    """Run `jobs` to completion under `policy`; `mask_restart` hides progress from the policy
    (r = 1 for every job: ablation cell b)."""
    import time

    state = [_Job(s, _configs(s.app, s.max_replicas)) for s in jobs]
    order = sorted(range(len(state)), key=lambda i: state[i].spec.arrival)
    result = TrainResult(policy.name)
    now = 0.0
    rnd = 0
    left = len(state)
    while left and rnd < max_rounds:
        active = [i for i in order if state[i].finished < 0 and state[i].spec.arrival <= now]
        if not active:
            now = min(state[i].spec.arrival for i in order if state[i].finished < 0)
            now = math.ceil(now / round_s) * round_s
            continue
        rows = []
        for i in active:
            j = state[i]
            bucket = min(_BUCKETS - 1, int(j.fraction * _BUCKETS))
            age = now - j.spec.arrival
            rows.append(
                JobRoundState(
                    job_id=str(i),
                    configurations=j.configs,
                    goodputs=_goodputs(j.spec.app, j.configs, bucket),
                    app=j.spec.app,
                    t_progress=0.0 if mask_restart else j.t_progress,
                    t_ckpt=j.t_ckpt,
                    t_queue=j.t_queue,
                    current=j.current,
                    age_s=age,
                    restarts=j.restarts,
                    remaining_work=max(1.0, j.spec.work - j.done)
                    / max(_rate(j.spec.app, j.configs[0], bucket), 1e-9),
                )
            )
        t0 = time.perf_counter()
        decision = policy.decide(RoundInput(dict(CLUSTER_CAPACITY), tuple(rows), round_s))
        result.decide_s += time.perf_counter() - t0
        result.rounds += 1
        for i in active:
            j = state[i]
            cfg = decision.assignments.get(str(i))
            penalty = p_restart_for(j.spec.app)
            if cfg != j.current:
                if cfg is not None and (j.current is not None or j.done > 0.0):
                    j.down = penalty  # checkpoint, stop, restore at the new size
                    j.t_ckpt += penalty
                    j.restarts += 1
                j.current = cfg
            if j.current is not None and _fails(seed, i, rnd, lam):
                j.down = max(j.down, penalty)
                j.t_ckpt += penalty
                j.restarts += 1
            _advance(j, now, round_s)
            if j.finished >= 0:
                left -= 1
                result.jct[j.spec.name] = j.finished - j.spec.arrival
        now += round_s
        rnd += 1
    result.unfinished = left
    result.restarts = sum(j.restarts for j in state)
    return result


def _advance(j: _Job, now: float, round_s: float) -> None:
    """One round of progress for one job (restore time first, then training)."""
    if j.current is None:
        j.t_queue += round_s
        return
    down = min(j.down, round_s)
    j.down -= down
    j.t_queue += down
    train = round_s - down
    if train <= 0.0:
        return
    bucket = min(_BUCKETS - 1, int(j.fraction * _BUCKETS))
    rate = _rate(j.spec.app, j.current, bucket)
    need = j.spec.work - j.done
    if rate * train >= need:
        used = need / rate
        j.done = j.spec.work
        j.t_progress += used
        j.finished = now + down + used
        return
    j.done += rate * train
    j.t_progress += train
