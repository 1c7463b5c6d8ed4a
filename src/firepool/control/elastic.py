"""Elastic training jobs: the round lifecycle as pure, clock-injected decisions.

The driver (service or simulator) feeds events with the time they happened (`submit`,
`progress`, `attempt_exited`) and asks `round_due(now)`; when a round is due it calls
`run_round(now, policy)` and executes the returned decisions:

* `StartAttempt`   launch a new attempt of the job at the configuration's world size; it restores
                   from the job's persistent checkpoint;
* `StopAttempt`    end the attempt gracefully (SIGTERM: the job checkpoints, then exits); the
                   driver reports the exit with `attempt_exited(..., "checkpointed")`;
* `Unplaceable`    no configuration of the job can ever run on this cluster (reported once).

A size change is therefore a graceful stop followed by a start with the new world size. Starts
wait for GPUs still held by attempts that are checkpointing, so the GPUs held by attempts never
exceed the capacity, even in the middle of a reallocation.

Rounds run on a timer (default 60 s) and early on an arrival, a completion or a failure.
Measured times, per job, from the events alone:
  T_progress  time with a running attempt after its first progress report;
  T_ckpt      time from an attempt's start decision to its first progress report (restore) plus
              the time from a stop request to the exit (checkpoint); a job's very first start
              restores nothing and counts as queueing only;
  T_queue     time without an allocation or restoring (cumulative, it is the age key's input);
  T_ckpt of failures  the part of T_ckpt spent restoring after a failed attempt (what the
              scheduler paper's section IV-D charges to the restart factor).
Injected failures for experiments come from `control/failures.py`, the one failure stream of
every driver.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

from firepool.model import InvalidTransitionError, NotFoundError, RequestValidationError
from firepool.scheduling import (
    Configuration,
    GpuSpec,
    JobRoundState,
    RoundInput,
    RoundPolicy,
    RoundResult,
    ThroughputObservation,
    app_model,
    estimate_goodputs,
)
from firepool.scheduling.backfill import backfill

DEFAULT_ROUND_S = 60.0

Trigger = Literal["timer", "arrival", "completion", "failure"]
ExitOutcome = Literal["checkpointed", "completed", "failed"]


class Phase(StrEnum):
    WAITING = "waiting"  # no attempt (queued, preempted or failed); may have a target
    RESTORING = "restoring"  # attempt started, no progress report yet
    RUNNING = "running"  # attempt making progress
    STOPPING = "stopping"  # graceful stop requested, checkpointing
    DONE = "done"


@dataclass(frozen=True, slots=True)
class ElasticJobSpec:
    """What the broker knows about an elastic job when it is submitted."""

    job_id: str
    app: str
    configurations: tuple[Configuration, ...]
    submitted_at: float
    p_restart: float | None = None
    progress_fraction: float = 0.5  # training progress used by the goodput prior


@dataclass(frozen=True, slots=True)
class StartAttempt:
    job_id: str
    attempt: int
    configuration: Configuration

    @property
    def world_size(self) -> int:
        return self.configuration.replicas


@dataclass(frozen=True, slots=True)
class StopAttempt:
    job_id: str
    attempt: int
    reason: Literal["resize", "preempt"]
    target: Configuration | None  # the next configuration, started after the exit


@dataclass(frozen=True, slots=True)
class Unplaceable:
    job_id: str
    reason: str


Decision = StartAttempt | StopAttempt | Unplaceable


@dataclass(frozen=True, slots=True)
class RoundOutcome:
    trigger: Trigger
    result: RoundResult
    decisions: tuple[Decision, ...]


#: Goodput estimates per configuration of a job, from its spec, measured throughput and its
#: training progress in [0, 1] (the statistical efficiency of large batches grows with it).
GoodputSource = Callable[
    [ElasticJobSpec, Sequence[ThroughputObservation], float], tuple[float, ...]
]


def fitted_goodputs(gpus: Mapping[str, GpuSpec]) -> GoodputSource:
    """Goodputs from the fitted application models, corrected by measured throughput."""

    def source(spec: ElasticJobSpec, observed: Sequence[ThroughputObservation],
               fraction: float) -> tuple[float, ...]:
        return estimate_goodputs(app_model(spec.app), spec.configurations, gpus,
                                 progress=fraction, observations=observed)

    return source


@dataclass(slots=True)
class _Job:
    spec: ElasticJobSpec
    phase: Phase = Phase.WAITING
    attempt: int = 0  # number of attempts started so far
    config: Configuration | None = None  # held by the live attempt
    target: Configuration | None = None  # wanted by the last round
    last: float = 0.0
    t_progress: float = 0.0
    t_ckpt: float = 0.0
    t_queue: float = 0.0
    restarts: int = 0
    failures: int = 0  # attempts that failed (a subset of restarts): what max_retries bounds
    t_ckpt_failures: float = 0.0  # restore time after failed attempts (part of t_ckpt)
    after_failure: bool = False  # the next restore follows a failure
    fraction: float = 0.0  # training progress in [0, 1], from the job's reports
    withdrawn: bool = False  # cancelled: done once its live attempt (if any) has exited
    reported_unplaceable: bool = False
    observed: dict[Configuration, ThroughputObservation] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class JobTimes:
    """A read-only view of one job's measured state."""

    phase: Phase
    attempt: int
    configuration: Configuration | None
    t_progress: float
    t_ckpt: float
    t_queue: float
    restarts: int
    failures: int


