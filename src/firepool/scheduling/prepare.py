"""Validate a round and flatten it into option arrays every policy shares.

An *option* is one (job, configuration) pair that can run on this cluster. Policies work on the
flat arrays (numpy, vectorised) instead of nested objects, which is what keeps a 500-job round in
milliseconds. Validation lives here so every policy refuses bad input the same way, and a job
whose configurations all exceed the cluster is recorded in `infeasible`, never dropped silently.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from firepool.scheduling.errors import InvalidGoodputError, InvalidRoundInputError
from firepool.scheduling.memo import ConfigurationsMemo
from firepool.scheduling.rounds import Configuration, JobRoundState, RoundInput, RoundResult

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class PreparedRound:
    """A validated round as flat arrays; option k belongs to job `opt_job[k]`."""

    jobs: tuple[JobRoundState, ...]
    types: tuple[str, ...]
    capacity: FloatArray  # per type index
    opt_job: IntArray
    opt_type: IntArray
    opt_replicas: IntArray
    opt_goodput: FloatArray
    opt_is_current: BoolArray
    opt_config: tuple[Configuration, ...]
    infeasible: dict[str, str]
    round_s: float

    @property
    def n_jobs(self) -> int:
        return len(self.jobs)

    @property
    def n_options(self) -> int:
        return int(self.opt_job.shape[0])

    def current_option(self) -> IntArray:
        """Per job, the option equal to its current configuration, or -1."""
        out = np.full(self.n_jobs, -1, dtype=np.int64)
        idx = np.flatnonzero(self.opt_is_current)
        out[self.opt_job[idx]] = idx
        return out

    def result(self, policy: str, choice: IntArray, objective: float, solver: str) -> RoundResult:
        """Turn a per-job option choice (-1 = none) into a `RoundResult`."""
        assignments: dict[str, Configuration | None] = {}
        for i, job in enumerate(self.jobs):
            k = int(choice[i])
            assignments[job.job_id] = self.opt_config[k] if k >= 0 else None
        return RoundResult(
            policy=policy,
            assignments=assignments,
            infeasible=dict(self.infeasible),
            objective=objective,
            solver=solver,
        )


def _check_time(value: float, field: str) -> None:
    if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0.0):
        raise InvalidRoundInputError(
            f"{field} must be a finite number >= 0, got {value!r}", field=field
        )


def _bad_goodput(i: int, job: JobRoundState) -> InvalidGoodputError:
    for j, g in enumerate(job.goodputs):
        if not (isinstance(g, int | float) and math.isfinite(g) and g >= 0.0):
            return InvalidGoodputError(
                f"job {job.job_id}: goodput of {job.configurations[j]} must be finite and >= 0,"
                f" got {g!r}",
                field=f"jobs[{i}].goodputs[{j}]",
            )
    return InvalidGoodputError(f"job {job.job_id}: invalid goodput", field=f"jobs[{i}].goodputs")


_TIMES = ("t_progress", "t_ckpt", "t_ckpt_failures", "t_queue", "age_s", "remaining_work")


def _validate_jobs(jobs: tuple[JobRoundState, ...]) -> None:
    """All checks at once (numpy), then a precise error for the first offender."""
    for i, job in enumerate(jobs):
        if not job.job_id:
            raise InvalidRoundInputError("job_id must not be empty", field=f"jobs[{i}].job_id")
        if len(job.goodputs) != len(job.configurations):
            raise InvalidRoundInputError(
                f"job {job.job_id}: {len(job.goodputs)} goodputs for "
                f"{len(job.configurations)} configurations",
                field=f"jobs[{i}].goodputs",
            )
        if job.restarts < 0:
            raise InvalidRoundInputError("restarts must be >= 0", field=f"jobs[{i}].restarts")
        if job.failures < 0:
            raise InvalidRoundInputError("failures must be >= 0", field=f"jobs[{i}].failures")
        if job.p_restart is not None:
            _check_time(job.p_restart, f"jobs[{i}].p_restart")
    try:
        times = np.array([[getattr(j, n) for n in _TIMES] for j in jobs], dtype=np.float64)
        flat = np.fromiter((g for j in jobs for g in j.goodputs), dtype=np.float64)
    except (TypeError, ValueError):
        times = np.full((1, 1), np.nan)
        flat = np.full(1, np.nan)
    if times.size and not (np.isfinite(times).all() and (times >= 0).all()):
        for i, job in enumerate(jobs):
            for name in _TIMES:
                _check_time(getattr(job, name), f"jobs[{i}].{name}")
    if flat.size and not (np.isfinite(flat).all() and (flat >= 0).all()):
        for i, job in enumerate(jobs):
            err = _bad_goodput(i, job)
            if any(
                not (isinstance(g, int | float) and math.isfinite(g) and g >= 0.0)
                for g in job.goodputs
            ):
                raise err


class _KeptOptions(NamedTuple):
    """The configurations of one job that fit the cluster, as option columns."""

    positions: tuple[int, ...]  # into the job's configurations (and goodputs)
    types: tuple[int, ...]
    replicas: tuple[int, ...]
    configs: tuple[Configuration, ...]
    where: dict[Configuration, list[int]]  # a configuration -> its kept positions
    all_kept: bool


_Cluster = tuple[tuple[str, ...], tuple[int, ...]]  # GPU types (sorted), their capacities


def _kept_options(configurations: tuple[Configuration, ...], cluster: _Cluster) -> _KeptOptions:
    """The job's options on this cluster."""
    types, caps = cluster
    type_index = {t: k for k, t in enumerate(types)}
    positions: list[int] = []
    where: dict[Configuration, list[int]] = {}
    for k, cfg in enumerate(configurations):
        ti = type_index.get(cfg.gpu_type)
        if ti is None or cfg.replicas > caps[ti]:
            continue
        where.setdefault(cfg, []).append(len(positions))
        positions.append(k)
    configs = tuple(configurations[k] for k in positions)
    return _KeptOptions(
        positions=tuple(positions),
        types=tuple(type_index[c.gpu_type] for c in configs),
        replicas=tuple(c.replicas for c in configs),
        configs=configs,
        where=where,
        all_kept=len(positions) == len(configurations),
    )


