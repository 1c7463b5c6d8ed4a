"""Venue models: how long pods take to start, stop and take a job, as distributions.

Each duration is a log-normal fixed by its median and 90th percentile (the two numbers papers
and our own measurements report), or a constant when both are equal. Starts contend: a pod
created while others are still starting waits `contention_s` longer per pod ahead of it, which
reproduces the broker paper's "eight at once up to 47.5 s" against 22.1 s for one.

Presets are calibrated from the broker paper (Table 1, appendix C.2 and C.4); a venue file
written by `firepool sim calibrate` replaces them with this machine's measurements.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import asdict, dataclass, field, fields
from functools import cache
from pathlib import Path

_Z90 = 1.2815515655446004  # the standard normal's 90th percentile


@dataclass(frozen=True, slots=True)
class Dist:
    """A positive duration: log-normal with this median and p90 (constant if equal)."""

    median: float
    p90: float

    def __post_init__(self) -> None:
        if not (self.median >= 0.0 and self.p90 >= self.median):
            raise ValueError(f"need 0 <= median <= p90, got {self.median}, {self.p90}")

    @property
    def sigma(self) -> float:
        return _sigma(self.median, self.p90)

    def sample(self, rng: random.Random) -> float:
        s = _sigma(self.median, self.p90)
        if s == 0.0:
            return self.median
        return self.median * math.exp(s * rng.gauss(0.0, 1.0))


@cache
def _sigma(median: float, p90: float) -> float:
    """Log-normal sigma from the median and p90; cached, as every sampled delay needs it."""
    if median <= 0.0 or p90 <= median:
        return 0.0
    return math.log(p90 / median) / _Z90


def const(value: float) -> Dist:
    return Dist(value, value)


@dataclass(frozen=True, slots=True)
class Venue:
    """Durations (seconds) of every backend and agent step the control plane waits on."""

    name: str
    create: Dist  # pod creation -> agent ready, one pod alone, image cached
    contention_s: float  # extra start time per pod already starting when this one is created
    delete: Dist  # delete call -> pod gone (its budget free again)
    accept: Dist  # API accepts the submission (durable) -> dispatcher woken
    dispatch: Dist  # dispatcher pass: claim + commit
    handoff: Dist  # lease -> job process started in the pod (package bound)
    first_instruction: Dist  # process start -> the job's first instruction
    reset: Dist  # job exit -> pod reset confirmed
    promote: Dist  # a standby takes over its GPU after the previous job is gone
    source: str = ""
    notes: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, object]) -> Venue:
        kwargs: dict[str, object] = {}
        for f in fields(cls):
            value = data.get(f.name)
            if isinstance(value, dict) and "median" in value:
                kwargs[f.name] = Dist(float(value["median"]), float(value["p90"]))
            elif value is not None:
                kwargs[f.name] = value
        return cls(**kwargs)  # type: ignore[arg-type]

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=2) + "\n")


# Broker paper, Table 1: cached cold start 22.1 s median, 34.7 s p90 (88 pods); eight created at
# once take up to 47.5 s, i.e. about (47.5 - 22.1) / 7 = 3.6 s more per pod ahead in the batch.
_CACHED_START = Dist(22.1, 34.7)
_CONTENTION = (47.5 - 22.1) / 7
# Appendix C.4, warm start on H200 with event-driven dispatch: accept 0.04, dispatch 0.01,
# hand-off 0.39, first instruction 0.12 s. Appendix C.2: clean reset 9.3 ms.
# Table 6: 0.81 s median queue wait for standby promotions, of which accept + dispatch are 0.05.
# The paper gives no pod deletion time directly. Section 9.1: the Reuse Off jobs that waited for a
# new pod under the 2-GPU cap waited 82 s at the median, i.e. deletion of the retired pod plus a
# cached start: 82 - 22.1 = 60 s median deletion (p90 75 s assumed), stated in
# docs/reproduction.md because it makes the fresh-pod arm partly calibrated, not predicted.

PRODUCTION_H200 = Venue(
    name="production-h200",
    create=_CACHED_START,
    contention_s=_CONTENTION,
    delete=Dist(60.0, 75.0),
    accept=const(0.04),
    dispatch=const(0.01),
    handoff=Dist(0.39, 0.54),
    first_instruction=Dist(0.12, 0.16),
    reset=Dist(0.0093, 0.187),
    promote=Dist(0.76, 1.1),
    source="broker paper Table 1, Table 6, appendix C.2 and C.4",
)

# CPU pods: the paper's CPU calibration uses the same 22 s cached start; binding a job costs
# 0.40-0.54 s at the median across the production benchmarks (section 9.2). No standbys on CPU.
PRODUCTION_CPU = Venue(
    name="production-cpu",
    create=_CACHED_START,
    contention_s=_CONTENTION,
    delete=Dist(60.0, 75.0),
    accept=const(0.04),
    dispatch=const(0.01),
    handoff=Dist(0.40, 0.54),
    first_instruction=Dist(0.12, 0.16),
    reset=Dist(0.0093, 0.187),
    promote=Dist(0.76, 1.1),
    source="broker paper section 9.2, Table 1, appendix C.2 and C.4",
)

# Local cluster (single-host k3d): a boundary retirement added 1.53 s and a fresh pod per job
# 3.42 s to start latency (section 9.5), so a local pod starts in roughly 3 s.
LOCAL_CLUSTER = Venue(
    name="local-cluster",
    create=Dist(3.0, 4.5),
    contention_s=0.5,
    delete=Dist(1.0, 2.0),
    accept=const(0.01),
    dispatch=const(0.005),
    handoff=Dist(0.05, 0.1),
    first_instruction=Dist(0.02, 0.04),
    reset=Dist(0.0093, 0.187),
    promote=Dist(0.05, 0.1),
    source="broker paper section 9.5 and appendix C.2 (rough)",
)

PRESETS: dict[str, Venue] = {v.name: v for v in (PRODUCTION_H200, PRODUCTION_CPU, LOCAL_CLUSTER)}


def load_venue(name_or_path: str) -> Venue:
    """A preset by name, or a venue file (JSON) written by `firepool sim calibrate`."""
    if name_or_path in PRESETS:
        return PRESETS[name_or_path]
    path = Path(name_or_path)
    if not path.exists():
        raise ValueError(f"unknown venue {name_or_path!r}: no preset {sorted(PRESETS)}, no file")
    data = json.loads(path.read_text())
    if not isinstance(data, dict):
        raise ValueError(f"venue file {path} must hold a JSON object")
    return Venue.from_json(data)
