"""Seeded synthetic rounds built from the fitted application models.

Benchmarks, property tests and simulator smoke runs need realistic rounds of any size: jobs of
the six profiled applications at random training progress, with goodputs from the fitted model,
random measured times and a random current allocation that respects capacity. The generator
takes a numpy Generator, so a seed fully determines the round.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache

import numpy as np

from firepool.scheduling.estimates import GpuSpec, estimate_goodputs
from firepool.scheduling.goodput import app_model, app_models
from firepool.scheduling.rounds import Configuration, JobRoundState, RoundInput

#: The paper's testbed: 12 V100s, 3 nodes of 4 (speeds relative to the trace T4 are an
#: assumption for synthetic rounds only; real runs report measured throughput).
SMALL_GPUS: Mapping[str, GpuSpec] = {"V100": GpuSpec("V100", 32.0, 2.0, 4)}
SMALL_CAPACITY: Mapping[str, int] = {"V100": 12}
SMALL_REPLICAS: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12)

LARGE_GPUS: Mapping[str, GpuSpec] = {
    "T4": GpuSpec("T4", 16.0, 1.0, 4),
    "V100": GpuSpec("V100", 32.0, 2.0, 8),
    "A100": GpuSpec("A100", 80.0, 4.0, 8),
}
LARGE_CAPACITY: Mapping[str, int] = {"T4": 400, "V100": 350, "A100": 250}
LARGE_REPLICAS: tuple[int, ...] = (1, 2, 4, 8, 16)


@cache
def _goodputs(
    app: str, gpu: GpuSpec, replicas: tuple[int, ...], progress: float
) -> tuple[float, ...]:
    cfgs = [Configuration(gpu.name, r, -(-r // gpu.gpus_per_node)) for r in replicas]
    return estimate_goodputs(app_model(app), cfgs, {gpu.name: gpu}, progress=progress)


def synthetic_round(
    rng: np.random.Generator,
    *,
    n_jobs: int,
    capacity: Mapping[str, int],
    gpus: Mapping[str, GpuSpec],
    replicas: Sequence[int],
    types_per_job: int = 1,
) -> RoundInput:
    """A random round: each job gets `types_per_job` GPU types x `replicas` configurations."""
    apps = sorted(app_models())
    type_names = sorted(capacity)
    free = dict(capacity)
    jobs: list[JobRoundState] = []
    for i in range(n_jobs):
        app = apps[int(rng.integers(len(apps)))]
        progress = round(float(rng.random()), 1)  # coarse, so the goodput cache hits
        chosen = rng.choice(
            len(type_names), size=min(types_per_job, len(type_names)), replace=False
        )
        cfgs: list[Configuration] = []
        goods: list[float] = []
        for t in sorted(int(c) for c in chosen):
            spec = gpus[type_names[t]]
            g = _goodputs(app, spec, tuple(replicas), progress)
            for r, value in zip(replicas, g, strict=True):
                cfgs.append(Configuration(spec.name, r, -(-r // spec.gpus_per_node)))
                goods.append(value)
        running = rng.random() < 0.5
        current = None
        if running:
            pick = cfgs[int(rng.integers(len(cfgs)))]
            if free[pick.gpu_type] >= pick.replicas:
                free[pick.gpu_type] -= pick.replicas
                current = pick
        t_progress = float(rng.exponential(1800.0)) if rng.random() < 0.8 else 0.0
        jobs.append(
            JobRoundState(
                job_id=f"job-{i}",
                configurations=tuple(cfgs),
                goodputs=tuple(goods),
                app=app,
                t_progress=t_progress,
                t_ckpt=float(rng.exponential(120.0)) if t_progress else 0.0,
                t_queue=float(rng.exponential(120.0)),
                current=current,
                age_s=t_progress + float(rng.exponential(600.0)),
                restarts=int(rng.poisson(1.0)),
                remaining_work=float(rng.exponential(7200.0)) + 60.0,
            )
        )
    return RoundInput(capacity=dict(capacity), jobs=tuple(jobs))


def small_round(rng: np.random.Generator, n_jobs: int = 14) -> RoundInput:
    """The paper's scale: 12 GPUs, 14 jobs, 10 configurations each."""
    return synthetic_round(
        rng, n_jobs=n_jobs, capacity=SMALL_CAPACITY, gpus=SMALL_GPUS, replicas=SMALL_REPLICAS
    )


def large_round(rng: np.random.Generator, n_jobs: int = 500) -> RoundInput:
    """1,000 GPUs of 3 types, 500 jobs, 10 configurations each (2 types x 5 sizes)."""
    return synthetic_round(
        rng,
        n_jobs=n_jobs,
        capacity=LARGE_CAPACITY,
        gpus=LARGE_GPUS,
        replicas=LARGE_REPLICAS,
        types_per_job=2,
    )
