"""The class of a job's end: why a terminal job (or a retried attempt) stopped.

Kept apart from `ErrorCode`, the codes of refused requests, because the two answer different
questions: a refusal says what was wrong with a call, an end class says what happened to a
job that was accepted. A caller switching on `JobView.error_class` gets only the values a
job can end with. Five strings appear in both enums on purpose, because those refusals can
end an accepted job and the job then carries the refusal's string as its class: an agent
refuses a launch with `LaunchFailed` or `DependencyInstallFailed`, a backend a pod with
`Unschedulable`, a queued job's pool can leave the catalog (`UnknownPool`), and a class this
version cannot read is `InternalError`. The strings are a public contract: never rename one."""

from __future__ import annotations

from enum import StrEnum


class JobErrorClass(StrEnum):
    NON_ZERO_EXIT = "NonZeroExit"
    OOM = "OOM"
    KILLED = "Killed"
    TIMEOUT = "Timeout"
    CANCELLED = "Cancelled"
    LAUNCH_FAILED = "LaunchFailed"
    DEPENDENCY_INSTALL_FAILED = "DependencyInstallFailed"
    POD_LOST = "PodLost"
    #: an elastic job no configuration of which can ever run, or one with no round policy
    UNSCHEDULABLE = "Unschedulable"
    #: an elastic attempt the round policy ended to resize or preempt it
    PREEMPTED = "Preempted"
    #: the borrowed capacity the attempt ran on went back to its owner: always retried, never
    #: counted against `max_retries`
    RECLAIMED = "Reclaimed"
    #: the job's pool left the broker's catalog while it was queued
    UNKNOWN_POOL = "UnknownPool"
    #: a stored class this version does not know (written by a newer broker)
    INTERNAL = "InternalError"


def parse_job_error_class(value: str | None) -> JobErrorClass | None:
    """A stored class read back; one a newer broker wrote reads as `INTERNAL`, never as an
    error that would hide the job."""
    if value is None:
        return None
    try:
        return JobErrorClass(value)
    except ValueError:
        return JobErrorClass.INTERNAL
