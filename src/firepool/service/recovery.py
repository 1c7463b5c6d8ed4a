"""Restart recovery in real time: list the pods, read the RUNNING jobs, execute the core's
plan (`control/recovery.py`), probe the agents of the jobs it names, and re-attach or lose
each one. Runs before the first dispatch."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

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
from firepool.service.attempt import RankLogSink, Running
from firepool.service.tickets import ticket_of
from firepool.store.records import JobRecord

if TYPE_CHECKING:
    from firepool.service.broker import Broker

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


async def recover(broker: Broker) -> None:
    records = {r.name: r for r in await broker.backend.list_pods()}
    # One read for both: the queue is handed to the dispatcher, whose first pass then runs
    # without a read of its own (restart to dispatching is on every queued job's path).
    both = await asyncio.to_thread(
        broker.store.list_jobs,
        states=[JobState.RUNNING, JobState.QUEUED],
        limit=100_000 + broker.config.max_queue_scan,
    )
    stored = [j for j in both if j.state is JobState.RUNNING]
    broker.queue_read([j for j in both if j.state is JobState.QUEUED])
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
    ended = await _ended_jobs(broker, busy_jobs(listed) - {j.id for j in stored})
    plan = plan_recovery(listed, jobs, broker.specs, {k: e for k, (_, e) in ended.items()})
    count = broker.telemetry.recovery.labels
    for name in plan.delete:  # off the critical path: no job waits for these
        broker.pods.spawn(broker.backend.delete(name))
        count("pod_deleted").inc()
    for snap in plan.restore:
        try:
            broker.core.restore_pod(snap)
        except FirepoolError as exc:
            log.warning("pod %s not restored (%s); deleting it", snap.name, exc)
            await broker.backend.delete(snap.name)
            count("pod_deleted").inc()
            continue
        broker.pods.records[snap.name] = records[snap.name]
        count("pod_restored").inc()
    by_id = {job.id: job for job in stored}
    for step in plan.reset:
        broker.pods.records[step.held.name] = records[step.held.name]
    # Every job's agents probed at once, and the ended jobs' pods reset meanwhile: recovery
    # takes one round trip, not one per job.
    answers, _ = await asyncio.gather(
        asyncio.gather(*(_probe_ranks(broker, job) for job in plan.probe)),
        asyncio.gather(*(_reset_then_hold(broker, step, ended) for step in plan.reset)),
    )
    for job, statuses in zip(plan.probe, answers, strict=True):
        record = by_id[job.ticket.job]
        if statuses is None:
            count("attempt_lost").inc()
            broker.act(broker.core.recovery_lost(job.ticket, broker.clock()))
            continue
        lease = job.lease()
        broker.core.adopt(job.ticket, lease)
        running = Running(record, lease, ticket=job.ticket, launched=True)
        running.gate.set()
        loop = asyncio.get_running_loop()
        for name in (b.pod for b in job.bindings):
            running.exits[name] = loop.create_future()
        for binding, status in zip(job.bindings, statuses, strict=True):
            if status is not None and status.exit is not None:  # it finished during the
                running.exits[binding.pod].set_result(status.exit)  # outage: the agent kept it
        broker.running[job.ticket.job] = running
        broker.pods.spawn(broker.reattach(running))
        count("attempt_reattached").inc()
    for job in plan.lost:
        count("attempt_lost").inc()
        broker.act(broker.core.recovery_lost(job.ticket, broker.clock()))
    if plan.restore or stored:
        log.info("recovered %d pods and %d running jobs", len(plan.restore), len(stored))


async def _ended_jobs(broker: Broker, ids: set[str]) -> dict[str, tuple[JobRecord, EndedJob]]:
    """The jobs busy-marked pods name that the store holds as ended (terminal)."""
    out: dict[str, tuple[JobRecord, EndedJob]] = {}
    for job_id in sorted(ids):
        job = await asyncio.to_thread(broker.store.get, job_id)
        if job is None or not job.state.terminal:
            continue
        finished = job.timings.get("finished") or broker.clock()
        out[job_id] = (job, EndedJob(ticket_of(job), tuple(b.pod for b in job.pods), finished))
    return out


async def _reset_then_hold(
    broker: Broker, step: ResetThenHold, ended: dict[str, tuple[JobRecord, EndedJob]]
) -> None:
    """A pod of an ended job's last attempt whose release the broker did not live to make:
    reset it (acknowledging the output the log store holds, so only bytes really missing are
    noted as lost) and hold it for the job's session, or delete it if the reset is unclean."""
    job = ended[step.job.ticket.job][0]
    name = step.held.name
    count = broker.telemetry.recovery.labels
    ack = None
    if isinstance(broker.logs, RankLogSink):
        stored = await asyncio.to_thread(broker.logs.offsets, job.id, job.retries, step.rank)
        ack = LogAck(stdout=stored.stdout, stderr=stored.stderr)
    try:
        result = await asyncio.wait_for(
            broker.pods.agent(name).reset(logs=ack), RECOVERY_RESET_TIMEOUT_S
        )
    except (FirepoolError, OSError, TimeoutError) as exc:
        log.warning("pod %s of ended job %s could not be reset (%r); deleting it", name, job.id,
                    exc)  # fmt: skip
        result = None
    if result is not None and result.logs_unacked:
        await broker.runner.record_loss(job, step.rank, result.logs_unacked)
    if result is None or not result.clean:
        broker.pods.records.pop(name, None)
        broker.pods.spawn(broker.backend.delete(name))
        count("pod_deleted").inc()
        return
    broker.act(broker.core.reset_then_held(step.held, broker.clock()))
    count("pod_reset_held").inc()