_KEPT = ConfigurationsMemo(_kept_options)


def prepare(round_input: RoundInput) -> PreparedRound:
    """Validate `round_input` and build the option arrays (raises `InvalidRoundInputError`)."""
    _check_time(round_input.round_s, "round_s")
    types = tuple(sorted(round_input.capacity))
    for t in types:
        cap = round_input.capacity[t]
        if not (isinstance(cap, int) and cap >= 0):
            raise InvalidRoundInputError(
                f"capacity of {t} must be an integer >= 0, got {cap!r}", field=f"capacity.{t}"
            )
    capacity = np.array([round_input.capacity[t] for t in types], dtype=np.float64)
    cap_list = [round_input.capacity[t] for t in types]

    jobs = tuple(round_input.jobs)
    _validate_jobs(jobs)
    cluster = (types, tuple(cap_list))
    seen: set[str] = set()
    opt_job: list[int] = []
    opt_type: list[int] = []
    opt_replicas: list[int] = []
    opt_goodput: list[float] = []
    opt_current: list[bool] = []
    opt_config: list[Configuration] = []
    infeasible: dict[str, str] = {}
    for i, job in enumerate(jobs):
        if job.job_id in seen:
            raise InvalidRoundInputError(f"duplicate job {job.job_id}", field=f"jobs[{i}].job_id")
        seen.add(job.job_id)
        kept = _KEPT.of(job.configurations, cluster)
        n = len(kept.configs)
        if n:
            opt_job.extend([i] * n)
            opt_type.extend(kept.types)
            opt_replicas.extend(kept.replicas)
            opt_config.extend(kept.configs)
            goodputs = job.goodputs
            if kept.all_kept:
                opt_goodput.extend(goodputs)
            else:
                opt_goodput.extend([goodputs[k] for k in kept.positions])
            flags = [False] * n
            if job.current is not None:
                for k in kept.where.get(job.current, ()):
                    flags[k] = True
            opt_current.extend(flags)
        elif not job.configurations:
            infeasible[job.job_id] = "no candidate configurations (all filtered out)"
        else:
            names = ", ".join(str(c) for c in job.configurations)
            infeasible[job.job_id] = f"every configuration exceeds the cluster: {names}"
    return PreparedRound(
        jobs=jobs,
        types=types,
        capacity=capacity,
        opt_job=np.array(opt_job, dtype=np.int64),
        opt_type=np.array(opt_type, dtype=np.int64),
        opt_replicas=np.array(opt_replicas, dtype=np.int64),
        opt_goodput=np.array(opt_goodput, dtype=np.float64),
        opt_is_current=np.array(opt_current, dtype=np.bool_),
        opt_config=tuple(opt_config),
        infeasible=infeasible,
        round_s=float(round_input.round_s),
    )
