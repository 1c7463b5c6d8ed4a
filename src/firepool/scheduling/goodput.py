"""Pollux-style goodput model: fitted step time x statistical efficiency, best batch size.

Step time (Qiao et al., OSDI'21, as in adaptdl's goodput model):
  compute  T_c = alpha_c + beta_c * local_batch                       (linear in the local batch)
  network  T_n = alpha_n + beta_n * max(replicas - 2, 0)  if the job spans nodes
               = alpha_r + beta_r * max(replicas - 2, 0)  if it spans GPUs of one node
               = 0                                        for one replica
  step     T   = (T_c^gamma + T_n^gamma)^(1/gamma) + accum_steps * T_c   (gamma in [1, 10]
               interpolates between no overlap and full overlap of compute and network)
Statistical efficiency of a global batch M, from the gradient-noise ratio phi = var/sqr measured
at the initial batch M0: E(M) = (phi + 1) / (phi + M / M0), i.e. the fraction of progress per
sample that a batch of M keeps relative to M0. Goodput = (M / T) * E(M), maximised over M.

The fitted numbers live in `data/goodput_params.json` (see `tools/fit_goodput.py`), loaded once
through importlib.resources: the only I/O this package does.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import cache
from importlib import resources

import numpy as np
import numpy.typing as npt

from firepool.scheduling.errors import UnknownApplicationError

FloatArray = npt.NDArray[np.float64]

#: GPU the traces were measured on (AWS g4dn, NVIDIA T4), the 1.0 of speeds and memory scaling.
TRACE_GPU = "T4"
TRACE_GPU_MEMORY_GIB = 16.0
_BATCH_SAMPLES = 48  # candidate global batch sizes per evaluation (geometric grid)


@dataclass(frozen=True, slots=True)
class PerfParams:
    alpha_c: float
    beta_c: float
    alpha_n: float
    beta_n: float
    alpha_r: float
    beta_r: float
    gamma: float

    def as_list(self) -> list[float]:
        return [
            self.alpha_c,
            self.beta_c,
            self.alpha_n,
            self.beta_n,
            self.alpha_r,
            self.beta_r,
            self.gamma,
        ]


def compute_time(params: PerfParams, local_bsz: FloatArray) -> FloatArray:
    return params.alpha_c + params.beta_c * local_bsz


def network_time(params: PerfParams, nodes: FloatArray, replicas: FloatArray) -> FloatArray:
    extra = np.maximum(replicas - 2.0, 0.0)
    inter = params.alpha_n + params.beta_n * extra
    intra = params.alpha_r + params.beta_r * extra
    return np.where(nodes > 1, inter, np.where(replicas > 1, intra, 0.0))


def step_time(
    params: PerfParams,
    nodes: FloatArray,
    replicas: FloatArray,
    local_bsz: FloatArray,
    accum_steps: FloatArray | float = 0.0,
) -> FloatArray:
    """Predicted time of one optimizer step (seconds), element-wise."""
    tc = compute_time(params, local_bsz)
    tn = network_time(params, nodes, replicas)
    g = params.gamma
    combined: FloatArray = (tc**g + tn**g) ** (1.0 / g)
    return combined + np.asarray(accum_steps, dtype=np.float64) * tc


@dataclass(frozen=True, slots=True)
class AppModel:
    """Fitted model of one application (numbers from the Pollux traces, see the data file)."""

    name: str
    perf: PerfParams
    init_batch_size: int
    max_batch_size: int
    min_local_bsz: int
    max_local_bsz: int
    gns_progress: tuple[float, ...]  # training-progress fractions of the phi table
    gns_batch: tuple[int, ...]  # batch sizes of the phi table (validation runs)
    gns_phi: tuple[tuple[float, ...], ...]  # phi[batch][progress] = grad_var / grad_sqr

    def phi(self, batch: FloatArray, progress: float) -> FloatArray:
        """Gradient-noise ratio at a global batch and training progress (interpolated)."""
        f = min(max(progress, 0.0), 1.0)
        per_batch = np.array([np.interp(f, self.gns_progress, row) for row in self.gns_phi])
        logb = np.log(np.clip(batch, self.gns_batch[0], self.gns_batch[-1]))
        out: FloatArray = np.interp(
            logb, np.log(np.array(self.gns_batch, dtype=np.float64)), per_batch
        )
        return out

    def efficiency(self, batch: FloatArray, progress: float) -> FloatArray:
        phi = self.phi(batch, progress)
        result: FloatArray = (phi + 1.0) / (phi + batch / self.init_batch_size)
        return result

    def max_local(self, memory_gib: float) -> int:
        """Largest local batch that fits a GPU with this much memory (scaled from the T4)."""
        return math.floor(self.max_local_bsz * memory_gib / TRACE_GPU_MEMORY_GIB)

    def fits(self, replicas: int, memory_gib: float) -> bool:
        """The memory filter: can `replicas` GPUs of this size run the job at all?"""
        if replicas * self.min_local_bsz > self.max_batch_size:
            return False  # even the smallest local batch overshoots the largest batch
        return self.max_local(memory_gib) >= self.min_local_bsz

    def goodput(
        self,
        nodes: int,
        replicas: int,
        *,
        progress: float = 0.5,
        speed: float = 1.0,
        memory_gib: float = TRACE_GPU_MEMORY_GIB,
    ) -> tuple[float, int]:
        """(best goodput in samples/s at efficiency 1 ≡ batch M0, the batch achieving it).

        `speed` divides compute time (relative speed of the GPU type against the T4).
        Returns (0.0, 0) when the configuration cannot run.
        """
        if not self.fits(replicas, memory_gib):
            return 0.0, 0
        max_local = self.max_local(memory_gib)
        lo = max(self.init_batch_size, replicas * self.min_local_bsz)
        hi = self.max_batch_size
        batch = np.geomspace(lo, hi, _BATCH_SAMPLES) if hi > lo else np.array([float(lo)])
        local = batch / replicas
        accum = np.ceil(local / max_local - 1e-8) - 1.0
        accum = np.maximum(accum, 0.0)
        atomic = np.ceil(local / (accum + 1.0) - 1e-8)
        perf = self.perf
        scaled = PerfParams(
            perf.alpha_c / speed,
            perf.beta_c / speed,
            perf.alpha_n,
            perf.beta_n,
            perf.alpha_r,
            perf.beta_r,
            perf.gamma,
        )
        n = np.full_like(batch, float(nodes))
        r = np.full_like(batch, float(replicas))
        t = step_time(scaled, n, r, atomic, accum)
        real_batch = replicas * atomic * (accum + 1.0)
        values = real_batch / t * self.efficiency(real_batch, progress)
        best = int(np.argmax(values))
        return float(values[best]), int(real_batch[best])


@dataclass(frozen=True, slots=True)
class FitReport:
    """How well the step-time model matches the traces (relative error of step time)."""

    mape: float
    p90_ape: float
    points: int


def _parse(entry: dict[str, object], name: str) -> AppModel:
    perf = entry["perf"]
    gns = entry["gns"]
    assert isinstance(perf, dict) and isinstance(gns, dict)
    return AppModel(
        name=name,
        perf=PerfParams(**{k: float(v) for k, v in perf.items()}),
        init_batch_size=int(str(entry["init_batch_size"])),
        max_batch_size=int(str(entry["max_batch_size"])),
        min_local_bsz=int(str(entry["min_local_bsz"])),
        max_local_bsz=int(str(entry["max_local_bsz"])),
        gns_progress=tuple(float(v) for v in gns["progress"]),
        gns_batch=tuple(int(v) for v in gns["batch"]),
        gns_phi=tuple(tuple(float(v) for v in row) for row in gns["phi"]),
    )


@cache
def _raw() -> dict[str, object]:
    text = resources.files("firepool.scheduling").joinpath("data/goodput_params.json").read_text()
    data: dict[str, object] = json.loads(text)
    return data


@cache
def app_models() -> dict[str, AppModel]:
    """All fitted applications by name (loaded once from the packaged data file)."""
    apps = _raw()["applications"]
    assert isinstance(apps, dict)
    return {name: _parse(entry, name) for name, entry in apps.items()}


def app_model(name: str) -> AppModel:
    try:
        return app_models()[name.lower()]
    except KeyError:
        raise UnknownApplicationError(
            f"no fitted goodput model for {name!r}; known: {sorted(app_models())}", field="app"
        ) from None


def fit_reports() -> dict[str, FitReport]:
    """The fit error recorded with the parameters, per application."""
    apps = _raw()["applications"]
    assert isinstance(apps, dict)
    out: dict[str, FitReport] = {}
    for name, entry in apps.items():
        err = entry["fit_error"]
        out[name] = FitReport(
            float(err["step_time_mape"]), float(err["step_time_p90_ape"]), int(err["points"])
        )
    return out
