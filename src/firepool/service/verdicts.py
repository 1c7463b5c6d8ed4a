"""Writing the core's verdicts (`RecordVerdict`) and failing queued jobs (`FailQueued`).

Each write is conditional on the job row's version; the core hears back whether the verdict
is stored (`verdict_recorded`, or `verdict_unrecorded` when the write failed or the row is
gone), because it holds the attempt's pods back until then. A terminal state, once durable,
goes to the finished listeners (the API's long polls) at once.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

from firepool.control.actions import Action, FailQueued, RecordVerdict
from firepool.control.core import BrokerCore
from firepool.control.dispatch import Verdict
from firepool.model import JobState
from firepool.service.attempt import AttemptRunner, Running
from firepool.service.dispatcher import Dispatcher
from firepool.service.outage import until_stored
from firepool.service.telemetry import BrokerTelemetry
from firepool.service.tickets import ticket_of
from firepool.store import JobRecord, JobStore

log = logging.getLogger("firepool.service")

Spawn = Callable[[Coroutine[Any, Any, Any]], "asyncio.Task[Any]"]


class FinishedListeners:
    """Told after every terminal state this broker commits (the API's long polls)."""

    def __init__(self) -> None:
        self._listeners: list[Callable[[JobRecord], None]] = []

    def subscribe(self, listener: Callable[[JobRecord], None]) -> None:
        self._listeners.append(listener)

    def tell(self, job: JobRecord) -> None:
        """After a terminal state is durable: callers long-polling the job answer at once."""
        for listener in self._listeners:
            try:
                listener(job)
            except Exception:
                log.exception("job_finished listener failed for %s", job.id)


class Verdicts:
    def __init__(
        self,
        *,
        core: BrokerCore,
        store: JobStore,
        runner: AttemptRunner,
        dispatcher: Dispatcher,
        telemetry: BrokerTelemetry,
        finished: FinishedListeners,
        act: Callable[[Iterable[Action]], None],
        spawn: Spawn,
        clock: Callable[[], float],
    ) -> None:
        self.core = core
        self.store = store
        self.runner = runner
        self.dispatcher = dispatcher
        self.telemetry = telemetry
        self.finished = finished
        self.act = act
        self.spawn = spawn
        self.clock = clock
        # Each attempt that just ended: its committed record is its verdict's conditional
        # write's (saves a store read per job; a cancel that bumped the version in between
        # makes the write lose its race, and `AttemptRunner.record` then re-reads).
        self.ended: dict[str, Running] = {}

    def record(self, action: RecordVerdict) -> None:
        job_id = action.ticket.job
        task = self.spawn(self._record(action, self.ended.get(job_id)))
        task.add_done_callback(functools.partial(self._recorded, job_id))

    def fail_queued(self, action: FailQueued) -> None:
        self.spawn(self._fail_queued(action))

    def _recorded(self, job_id: str, task: asyncio.Task[bool]) -> None:
        """A verdict's write ended: if it never reported the verdict stored (it failed, or
        the job's row is gone), the core is told, so the pods it holds back for it go. One
        cancelled by the broker's shutdown leaves them: recovery finds the job RUNNING, and
        its pods tell what became of the attempt."""
        if task.cancelled():
            return
        if task.exception() is not None or not task.result():
            self.act(self.core.verdict_unrecorded(job_id, self.clock()))

    async def _record(self, action: RecordVerdict, ended: Running | None = None) -> bool:
        """Write the core's verdict. `ended` is the attempt when the verdict follows its end
        in this process (its record, with its start stamps once they are stored); otherwise
        the store is read. Whether the core was told the verdict is stored."""
        ticket = action.ticket
        running_job = None if ended is None else await ended.record_with_start()
        if running_job is None or running_job.retries != ticket.retries:
            running_job = await until_stored(
                lambda: asyncio.to_thread(self.store.get, ticket.job), what=f"job {ticket.job}"
            )
        if running_job is None:
            return False
        final = await self.runner.record(running_job, action.verdict, self._verdict_refused)
        self.telemetry.job_finished(final.spec.pool, final.state, final.error_class)
        if final.state is JobState.QUEUED:
            self.dispatcher.remember(final)
        elif final.state.terminal:
            self.finished.tell(final)
        self.act(self.core.verdict_recorded(ticket_of(final), final.state, self.clock()))
        return True

    def _verdict_refused(self, fresh: JobRecord, verdict: Verdict) -> Verdict:
        return self.core.verdict_refused(verdict, cancel_requested=fresh.cancel_requested)

    async def _fail_queued(self, action: FailQueued) -> None:
        job = await until_stored(
            lambda: asyncio.to_thread(self.store.get, action.job), what=f"job {action.job}"
        )
        self.dispatcher.forget(action.job)
        if job is None or job.state is not JobState.QUEUED:
            return
        failed = await until_stored(
            lambda: asyncio.to_thread(
                self.store.finish,
                job,
                JobState.FAILED,
                now=self.clock(),
                error_class=action.error,
                message=action.message,
            ),
            what=f"the failure of queued job {action.job}",
        )
        self.finished.tell(failed)
        self.telemetry.job_finished(job.spec.pool, JobState.FAILED, action.error)
