"""Candidate configurations (with the memory filter) and goodput estimates per configuration.

The prior comes from the fitted application model. Once a job reports measured throughput
(the SDK's progress call) for a configuration, the measurement replaces the prior for that
configuration, and the model is rescaled by the measured/predicted ratio for the others, so one
report immediately corrects a mis-profiled job everywhere. Goodputs are normalised by the prior
goodput on one reference GPU, the scale on which `mu_na = 1.1` is meaningful.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from firepool.scheduling.errors import InvalidGoodputError, InvalidRoundInputError
from firepool.scheduling.goodput import TRACE_GPU_MEMORY_GIB, AppModel
from firepool.scheduling.rounds import Configuration

DEFAULT_REPLICAS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """A GPU type: memory per device, compute speed relative to the trace GPU, GPUs per node."""

    name: str
    memory_gib: float = TRACE_GPU_MEMORY_GIB
    speed: float = 1.0
    gpus_per_node: int = 4

    def __post_init__(self) -> None:
        if not (self.memory_gib > 0 and self.speed > 0 and self.gpus_per_node >= 1):
            raise InvalidRoundInputError(f"invalid GPU spec {self!r}", field="gpu")


@dataclass(frozen=True, slots=True)
class ThroughputObservation:
    """Measured goodput (samples/s at efficiency of the reported batch) on one configuration."""

    configuration: Configuration
    samples_per_s: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.samples_per_s) and self.samples_per_s >= 0.0):
            raise InvalidGoodputError(
                f"measured throughput must be finite and >= 0, got {self.samples_per_s!r}",
                field="samples_per_s",
            )


def candidate_configurations(
    app: AppModel,
    gpus: Mapping[str, GpuSpec],
    *,
    min_replicas: int = 1,
    max_replicas: int = 32,
    replica_choices: Sequence[int] = DEFAULT_REPLICAS,
) -> tuple[tuple[Configuration, ...], dict[str, str]]:
    """Configurations that pass the memory filter, and why each other one was dropped."""
    keep: list[Configuration] = []
    dropped: dict[str, str] = {}
    for name in sorted(gpus):
        spec = gpus[name]
        for r in replica_choices:
            if not min_replicas <= r <= max_replicas:
                continue
            cfg = Configuration(name, r, math.ceil(r / spec.gpus_per_node))
            if app.fits(r, spec.memory_gib):
                keep.append(cfg)
            else:
                dropped[str(cfg)] = "memory filter: no local batch fits or batch exceeds maximum"
    return tuple(keep), dropped


def prior_goodput(
    app: AppModel, cfg: Configuration, gpus: Mapping[str, GpuSpec], progress: float
) -> float:
    spec = gpus.get(cfg.gpu_type, GpuSpec(cfg.gpu_type))
    value, _ = app.goodput(
        cfg.nodes, cfg.replicas, progress=progress, speed=spec.speed, memory_gib=spec.memory_gib
    )
    return value


def estimate_goodputs(
    app: AppModel,
    configurations: Sequence[Configuration],
    gpus: Mapping[str, GpuSpec],
    *,
    progress: float = 0.5,
    observations: Sequence[ThroughputObservation] = (),
) -> tuple[float, ...]:
    """Normalised goodput per configuration: measured where measured, the prior elsewhere.

    A job measures throughput in its own units (its samples, its hardware), the prior in the
    traces'. The measurements' geometric-mean ratio to the prior converts one into the other,
    and the one-GPU reference is converted with it, so the result stays "1.0 = this job on
    one reference GPU" whatever units the job reports in: a uniform scale changes nothing,
    and only the measured shape of the scaling curve moves the estimates.
    """
    reference, _ = app.goodput(1, 1, progress=progress)
    if reference <= 0.0:
        raise InvalidGoodputError(f"{app.name}: reference goodput is zero", field="app")
    measured = {o.configuration: o.samples_per_s for o in observations}
    ratios = []
    for cfg, value in measured.items():
        predicted = prior_goodput(app, cfg, gpus, progress)
        if predicted > 0.0 and value > 0.0:
            ratios.append(value / predicted)
    # Geometric mean: one slow and one fast report should cancel, not add.
    scale = math.exp(sum(math.log(x) for x in ratios) / len(ratios)) if ratios else 1.0
    out: list[float] = []
    for cfg in configurations:
        if cfg in measured:
            out.append(measured[cfg] / (reference * scale))
        else:
            out.append(prior_goodput(app, cfg, gpus, progress) / reference)
    return tuple(out)
