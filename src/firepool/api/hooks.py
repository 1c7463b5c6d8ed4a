"""How the API tells the rest of the broker that something happened.

The API only records intent durably; acting on it is the dispatcher's job. After a job is
committed as QUEUED the API calls `job_submitted` (the dispatcher wakes instead of waiting for
its fallback tick); after a running job is marked `cancel_requested` it calls
`cancel_requested` (the dispatcher stops the attempt and finishes the job as CANCELLED); it
calls it too when a queued job was cancelled outright, so the dispatcher forgets it at once.
Hooks run on a request thread and must only signal, never block.
"""

from __future__ import annotations

from typing import Protocol

from firepool.store import JobRecord


class BrokerHooks(Protocol):
    def job_submitted(self, job: JobRecord) -> None: ...

    def cancel_requested(self, job: JobRecord) -> None: ...


class NoHooks:
    """The default when no dispatcher is attached (an API-only process, tests)."""

    def job_submitted(self, job: JobRecord) -> None:
        return None

    def cancel_requested(self, job: JobRecord) -> None:
        return None
