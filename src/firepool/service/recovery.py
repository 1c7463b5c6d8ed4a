"""Restart recovery (broker paper, appendix A.1), before the first dispatch.

The job store is authoritative for jobs and the pods' annotations for ownership. Live pods are
put back into the tracker with their owner holds and budget reservations; each RUNNING job is
then probed at its pods' agents: a live attempt is re-attached, one that finished during the
outage is finalised without a retry, and one whose pods are gone or whose agent does not know
the attempt is re-queued (its pods released). Distinct attempt ids keep an old attempt from
ever reporting into the new one.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from firepool.backends.base import PodRecord
from firepool.control.records import Lease, LeasedPod, PodSnapshot, RetireReason
from firepool.model import (
    AcquisitionReason,
    ErrorCode,
    FirepoolError,
    JobState,
    PodRole,
    PodState,
)
from firepool.service.attempt import Running
from firepool.store import JobRecord

if TYPE_CHECKING:
    from firepool.service.broker import Broker

log = logging.getLogger("firepool.service.recovery")

_STATES = {
    "idle": PodState.IDLE,
    "held": PodState.HELD,
    "running": PodState.RUNNING,
    "starting": PodState.STARTING,
}


def snapshot(record: PodRecord, gpu: bool) -> PodSnapshot | None:
    ann = record.annotations
    state = _STATES.get(ann.get("state", ""))
    if state is None or state is PodState.STARTING:
        return None  # never became ready: not worth trusting
    group = ann.get("group") or (record.name if gpu else None)
    return PodSnapshot(
        name=record.name,
        pool=record.pool,
        state=state,
        created_at=record.created_at,
        role=PodRole(ann.get("role", record.role.value)),
        group=group,
        template=record.template_version,
        single_use=ann.get("single_use") == "1",
        owner=ann.get("owner"),
        queue=ann.get("queue"),
        tag=ann.get("tag"),
        used=ann.get("used") == "1",
        hold_until=float(ann.get("hold_until", "0") or 0),
        job=ann.get("job") if state is PodState.RUNNING else None,
        retire_after=_retire_reason(ann.get("retire_after")) if state is PodState.RUNNING else None,
    )


def _retire_reason(value: str | None) -> RetireReason | None:
    try:
        return None if value is None else RetireReason(value)
    except ValueError:
        return RetireReason.STALE_TEMPLATE  # unknown: do not trust the pod past its job


async def recover(broker: Broker) -> None:
    records = await broker.backend.list_pods()
    restored: set[str] = set()
    for record in sorted(records, key=lambda r: r.role is PodRole.STANDBY):
        spec = broker.specs.get(record.pool)
        snap = snapshot(record, spec.is_gpu) if spec is not None and record.alive else None
        if spec is None or snap is None:
            await broker.backend.delete(record.name)
            continue
        try:
            broker.tracker.restore(snap)
        except FirepoolError as exc:
            log.warning("pod %s not restored (%s); deleting it", record.name, exc)
            await broker.backend.delete(record.name)
            continue
        broker.pods.records[record.name] = record
        restored.add(record.name)
        holder = snap.group if spec.is_gpu else record.name
        if snap.role is PodRole.ACTIVE and holder and not broker.ledger.holds(holder):
            broker.ledger.try_reserve(spec.budget_resource, holder, spec.units_per_pod)
    jobs = await asyncio.to_thread(broker.store.list_jobs, states=[JobState.RUNNING], limit=100_000)
    for job in jobs:
        await _recover_job(broker, job, restored)
    if restored or jobs:
        log.info("recovered %d pods and %d running jobs", len(restored), len(jobs))


async def _recover_job(broker: Broker, job: JobRecord, restored: set[str]) -> None:
    names = [b.pod for b in job.pods]
    leased = broker.tracker.job_pods(job.id)
    if names and all(n in restored for n in names) and set(leased) == set(names):
        try:
            status = await broker.pods.agent(names[0]).status(job.attempt)
        except FirepoolError:
            status = None
        if status is not None:
            pods = tuple(
                LeasedPod(b.pod, b.acquisition, _reason(b.reason), False) for b in job.pods
            )
            lease = Lease(job.id, job.caller, job.spec.pool, pods)
            running = Running(job, lease, launched=True)
            loop = asyncio.get_running_loop()
            for name in names:
                running.exits[name] = loop.create_future()
            if status.exit is not None:
                running.exits[names[0]].set_result(status.exit)
            broker.running[job.id] = running
            broker.pods.spawn(broker.reattach(running))
            return
    # Pods gone, or the agent does not know the attempt: re-queue and release what is left.
    if leased:
        broker.released(broker.tracker.release(job.id, broker.clock(), unclean=list(leased)))
    await asyncio.to_thread(
        broker.store.requeue, job, now=broker.clock(), error_class=ErrorCode.POD_LOST
    )


def _reason(value: str) -> AcquisitionReason:
    try:
        return AcquisitionReason(value)
    except ValueError:
        return AcquisitionReason.SAME_SESSION
