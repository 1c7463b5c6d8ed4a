"""The training model behind `sim/training.py`: the cluster, what a job does per second on a
configuration, what a restart costs, and when an attempt fails.

Kept apart from the driver so the numbers a result rests on sit in one short file:

* the scheduler paper's testbed, 12 V100 16 GB in 3 nodes of 4 (section IV-A); speed 2.0
  against the T4 the traces were measured on is the assumption `scheduling.synthetic` makes;
* goodput and throughput from the fitted application models, looked up per progress bucket
  (0.0, 0.1, ... 0.9: the resolution of the statistical-efficiency table), cached because the
  same (application, configurations, bucket) recurs in every round of every run;
* the restart penalty of section IV-D (`p_restart_for`), split into a checkpoint save paid on a
  graceful stop and a restore paid on the next start (`RestartCost`);
* the failure stream: Bernoulli lambda per 60-s slot per live attempt, a pure function of
  (seed, job, slot) so every policy meets the very same failures.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache

from firepool.scheduling import (
    Configuration,
    GpuSpec,
    app_model,
    candidate_configurations,
    estimate_goodputs,
    p_restart_for,
)

V100 = GpuSpec("V100", 16.0, 2.0, 4)
CLUSTER_GPUS: Mapping[str, GpuSpec] = {"V100": V100}
CLUSTER_CAPACITY: Mapping[str, int] = {"V100": 12}
REPLICAS: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12)
BUCKETS = 10  # goodput is re-estimated at progress 0.0, 0.1, ... (the GNS table's resolution)
SLOT_S = 60.0  # the failure stream's slot: the paper's per-round Bernoulli draw


@cache
def configs(app: str, max_replicas: int) -> tuple[Configuration, ...]:
    """The candidate configurations of `app` that fit a V100's memory, up to `max_replicas`."""
    choices = tuple(r for r in REPLICAS if r <= max_replicas)
    keep, _ = candidate_configurations(
        app_model(app), CLUSTER_GPUS, replica_choices=choices, max_replicas=max_replicas
    )
    return keep


@cache
def goodputs(app: str, max_replicas: int, bucket: int) -> tuple[float, ...]:
    """The policy's goodput estimates (1.0 = one reference GPU) at this progress bucket."""
    return estimate_goodputs(
        app_model(app), configs(app, max_replicas), CLUSTER_GPUS, progress=bucket / BUCKETS
    )


@cache
def rate(app: str, cfg: Configuration, bucket: int) -> float:
    """Samples per second (at the initial batch's efficiency) of `app` on `cfg`."""
    spec = CLUSTER_GPUS[cfg.gpu_type]
    value, _ = app_model(app).goodput(
        cfg.nodes,
        cfg.replicas,
        progress=bucket / BUCKETS,
        speed=spec.speed,
        memory_gib=spec.memory_gib,
    )
    return value


@dataclass(frozen=True, slots=True)
class RestartCost:
    """How an application's restart penalty P (paper section IV-D) is spent.

    The paper defines P as the checkpoint loading paid after every interruption and adds it to
    `T_ckpt` on each failure; its simulator charges nothing for saving. So by default a graceful
    stop saves in no time and every start after the first restores for the whole P: a resize
    costs P, a failure costs P, exactly what the simulator charged before it drove the shared
    lifecycle. `save_share` moves part of P to the save (a resize still costs P in total; a
    failure, which kills the attempt without saving, then costs only the restore), for
    sensitivity runs.
    """

    save_share: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.save_share <= 1.0:
            raise ValueError("save_share must be in [0, 1]")

    def save_s(self, app: str) -> float:
        return self.save_share * p_restart_for(app)

    def restore_s(self, app: str) -> float:
        return (1.0 - self.save_share) * p_restart_for(app)
