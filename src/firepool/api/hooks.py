"""How the API and the rest of the broker tell each other that something happened.

The API only records intent durably; acting on it is the dispatcher's job. After a job is
committed as QUEUED the API calls `job_submitted` (the dispatcher wakes instead of waiting for
its fallback tick); after a running job is marked `cancel_requested` it calls
`cancel_requested` (the dispatcher stops the attempt and finishes the job as CANCELLED); it
calls it too when a queued job was cancelled outright, so the dispatcher forgets it at once.

The other way: whoever commits a job's terminal state calls `job_finished` right after the
commit (the service after a verdict or a queued job's failure, the API after cancelling a
queued job), and the hooks hand the record to every listener `create_app` subscribed with
`subscribe_finished`: the API's long-poll waiters (`GET /v1/jobs/{id}?wait_s=N`), which
then answer at once instead of the caller polling.
Hooks run on any thread and must only signal, never block.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from firepool.store import JobRecord

FinishedListener = Callable[[JobRecord], None]


class BrokerHooks(Protocol):
    def job_submitted(self, job: JobRecord) -> None: ...

    def cancel_requested(self, job: JobRecord) -> None: ...

    def job_finished(self, job: JobRecord) -> None: ...

    def subscribe_finished(self, listener: FinishedListener) -> None: ...


class NoHooks:
    """The default when no dispatcher is attached (an API-only process, tests): terminal
    states committed by the API itself (a cancelled queued job) still reach its listeners."""

    def __init__(self) -> None:
        self._finished: list[FinishedListener] = []

    def job_submitted(self, job: JobRecord) -> None:
        return None

    def cancel_requested(self, job: JobRecord) -> None:
        return None

    def job_finished(self, job: JobRecord) -> None:
        for listener in self._finished:
            listener(job)

    def subscribe_finished(self, listener: FinishedListener) -> None:
        self._finished.append(listener)