async def _probe_ranks(
    broker: Broker, job: RunningJob
) -> list[AttemptStatus | None] | None:
    """Every rank's agent's word on the attempt, in rank order, probed together; None when
    one of them does not know the attempt (or stays silent where agents never fence
    themselves): the attempt cannot be confirmed whole, so it is lost (its pods are released
    unclean and deleted, which ends whatever still runs of it) and retried under a new attempt
    id within `max_retries`. A silent rank of a pool whose agents fence is None in the list:
    the attempt is re-attached and the runner declares the pod lost only once its agent has
    had time to fence (a partitioned agent's attempt is never run twice at once)."""
    answers = await asyncio.gather(*(_probe(broker, job, b.pod) for b in job.bindings))
    words = [a if isinstance(a, ProbeAnswer) else ProbeAnswer.KNOWS for a in answers]
    fences = broker.silence_s(job.ticket.spec.pool) is not None
    if not reattach(words, agents_fence=fences):
        return None
    return [a if isinstance(a, AttemptStatus) else None for a in answers]


async def _probe(broker: Broker, job: RunningJob, pod: str) -> AttemptStatus | ProbeAnswer:
    """One rank's agent's word on the attempt (its `AttemptStatus`), retried with backoff
    while the agent does not answer; `ProbeAnswer.UNKNOWN` when it does not know the attempt
    (never launched), `ProbeAnswer.SILENT` when it never answers."""
    for attempt in range(PROBE_TRIES):
        try:
            return await asyncio.wait_for(
                broker.pods.agent(pod).status(job.ticket.attempt), PROBE_TIMEOUT_S
            )
        except NotFoundError:
            return ProbeAnswer.UNKNOWN
        except (FirepoolError, OSError, TimeoutError):
            if attempt + 1 < PROBE_TRIES:
                await asyncio.sleep(PROBE_BACKOFF_S * (attempt + 1))
    return ProbeAnswer.SILENT


#: How often the exclusivity sweep reads the cards again while some are unverified.
SWEEP_RETRY_S = 5.0


async def sweep_exclusivity(broker: Broker) -> None:
    """After a restart, standbys are promoted only on GPUs a live sweep has verified: every
    pod the backend has on the card belongs to the card's own group (one of ours, restored
    into that group). A card whose devices the backend does not report, or that another pod
    shares, stays closed; a failed read changes nothing. Repeats until every card is open."""
    tracker = broker.tracker
    while tracker.unverified and not broker.closing:
        try:
            records = await broker.backend.list_pods()
        except Exception as exc:
            log.warning("exclusivity sweep could not list pods: %r", exc)
            records = None
        if records is not None:
            devices = {r.name: r.devices for r in records}
            broker.act(broker.core.devices_listed(devices, broker.clock()))
        if tracker.unverified:
            await asyncio.sleep(SWEEP_RETRY_S)
