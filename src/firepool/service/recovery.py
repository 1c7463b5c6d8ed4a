"""Restart recovery in real time: list the pods, read the RUNNING jobs, execute the core's
plan (`control/recovery.py`), probe the agents of the jobs it names, and re-attach or lose
each one. Runs before the first dispatch."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from firepool.backends.base import PodBackend
from firepool.control.actions import Action
from firepool.control.core import BrokerCore
from firepool.control.recovery import (
    Binding,
    EndedJob,
    ListedPod,
    ProbeAnswer,
    ResetThenHold,
    RunningJob,
    busy_jobs,
    plan_recovery,
    reattach,
)
from firepool.model import FirepoolError, JobState, NotFoundError
from firepool.protocol import AttemptStatus, LogAck
from firepool.service.attempt import AttemptRunner, LogSink, RankLogSink, Running
from firepool.service.attempt_tasks import AttemptTasks
from firepool.service.pods import PodManager
from firepool.service.telemetry import BrokerTelemetry
from firepool.service.tickets import ticket_of
from firepool.store import JobStore
from firepool.store.records import JobRecord

log = logging.getLogger("firepool.service.recovery")

#: Probes of a silent agent before its attempt counts as lost.
PROBE_TRIES = 3
PROBE_BACKOFF_S = 0.2
#: Each probe's own limit: dispatching waits for recovery, and a silent rank of a pool whose
#: agents fence is re-attached anyway (the runner keeps asking it).
PROBE_TIMEOUT_S = 2.0
#: The longest the first dispatch waits for an ended job's pod to be reset (the paper's worst
#: reset took 1.67 s); a pod that takes longer is deleted instead.
RECOVERY_RESET_TIMEOUT_S = 10.0


class Recovery:
    """Restart recovery over its explicit collaborators (the broker wires them)."""

    def __init__(
        self,
        *,
        backend: PodBackend,
        store: JobStore,
        core: BrokerCore,
        pods: PodManager,
        attempts: AttemptTasks,
        runner: AttemptRunner,
        logs: LogSink,
        telemetry: BrokerTelemetry,
        queue_read: Callable[[list[JobRecord]], None],
        max_queue_scan: int,
        silence_s: Callable[[str], float | None],
        act: Callable[[Iterable[Action]], None],
        clock: Callable[[], float],
    ) -> None:
        self.backend = backend
        self.store = store
        self.core = core
        self.pods = pods
        self.attempts = attempts
        self.runner = runner
        self.logs = logs
        self.telemetry = telemetry
        self.queue_read = queue_read
        self.max_queue_scan = max_queue_scan
        self.silence_s = silence_s
        self.act = act
        self.clock = clock

    async def recover(self) -> None:
        """Before the first dispatch: pods restored or deleted, RUNNING jobs re-attached or
        lost, ended jobs' pods reset and held, the queue handed to the dispatcher."""
        records = {r.name: r for r in await self.backend.list_pods()}
        # One read for both: the queue is handed to the dispatcher, whose first pass then runs
        # without a read of its own (restart to dispatching is on every queued job's path).
        both = await asyncio.to_thread(
            self.store.list_jobs,
            states=[JobState.RUNNING, JobState.QUEUED],
            limit=100_000 + self.max_queue_scan,
        )
        stored = [j for j in both if j.state is JobState.RUNNING]
        self.queue_read([j for j in both if j.state is JobState.QUEUED])
        jobs = [
            RunningJob(
                ticket_of(job),
                tuple(Binding(b.pod, b.acquisition, b.reason) for b in job.pods),
            )
            for job in stored
        ]
        listed = [
            ListedPod(
                name=r.name,
                pool=r.pool,
                role=r.role,
                created_at=r.created_at,
                template=r.template_version,
                annotations=r.annotations,
                alive=r.alive,
            )
            for r in records.values()
        ]
        ended = await self._ended_jobs(busy_jobs(listed) - {j.id for j in stored})
        plan = plan_recovery(listed, jobs, self.core.specs, {k: e for k, (_, e) in ended.items()})
        count = self.telemetry.recovery.labels
        for name in plan.delete:  # off the critical path: no job waits for these
            self.pods.spawn(self.backend.delete(name))
            count("pod_deleted").inc()
        for snap in plan.restore:
            try:
                self.core.restore_pod(snap)
            except FirepoolError as exc:
                log.warning("pod %s not restored (%s); deleting it", snap.name, exc)
                await self.backend.delete(snap.name)
                count("pod_deleted").inc()
                continue
            self.pods.records[snap.name] = records[snap.name]
            count("pod_restored").inc()
        by_id = {job.id: job for job in stored}
        for step in plan.reset:
            self.pods.records[step.held.name] = records[step.held.name]
        # Every job's agents probed at once, and the ended jobs' pods reset meanwhile: recovery
        # takes one round trip, not one per job.
        answers, _ = await asyncio.gather(
            asyncio.gather(*(self._probe_ranks(job) for job in plan.probe)),
            asyncio.gather(*(self._reset_then_hold(step, ended) for step in plan.reset)),
        )
        for job, statuses in zip(plan.probe, answers, strict=True):
            record = by_id[job.ticket.job]
            if statuses is None:
                self._lose(job)
                continue
            lease = job.lease()
            self.core.adopt(job.ticket, lease)
            running = Running(record, lease, ticket=job.ticket, launched=True)
            running.gate.set()
            loop = asyncio.get_running_loop()
            for name in (b.pod for b in job.bindings):
                running.exits[name] = loop.create_future()
            for binding, status in zip(job.bindings, statuses, strict=True):
                if status is not None and status.exit is not None:  # it finished during the
                    running.exits[binding.pod].set_result(status.exit)  # outage: the agent kept it
            self.attempts.adopt(running)
            count("attempt_reattached").inc()
        for job in plan.lost:
            self._lose(job)
        if plan.restore or stored:
            log.info("recovered %d pods and %d running jobs", len(plan.restore), len(stored))

    def _lose(self, job: RunningJob) -> None:
        """A RUNNING job whose attempt cannot be confirmed: judged lost (retried within
        `max_retries`). The log names its caller and pods: a pod it had claimed from its
        caller's hold is then deleted, and an operator (or the fault campaign) can tell that
        hold was used by its owner, not lost."""
        ticket = job.ticket
        pods = ",".join(b.pod for b in job.bindings) or "-"
        log.warning("job %s of caller %s: attempt %s lost in the restart; pods %s released "
                    "unclean", ticket.job, ticket.caller, ticket.attempt, pods)  # fmt: skip
        self.telemetry.recovery.labels("attempt_lost").inc()
        self.act(self.core.recovery_lost(ticket, self.clock()))

    async def _ended_jobs(self, ids: set[str]) -> dict[str, tuple[JobRecord, EndedJob]]:
        """The jobs busy-marked pods name that the store holds as ended (terminal)."""
        out: dict[str, tuple[JobRecord, EndedJob]] = {}
        for job_id in sorted(ids):
            job = await asyncio.to_thread(self.store.get, job_id)
            if job is None or not job.state.terminal:
                continue
            finished = job.timings.get("finished") or self.clock()
            out[job_id] = (job, EndedJob(ticket_of(job), tuple(b.pod for b in job.pods), finished))
        return out

    async def _reset_then_hold(
        self, step: ResetThenHold, ended: dict[str, tuple[JobRecord, EndedJob]]
    ) -> None:
        """A pod of an ended job's last attempt whose release the broker did not live to make:
        reset it (acknowledging the output the log store holds, so only bytes really missing are
        noted as lost) and hold it for the job's session, or delete it if the reset is unclean."""
        job = ended[step.job.ticket.job][0]
        name = step.held.name
        count = self.telemetry.recovery.labels
        ack = None
        if isinstance(self.logs, RankLogSink):
            stored = await asyncio.to_thread(self.logs.offsets, job.id, job.retries, step.rank)
            ack = LogAck(stdout=stored.stdout, stderr=stored.stderr)
        try:
            result = await asyncio.wait_for(
                self.pods.agent(name).reset(logs=ack), RECOVERY_RESET_TIMEOUT_S
            )
        except (FirepoolError, OSError, TimeoutError) as exc:
            log.warning("pod %s of ended job %s could not be reset (%r); deleting it", name, job.id,
                        exc)  # fmt: skip
            result = None
        if result is not None and result.logs_unacked:
            await self.runner.record_loss(job, step.rank, result.logs_unacked)
        if result is None or not result.clean:
            self.pods.records.pop(name, None)
            self.pods.spawn(self.backend.delete(name))
            count("pod_deleted").inc()
            return
        self.act(self.core.reset_then_held(step.held, self.clock()))
        count("pod_reset_held").inc()

    async def _probe_ranks(self, job: RunningJob) -> list[AttemptStatus | None] | None:
        """Every rank's agent's word on the attempt, in rank order, probed together; None when
        one of them does not know the attempt (or stays silent where agents never fence
        themselves): the attempt cannot be confirmed whole, so it is lost (its pods are released
        unclean and deleted, which ends whatever still runs of it) and retried under a new attempt
        id within `max_retries`. A silent rank of a pool whose agents fence is None in the list:
        the attempt is re-attached and the runner declares the pod lost only once its agent has
        had time to fence (a partitioned agent's attempt is never run twice at once)."""
        answers = await asyncio.gather(*(self._probe(job, b.pod) for b in job.bindings))
        words = [a if isinstance(a, ProbeAnswer) else ProbeAnswer.KNOWS for a in answers]
        fences = self.silence_s(job.ticket.spec.pool) is not None
        if not reattach(words, agents_fence=fences):
            return None
        return [a if isinstance(a, AttemptStatus) else None for a in answers]

    async def _probe(self, job: RunningJob, pod: str) -> AttemptStatus | ProbeAnswer:
        """One rank's agent's word on the attempt (its `AttemptStatus`), retried with backoff
        while the agent does not answer; `ProbeAnswer.UNKNOWN` when it does not know the attempt
        (never launched), `ProbeAnswer.SILENT` when it never answers."""
        for attempt in range(PROBE_TRIES):
            try:
                return await asyncio.wait_for(
                    self.pods.agent(pod).status(job.ticket.attempt), PROBE_TIMEOUT_S
                )
            except NotFoundError:
                return ProbeAnswer.UNKNOWN
            except (FirepoolError, OSError, TimeoutError):
                if attempt + 1 < PROBE_TRIES:
                    await asyncio.sleep(PROBE_BACKOFF_S * (attempt + 1))
        return ProbeAnswer.SILENT
