"""What the broker core asks its driver to do: plain data, executed with real I/O by the
service and in virtual time by the simulator.

Each driver feeds the outcome back as an event (`BrokerCore.pod_ready`, `committed`,
`attempt_over`, ...). Timing is the driver's business (the service wakes a loop at once, the
simulator waits a venue-sampled delay); what happens, and in which order, is the core's.
"""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple

from firepool.control.admission import CreateOrder
from firepool.control.dispatch import Verdict
from firepool.control.records import Lease, RetireReason, Ticket
from firepool.model import JobErrorClass


class StopMode(StrEnum):
    CANCEL = "cancel"  # the caller cancelled: stop every rank, the job ends CANCELLED
    GRACEFUL = "graceful"  # an elastic resize: SIGTERM, the job checkpoints and exits
    KILL = "kill"  # an injected failure: SIGKILL every rank at once
    RECLAIM = "reclaim"  # its borrowed capacity went back: kill every rank once launched


class Dispatch(NamedTuple):
    """Run a dispatch pass soon (something a queued job may be waiting for changed)."""


class Reconcile(NamedTuple):
    """Run the scaler for this pool soon."""

    pool: str


class CreatePod(NamedTuple):
    """Create the pod the tracker already tracks as starting; its budget is reserved.

    `peer` is a live pod on the same physical GPU for a standby (the card to pin it to), or
    None. Report `pod_ready` or `pod_failed`.
    """

    order: CreateOrder
    peer: str | None


class DeletePod(NamedTuple):
    """Delete the pod through the backend, then report `pod_deleted`."""

    pod: str
    reason: RetireReason


class StartAttempt(NamedTuple):
    """Commit QUEUED -> RUNNING with the lease's bindings (conditional on the row's version),
    then report `committed` or `commit_lost`. No user code runs before that commit."""

    ticket: Ticket
    lease: Lease


class LaunchAttempt(NamedTuple):
    """The committed attempt may start now (every pod is ungated and marked running)."""

    job: str


class StopAttempt(NamedTuple):
    job: str
    mode: StopMode


class FailQueued(NamedTuple):
    """A queued job that can never run ends FAILED with a typed class, without an attempt."""

    job: str
    error: JobErrorClass
    message: str


class RecordVerdict(NamedTuple):
    """Write the attempt's verdict (terminal state, or QUEUED for a retry), then report
    `verdict_recorded` with the state the store holds afterwards."""

    ticket: Ticket
    verdict: Verdict


class HoldPod(NamedTuple):
    """The pod is held for its last caller until `until`: persist it (annotations) and make
    sure `tick` runs by then."""

    pod: str
    until: float


class InjectFailure(NamedTuple):
    """Experiments: at `at`, kill every rank of the job's attempt if it is still this one."""

    job: str
    attempt: str
    at: float


Action = (
    Dispatch
    | Reconcile
    | CreatePod
    | DeletePod
    | StartAttempt
    | LaunchAttempt
    | StopAttempt
    | FailQueued
    | RecordVerdict
    | HoldPod
    | InjectFailure
)

DISPATCH = Dispatch()
