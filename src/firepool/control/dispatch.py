"""Dispatcher decisions shared by the service and the simulator: queue order, one dispatch
pass over the tracker, and what an attempt's end means for its job.

The five-step job path (claim -> prepare -> durable commit -> mark pods -> launch) is executed
by the drivers; what is decided here is which jobs claim in which order and, when an attempt
ends, whether the job succeeded, failed with which error class, or is retried.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from firepool.control.records import ClaimRequest, Lease, Wait, WaitReason
from firepool.control.reservations import GangReservations
from firepool.control.tracker import Tracker
from firepool.model import JobErrorClass, JobState
from firepool.model.frozen_init import fast_frozen_init


@dataclass(frozen=True, slots=True)
class QueuedJob:
    """A queued job as the dispatcher orders it: higher priority first, then oldest first."""

    request: ClaimRequest
    priority: int = 0
    submitted_at: float = 0.0

    @property
    def order_key(self) -> tuple[int, float, str]:
        return (-self.priority, self.submitted_at, self.request.job)


@dataclass(slots=True)
class DispatchPass:
    leases: list[Lease]
    waiting: list[Wait]


def dispatch_pass(
    tracker: Tracker,
    queued: Iterable[QueuedJob],
    now: float,
    reservations: GangReservations | None = None,
) -> DispatchPass:
    """Claim for every queued job in order. A job that cannot be placed is skipped, not
    waited on, so a large gang never blocks the smaller jobs behind it (and holds no pods while
    it waits: claims are all or nothing). With `reservations`, the oldest gang that found no
    capacity in a pool reserves it, and the jobs behind it there take only what leaves the
    gang its pods (control/reservations.py)."""
    result = DispatchPass([], [])
    if reservations is not None:
        reservations.expire(now)
    for job in sorted(queued, key=lambda j: j.order_key):
        req = job.request
        if reservations is not None:
            r = reservations.holder(req.pool)
            if r is not None and r.job != req.job and job.order_key > r.key:
                fresh = tracker.fresh_count(req.pool)
                own = tracker.caller_held(req.pool, req.caller, now)
                if own < req.pods and not reservations.allows(r, fresh, req.pods):
                    result.waiting.append(Wait(req.job, WaitReason.GANG_RESERVED))
                    continue
        outcome = tracker.claim(req, now)
        if isinstance(outcome, Lease):
            result.leases.append(outcome)
            if reservations is not None:
                reservations.close(req.job)
            continue
        result.waiting.append(outcome)
        if (
            reservations is not None
            and outcome.reason is WaitReason.NO_CAPACITY
            and reservations.holder(req.pool) is None
        ):
            reservations.open(req.job, req.pool, req.pods, now, job.order_key)
    if reservations is not None:
        for pool in list(reservations.by_pool):
            reservations.note_holding(pool, tracker.fresh_count(pool))
    return result


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class AttemptEnd:
    """How an attempt ended, as the agent and the driver observed it.

    `exit_code` is the rank-0 process's exit code, None when no process exited (the launch
    failed, the pod was lost, or the job was stopped before it started).
    """

    exit_code: int | None = None
    signal: int | None = None
    oom: bool = False
    timed_out: bool = False
    cancelled: bool = False
    launch_failed: bool = False
    pod_lost: bool = False
    dependency_failed: bool = False
    message: str | None = None


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class Verdict:
    """What becomes of the job: a terminal state, or QUEUED for a new attempt."""

    state: JobState
    error_class: JobErrorClass | None
    exit_code: int | None
    message: str | None = None

    @property
    def retry(self) -> bool:
        return self.state is JobState.QUEUED


def no_retry_after_cancel(verdict: Verdict) -> Verdict:
    """A cancel that landed after the attempt ended (while its pods were reset, or while its
    verdict was being written) asked for no more attempts: a retry becomes CANCELLED, with the
    attempt's exit code kept. A terminal verdict stands: the attempt ended before the cancel
    could change how."""
    if not verdict.retry:
        return verdict
    return Verdict(
        JobState.CANCELLED,
        JobErrorClass.CANCELLED,
        verdict.exit_code,
        "cancelled after its attempt ended, before a retry",
    )


def judge(end: AttemptEnd, retries: int, max_retries: int) -> Verdict:
    """Decide the job's fate. Cancellation and timeouts are final; every other failure is
    retried while `retries < max_retries`, as a new attempt with a new id (unless a cancel
    came meanwhile: `no_retry_after_cancel`, which the core applies to every verdict)."""
    code = end.exit_code
    if end.cancelled:
        return Verdict(JobState.CANCELLED, JobErrorClass.CANCELLED, code, end.message)
    if end.timed_out:
        return Verdict(JobState.FAILED, JobErrorClass.TIMEOUT, code, end.message)
    error: JobErrorClass | None
    if end.oom:
        error = JobErrorClass.OOM
    elif end.launch_failed:
        error = JobErrorClass.LAUNCH_FAILED
    elif end.dependency_failed:
        error = JobErrorClass.DEPENDENCY_INSTALL_FAILED
    elif end.pod_lost:
        error = JobErrorClass.POD_LOST
    elif end.signal is not None:
        error = JobErrorClass.KILLED
    elif code is None:
        error = JobErrorClass.LAUNCH_FAILED
    elif code != 0:
        error = JobErrorClass.NON_ZERO_EXIT
    else:
        return Verdict(JobState.SUCCEEDED, None, 0, end.message)
    state = JobState.QUEUED if retries < max_retries else JobState.FAILED
    return Verdict(state, error, code, end.message)
