"""The core's view of a stored job, for every part of the service that hands jobs to the
core (the broker's loops, recovery, the benchmarks): one module that imports neither, so
none of them imports another for it."""

from __future__ import annotations

from firepool.control.records import Ticket
from firepool.store.records import JobRecord


def ticket_of(job: JobRecord) -> Ticket:
    """The core's view of a stored job."""
    submitted = job.timings.get("submitted") or 0.0
    return Ticket(job.id, job.caller, job.spec, submitted, job.retries, job.reclaims)