class ElasticLifecycle:
    """All elastic jobs of one cluster partition; pure state machine, `now` always passed in."""

    def __init__(
        self,
        capacity: Mapping[str, int],
        goodputs: GoodputSource,
        *,
        round_s: float = DEFAULT_ROUND_S,
        start: float = 0.0,
        work_conserving: bool = False,
    ) -> None:
        """`work_conserving` hands capacity the policy left idle to jobs that want it
        (`scheduling.backfill`); off, the policy's answer is carried out as it is (the papers'
        experiments)."""
        if not round_s > 0:
            raise RequestValidationError("round interval must be > 0", field="round_s")
        self._capacity = dict(capacity)
        self._goodputs = goodputs
        self._round_s = round_s
        self._work_conserving = work_conserving
        self._next_round = start + round_s
        self._pending: list[Trigger] = []
        self._jobs: dict[str, _Job] = {}
        #: The jobs not DONE, in submission order: every walk below is over these (a long
        #: run's finished jobs outnumber its live ones, and a DONE job's counters are final).
        self._live: dict[str, _Job] = {}
        self._now = start

    # ------------------------------------------------------------------ clock and views

    @property
    def next_round_at(self) -> float:
        return self._next_round

    def _tick(self, now: float) -> None:
        if now < self._now:
            raise RequestValidationError(f"time went backwards: {now} < {self._now}",
                                         field="now")
        self._now = now
        for job in self._live.values():
            self._advance(job, now)

    @staticmethod
    def _advance(job: _Job, now: float) -> None:
        dt = max(now - job.last, 0.0)
        job.last = now
        if job.phase is Phase.WAITING:
            job.t_queue += dt
        elif job.phase is Phase.RESTORING:
            job.t_queue += dt
            if job.t_progress > 0.0:  # a first start restores nothing: not overhead
                job.t_ckpt += dt
                if job.after_failure:
                    job.t_ckpt_failures += dt
        elif job.phase is Phase.RUNNING:
            job.t_progress += dt
        elif job.phase is Phase.STOPPING:
            job.t_ckpt += dt

    def _job(self, job_id: str) -> _Job:
        try:
            return self._jobs[job_id]
        except KeyError:
            raise NotFoundError(f"unknown elastic job {job_id}", field="job_id") from None

    def _done(self, job: _Job) -> None:
        job.phase = Phase.DONE
        del self._live[job.spec.job_id]
        self._pending.append("completion")

    def times(self, job_id: str, now: float | None = None) -> JobTimes:
        """The job's counters, brought up to `now` (if given and not in the past)."""
        if now is not None and now >= self._now:
            self._tick(now)
        j = self._job(job_id)
        return JobTimes(j.phase, j.attempt, j.config, j.t_progress, j.t_ckpt, j.t_queue,
                        j.restarts, j.failures)

    def held(self) -> dict[str, int]:
        """GPUs per type held by live attempts (restoring, running or checkpointing)."""
        out: dict[str, int] = {}
        for j in self._live.values():
            if j.config is not None:
                out[j.config.gpu_type] = out.get(j.config.gpu_type, 0) + j.config.replicas
        return out

    def running(self) -> list[tuple[str, int]]:
        """(job, attempt) of every attempt that can fail (restoring or running)."""
        return sorted((j.spec.job_id, j.attempt) for j in self._live.values()
                      if j.phase in (Phase.RESTORING, Phase.RUNNING))

    # ------------------------------------------------------------------ events

    def submit(self, spec: ElasticJobSpec, now: float) -> None:
        if spec.job_id in self._jobs:
            raise RequestValidationError(f"elastic job {spec.job_id} exists", field="job_id")
        self._tick(now)
        job = _Job(spec=spec, last=now, fraction=spec.progress_fraction)
        self._jobs[spec.job_id] = self._live[spec.job_id] = job
        self._pending.append("arrival")

    def progress(self, job_id: str, attempt: int, now: float,
                 samples_per_s: float | None = None, fraction: float | None = None) -> bool:
        """A progress report (the SDK's progress call); the first one ends the restore.

        Returns False for a stale report (an earlier attempt's), which changes nothing.
        `samples_per_s` replaces the goodput prior of the running configuration; `fraction`
        (training progress in [0, 1]) moves the prior's statistical efficiency.
        """
        if samples_per_s is not None and not (math.isfinite(samples_per_s)
                                              and samples_per_s >= 0):
            raise RequestValidationError("samples_per_s must be finite and >= 0",
                                         field="samples_per_s")
        if fraction is not None and not 0.0 <= fraction <= 1.0:
            raise RequestValidationError("fraction must be in [0, 1]", field="fraction")
        self._tick(now)
        job = self._job(job_id)
        if attempt != job.attempt or job.phase not in (Phase.RESTORING, Phase.RUNNING,
                                                       Phase.STOPPING):
            return False
        if job.phase is Phase.RESTORING:
            job.phase = Phase.RUNNING
            job.after_failure = False
        if fraction is not None:
            job.fraction = fraction
        if samples_per_s is not None and job.config is not None:
            obs = ThroughputObservation(job.config, samples_per_s)
            job.observed[job.config] = obs
        return True

    def withdraw(self, job_id: str, now: float) -> list[Decision]:
        """The job is cancelled: no new attempt starts; it is done at once when it holds no
        GPUs, else when its live attempt exits (the driver stops that attempt itself)."""
        self._tick(now)
        job = self._job(job_id)
        job.withdrawn = True
        job.target = None
        if job.config is None and job.phase is not Phase.DONE:
            self._done(job)
        return self._launch_ready()

    def attempt_exited(self, job_id: str, attempt: int, now: float,
                       outcome: ExitOutcome) -> list[Decision]:
        """The attempt's processes are gone; frees its GPUs and may start waiting attempts."""
        self._tick(now)
        job = self._job(job_id)
        if attempt != job.attempt or job.config is None:
            raise InvalidTransitionError(
                f"job {job_id}: attempt {attempt} is not live (current {job.attempt})",
                field="attempt",
            )
        job.config = None
        if outcome == "failed":
            job.failures += 1
        job.after_failure = outcome == "failed"
        if outcome == "completed" or job.withdrawn:
            job.target = None
            self._done(job)
        elif outcome == "failed":
            job.phase = Phase.WAITING
            job.restarts += 1
            job.target = None  # the next round decides afresh
            self._pending.append("failure")
        else:
            job.phase = Phase.WAITING
            job.restarts += 1  # resized or preempted: it resumes from the checkpoint
        return self._launch_ready()

    # ------------------------------------------------------------------ rounds

    def round_due(self, now: float) -> Trigger | None:
        """Why a round should run now, or None."""
        if self._pending:
            return self._pending[0]
        if now >= self._next_round:
            return "timer"
        return None

    def round_input(self, now: float) -> RoundInput:
        self._tick(now)
        jobs = []
        for j in self._live.values():
            current = j.config if j.phase in (Phase.RESTORING, Phase.RUNNING) else None
            jobs.append(JobRoundState(
                job_id=j.spec.job_id,
                configurations=j.spec.configurations,
                goodputs=self._goodputs(j.spec, tuple(j.observed.values()), j.fraction),
                app=j.spec.app,
                t_progress=j.t_progress,
                t_ckpt=j.t_ckpt,
                t_queue=j.t_queue,
                p_restart=j.spec.p_restart,
                current=current,
                age_s=max(now - j.spec.submitted_at, 0.0),
                restarts=j.restarts,
                failures=j.failures,
                t_ckpt_failures=j.t_ckpt_failures,
                restoring=j.phase is Phase.RESTORING,
            ))
        return RoundInput(capacity=dict(self._capacity), jobs=tuple(jobs), round_s=self._round_s)

    def run_round(self, now: float, policy: RoundPolicy) -> RoundOutcome:
        trigger = self.round_due(now) or "timer"
        round_input = self.round_input(now)
        result = policy.decide(round_input)
        if self._work_conserving:
            result = backfill(round_input, result)
        decisions = self.apply(now, result)
        self._pending.clear()
        self._next_round = now + self._round_s
        return RoundOutcome(trigger, result, tuple(decisions))

    def apply(self, now: float, result: RoundResult) -> list[Decision]:
        """Turn a round result into stops, starts and unplaceable reports."""
        self._tick(now)
        out: list[Decision] = []
        for job_id, reason in result.infeasible.items():
            job = self._jobs.get(job_id)
            if job is not None and not job.reported_unplaceable:
                job.reported_unplaceable = True
                out.append(Unplaceable(job_id, reason))
        for job_id, target in result.assignments.items():
            job = self._jobs.get(job_id)
            if job is None or job.phase is Phase.DONE:
                continue
            job.target = target
            if job.phase in (Phase.RESTORING, Phase.RUNNING) and job.config != target:
                job.phase = Phase.STOPPING
                out.append(StopAttempt(job_id, job.attempt,
                                       "resize" if target is not None else "preempt", target))
        out.extend(self._launch_ready())
        return out

    def _launch_ready(self) -> list[Decision]:
        held = self.held()
        out: list[Decision] = []
        for job in self._live.values():
            cfg = job.target
            if job.phase is not Phase.WAITING or cfg is None:
                continue
            free = self._capacity.get(cfg.gpu_type, 0) - held.get(cfg.gpu_type, 0)
            if cfg.replicas > free:
                continue  # waits for GPUs still checkpointing
            held[cfg.gpu_type] = held.get(cfg.gpu_type, 0) + cfg.replicas
            job.attempt += 1
            job.config = cfg
            job.phase = Phase.RESTORING
            out.append(StartAttempt(job.spec.job_id, job.attempt, cfg))
        return out

    # ------------------------------------------------------------------ failure hook
