"""Each attempt the core starts, as a task of its own: commit, launch on the core's go, wait
for every rank's exit, reset the pods, report `attempt_over`.

`AttemptRunner` (`service/attempt.py`) does the I/O of one attempt; this keeps the live
attempts (`running`, what exit events and pod fetches are matched against) and turns the
core's `StartAttempt`, `LaunchAttempt` and `StopAttempt` into tasks and signals. A task that
fails in the broker itself releases its pods unclean (`_crashed`): a job never stays RUNNING
on a broker that lost track of it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from firepool.control import pod_annotations
from firepool.control.actions import Action, StartAttempt, StopAttempt, StopMode
from firepool.control.core import BrokerCore
from firepool.control.dispatch import AttemptEnd
from firepool.model import JobKind
from firepool.protocol import ExitEvent
from firepool.service.attempt import AttemptRunner, Running
from firepool.service.dispatcher import Dispatcher
from firepool.service.elastic import ElasticDriver
from firepool.service.pods import PodManager
from firepool.service.telemetry import BrokerTelemetry
from firepool.service.tickets import ticket_of
from firepool.service.verdicts import Verdicts

log = logging.getLogger("firepool.service")


class AttemptTasks:
    def __init__(
        self,
        *,
        core: BrokerCore,
        pods: PodManager,
        runner: AttemptRunner,
        elastic: ElasticDriver,
        dispatcher: Dispatcher,
        verdicts: Verdicts,
        telemetry: BrokerTelemetry,
        act: Callable[[Iterable[Action]], None],
        clock: Callable[[], float],
        base_url: Callable[[], str | None],
    ) -> None:
        self.core = core
        self.pods = pods
        self.runner = runner
        self.elastic = elastic
        self.dispatcher = dispatcher
        self.verdicts = verdicts
        self.telemetry = telemetry
        self.act = act
        self.clock = clock
        self.base_url = base_url
        #: The live attempts by job id (exit events and package fetches match against it).
        self.running: dict[str, Running] = {}

    # ------------------------------------------------------------------ the core's actions

    def start(self, action: StartAttempt) -> None:
        ticket, lease = action.ticket, action.lease
        running = Running(self.dispatcher.take(ticket), lease, ticket=ticket)
        self.telemetry.leased(lease)
        if ticket.spec.kind is JobKind.ELASTIC:
            running.extra_env = self.elastic.environment(ticket, self.base_url())
        self.running[ticket.job] = running
        self.pods.spawn(self._run(running))

    def launch(self, job_id: str) -> None:
        """The core's go: the attempt's task launches its ranks."""
        running = self.running.get(job_id)
        if running is not None:
            running.gate.set()

    def stop(self, action: StopAttempt) -> None:
        running = self.running.get(action.job)
        if running is None:
            return
        if action.mode is StopMode.CANCEL:
            running.cancel.set()
        elif action.mode is StopMode.GRACEFUL:
            running.stop.set()
        elif action.mode is StopMode.RECLAIM:
            self.pods.spawn(self._reclaim(running))
        else:
            self.pods.spawn(self.runner.kill(running))

    def adopt(self, running: Running) -> None:
        """A RUNNING attempt recovery re-attached: its task waits for its ranks' exits."""
        self.running[running.ticket.job] = running
        self.pods.spawn(self.reattach(running))

    def exit_event(self, event: ExitEvent) -> bool:
        """An agent's exit event; False when no live attempt matches (a stale or replayed
        event, answered but ignored: the attempt id keeps old attempts out)."""
        job_id = event.attempt.rpartition(":")[0]
        running = self.running.get(job_id)
        if running is None or running.job.attempt != event.attempt:
            return False
        fut = running.exits.get(event.pod)
        if fut is None or fut.done():
            return False
        fut.set_result(event)
        return True

    async def _reclaim(self, running: Running) -> None:
        """Kill a reclaimed attempt's ranks; one the core let launch a moment ago may not
        have started on its pods yet, so wait for that (or for its end) first."""
        job = running.ticket.job
        while not running.launched and self.running.get(job) is running:
            await asyncio.sleep(0.05)
        if self.running.get(job) is running:
            await self.runner.kill(running)

    # ------------------------------------------------------------------ an attempt's task

    async def _run(self, running: Running) -> None:
        job_id = running.ticket.job
        try:
            with self.telemetry.commit.time():
                job = await self.runner.commit(running)
            if job is None:  # the commit lost a race: the store has the truth
                self.running.pop(job_id, None)
                self.dispatcher.resync_due = True
                self.act(self.core.commit_lost(job_id, self.clock()))
                return
            running.marking = self.pods.spawn(self._mark_pods(running))
            self.act(self.core.committed(job_id, self.clock()))
            end = await self.runner.run(running)
            await self._finish(running, end)
        except Exception as exc:
            log.exception("attempt %s crashed in the broker", running.job.attempt)
            self._crashed(running, exc)

    async def reattach(self, running: Running) -> None:
        try:
            end = await self.runner.resume(running)
            await self._finish(running, end)
        except Exception as exc:
            log.exception("re-attached attempt %s crashed in the broker", running.job.attempt)
            self._crashed(running, exc)

    def _crashed(self, running: Running, exc: Exception) -> None:
        """The broker's own task failed mid-attempt: the job must not stay RUNNING and its
        pods must not stay leased. Nothing about the pods can be confirmed, so every one is
        released unclean (deleted, with whatever still runs there), and the attempt is judged
        like a lost pod: retried within `max_retries` under a new attempt id."""
        job_id = running.ticket.job
        self.running.pop(job_id, None)
        if running.pump_timer is not None:
            running.pump_timer.cancel()  # no pump for an attempt nobody waits on
        if job_id not in self.core.running:
            return  # it had reported already (the crash came after)
        end = AttemptEnd(
            launch_failed=not running.launched,
            pod_lost=running.launched,
            message=f"the broker failed while running this attempt: {exc!r}",
        )
        unclean = [p.name for p in running.lease.pods]
        self.act(self.core.attempt_over(job_id, end, unclean, self.clock()))

    async def _finish(self, running: Running, end: AttemptEnd) -> None:
        await self.runner.drain_logs(running)
        job_id = running.ticket.job
        self.verdicts.ended[job_id] = running
        try:
            if _judge_first(running):
                # The verdict needs no reset: its write and the reset run side by side, and
                # the caller has the result a reset earlier (a crash in between: recovery
                # resets the pods and keeps their hold, see control/recovery.py).
                self.act(self.core.judge_before_reset(job_id, end, self.clock()))
            unclean = await self.runner.reset(
                running.lease, job=running.job, lost=running.lost, acks=running.acks
            )
            if running.log_pump is not None and not running.log_pump.done():
                running.log_pump.cancel()  # a lost pod's stream: the reset recorded the loss
            self.running.pop(job_id, None)
            self.telemetry.attempt_ended(running, self.clock(), len(unclean))
            running.ticket = ticket_of(running.job)
            # (The core holds the deletion of the attempt's pods until its verdict is stored.)
            self.act(self.core.attempt_over(job_id, end, unclean, self.clock()))
        finally:
            self.verdicts.ended.pop(job_id, None)

    async def _mark_pods(self, running: Running) -> bool:
        """Step 4, best effort and off the critical path: ownership annotations. Whether
        every pod carries them (a verdict goes out before the reset only then)."""
        ticket = ticket_of(running.job)
        marked = True
        for p in running.lease.pods:
            marked &= await self.pods.annotate(
                p.name, pod_annotations.running(ticket, self.core.retire_after(p.name))
            )
        return marked


def _judge_first(running: Running) -> bool:
    """Whether the verdict may go out before the reset: every rank's whole output is stored
    and is acknowledged with the reset (it came on the exit events), so the reset can add
    nothing to the job's log, not even a note of lost bytes; and every pod is marked busy
    with the job, so a broker that dies before the release finds them (recovery resets
    them and keeps their hold) instead of taking a used pod for a fresh one."""
    acks, marking = running.acks, running.marking
    return (
        acks is not None
        and not running.lost
        and all(p.name in acks for p in running.lease.pods)
        and marking is not None
        and marking.done()
        and not marking.cancelled()
        and marking.exception() is None
        and marking.result()
    )
