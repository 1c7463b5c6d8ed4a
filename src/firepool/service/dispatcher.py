"""The dispatcher's side of the driver: the stored records of queued jobs and the pass.

The core decides placements (`core.dispatch`); this keeps what the commit needs and the core
does not: each queued job's stored record, whose version is the commit's condition. The
store's queue is read again (a resync) when a commit lost its race, after a store outage,
and on the fallback tick, so that a record the driver missed is never lost for long.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable, Iterable

from firepool.control.actions import Action
from firepool.control.core import BrokerCore
from firepool.control.records import Ticket
from firepool.model import JobState
from firepool.service.telemetry import BrokerTelemetry
from firepool.service.tickets import ticket_of
from firepool.store import JobRecord, JobStore

log = logging.getLogger("firepool.service")


class Dispatcher:
    def __init__(
        self,
        *,
        core: BrokerCore,
        store: JobStore,
        act: Callable[[Iterable[Action]], None],
        clock: Callable[[], float],
        telemetry: BrokerTelemetry,
        max_queue_scan: int,
    ) -> None:
        self.core = core
        self.store = store
        self.act = act
        self.clock = clock
        self.telemetry = telemetry
        self.max_queue_scan = max_queue_scan
        # Stored records of queued jobs: the commit is conditional on the row's version.
        self.records: dict[str, JobRecord] = {}
        #: The next pass reads the store's queue first.
        self.resync_due = True
        #: The last dispatch passes' durations (bounded: the broker runs for months).
        self.dispatch_ms: collections.deque[float] = collections.deque(maxlen=1024)
        #: When the broker started (perf_counter), how long its recovery took, and when its
        #: first pass ran: the restart's cost to queued work.
        self.started: float | None = None
        self.recovery_s = 0.0
        self.after_start_s: float | None = None

    def remember(self, job: JobRecord) -> None:
        """Keep the stored record for the attempt (its version is the commit's condition)."""
        self.records[job.id] = job

    def forget(self, job_id: str) -> None:
        self.records.pop(job_id, None)

    def take(self, ticket: Ticket) -> JobRecord:
        """The stored record for a starting attempt (a placeholder if the driver has none)."""
        return self.records.pop(ticket.job, None) or _placeholder(ticket)

    def submitted(self, job: JobRecord) -> None:
        """On the loop: a job the API committed as QUEUED."""
        if job.state is JobState.QUEUED:
            self.remember(job)
            self.act(self.core.submit(ticket_of(job), self.clock()))

    def cancelled(self, job: JobRecord) -> None:
        """On the loop: a cancel the API committed (the job is terminal, or cancel_requested)."""
        if job.state.terminal:
            self.forget(job.id)
        self.act(self.core.cancel(job.id, self.clock(), terminal=job.state.terminal))

    def queue_read(self, jobs: list[JobRecord]) -> None:
        """The store's queue, just read: it replaces the core's (the fallback resync, and
        recovery's read at start)."""
        self.resync_due = False
        self.records = {j.id: j for j in jobs[: self.max_queue_scan]}
        self.act(self.core.resync([ticket_of(j) for j in self.records.values()], self.clock()))

    async def dispatch_once(self) -> None:
        if self.resync_due:
            self.resync_due = False
            jobs = await asyncio.to_thread(
                self.store.list_jobs, states=[JobState.QUEUED], limit=self.max_queue_scan
            )
            self.queue_read(jobs)
        start = time.perf_counter()
        actions = self.core.dispatch(self.clock())
        self.dispatch_ms.append((time.perf_counter() - start) * 1000.0)
        self.telemetry.dispatch.observe(self.dispatch_ms[-1] / 1000.0)
        self.act(actions)
        if self.after_start_s is None and self.started is not None:
            # Start (recovery included) to the first dispatch pass: the restart's cost to
            # queued work, read by `firepool experiment faults` from the log.
            self.after_start_s = time.perf_counter() - self.started
            log.info(
                "dispatching %.1f ms after start (recovery %.1f ms)",
                self.after_start_s * 1000,
                self.recovery_s * 1000,
            )


def _placeholder(ticket: Ticket) -> JobRecord:
    """A record for a ticket whose stored row the driver does not hold (a race with a
    resync). Its version matches no row, so the conditional commit loses, the pods go back
    and the next resync reads the row: safe, never a second launch."""
    return JobRecord(
        id=ticket.job,
        caller=ticket.caller,
        spec=ticket.spec,
        state=JobState.QUEUED,
        version=-1,
        retries=ticket.retries,
        timings={"submitted": ticket.submitted_at},
    )
