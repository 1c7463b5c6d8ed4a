"""Rows as the rest of the broker sees them: plain frozen records, never ORM objects.

A record is also the *expectation* for the next conditional write: `start(job, ...)` writes
only if the row still has `job.version`, so whoever read the record owns the decision made
from it, and a concurrent writer makes the write fail loudly instead of being overwritten.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from firepool.model import (
    JOB_TRANSITIONS,
    AcquisitionPath,
    InvalidTransitionError,
    JobErrorClass,
    JobSpec,
    JobState,
    PoolSpec,
    attempt_id,
)
from firepool.model.frozen_init import fast_frozen_init

#: The timing names a job carries, in the order a job passes them.
TIMING_NAMES = ("submitted", "assigned", "started", "first_instruction", "finished")


def timings(
    base: dict[str, float | None] | None = None, **changes: float | None
) -> dict[str, float | None]:
    """A complete timings map (every name present, None until it happens) with `changes`."""
    full: dict[str, float | None] = dict.fromkeys(TIMING_NAMES)
    if base:
        full.update(base)
    full.update(changes)
    return full


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class PodBinding:
    """One pod of an attempt, with how it was obtained and why no warmer path was used."""

    rank: int
    pod: str
    acquisition: AcquisitionPath
    reason: str
    pool: str = ""


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class JobRecord:
    id: str
    caller: str
    spec: JobSpec
    state: JobState
    version: int
    retries: int = 0
    exit_code: int | None = None
    error_class: JobErrorClass | None = None
    message: str | None = None
    cancel_requested: bool = False
    timings: dict[str, float | None] = field(default_factory=dict)
    #: Bindings of the current (or last) attempt, rank order.
    pods: tuple[PodBinding, ...] = ()
    #: Earlier attempts that ended `Reclaimed`: counted in `retries`, never as failures.
    reclaims: int = 0

    @property
    def attempt(self) -> str:
        """The id of the current (or last) attempt: `<job-id>:<retry>`."""
        return attempt_id(self.id, self.retries)


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class AttemptRecord:
    id: str
    job_id: str
    retry: int
    state: JobState
    started_at: float
    finished_at: float | None
    exit_code: int | None
    error_class: JobErrorClass | None
    pods: tuple[PodBinding, ...]


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class Submitted:
    """The answer to a submission: the job, and whether this call created it (False when a
    retried `request_id` found the job an earlier call made)."""

    job: JobRecord
    created: bool


@dataclass(frozen=True, slots=True)
class PackageRecord:
    digest: str
    size: int
    created_at: float
    uploaded_by: str


def check_transition(job: JobRecord, to: JobState) -> None:
    """Refuse an illegal job transition before anything is written (every store, one table:
    `model.JOB_TRANSITIONS`)."""
    if to not in JOB_TRANSITIONS[job.state]:
        raise InvalidTransitionError(
            f"job {job.id}: {job.state.value} -> {to.value} is not a legal transition",
            field="state",
        )


@dataclass(frozen=True, slots=True)
class PoolEdit:
    """A pool spec an admin applied, as stored: what a restarted broker runs again."""

    spec: PoolSpec
    applied_at: float
