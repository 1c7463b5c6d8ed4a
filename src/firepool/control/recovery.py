"""Restart recovery as a plan (the broker paper's appendix A.1), before the first dispatch.

The job store is authoritative for jobs, the pods' annotations for ownership. In order:
1. every live pod of a known pool whose annotations can be trusted is restored (active pods
   before standbys, so each standby finds its card's group); every other pod is deleted;
2. each RUNNING job whose every bound pod was restored busy with it is probed at its agents:
   the driver re-attaches a live attempt (`BrokerCore.adopt`; one that finished during the
   outage then ends through the normal path, without a retry) or, when no agent knows the
   attempt, reports it lost;
3. a RUNNING job whose pods or bindings are gone is lost at once: its pods (if any) are
   released unclean and the attempt is judged like any lost pod (`BrokerCore.recovery_lost`),
   so the retry respects `max_retries`.
Distinct attempt ids keep an old attempt from ever reporting into the new one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from firepool.control import pod_annotations
from firepool.control.records import Lease, LeasedPod, PodSnapshot, Ticket
from firepool.model import AcquisitionPath, AcquisitionReason, PodRole, PodState, PoolSpec


@dataclass(frozen=True, slots=True)
class ListedPod:
    """A pod as the backend lists it after a restart."""

    name: str
    pool: str
    role: PodRole
    created_at: float
    template: int
    annotations: Mapping[str, str]
    alive: bool = True


@dataclass(frozen=True, slots=True)
class Binding:
    """One rank of a RUNNING job's attempt, as the store recorded it."""

    pod: str
    acquisition: AcquisitionPath
    reason: str


@dataclass(frozen=True, slots=True)
class RunningJob:
    ticket: Ticket
    bindings: tuple[Binding, ...]

    def lease(self) -> Lease:
        pods = tuple(
            LeasedPod(b.pod, b.acquisition, _reason(b.reason), False) for b in self.bindings
        )
        return Lease(self.ticket.job, self.ticket.caller, self.ticket.spec.pool, pods)


@dataclass(slots=True)
class RecoveryPlan:
    restore: list[PodSnapshot] = field(default_factory=list)  # in this order
    delete: list[str] = field(default_factory=list)
    probe: list[RunningJob] = field(default_factory=list)  # ask the agents, then adopt or lose
    lost: list[RunningJob] = field(default_factory=list)  # pods or bindings gone


def plan_recovery(
    pods: Iterable[ListedPod], jobs: Sequence[RunningJob], specs: Mapping[str, PoolSpec]
) -> RecoveryPlan:
    result = RecoveryPlan()
    busy: dict[str, set[str]] = {}
    for pod in sorted(pods, key=lambda p: (p.role is PodRole.STANDBY, p.name)):
        spec = specs.get(pod.pool)
        snap = None
        if spec is not None and pod.alive:
            snap = pod_annotations.decode(
                pod.name,
                pod.pool,
                created_at=pod.created_at,
                role=pod.role,
                template=pod.template,
                annotations=pod.annotations,
                gpu=spec.is_gpu,
            )
        if snap is None or spec is None or not _fits(snap, spec, result.restore):
            result.delete.append(pod.name)
            continue
        result.restore.append(snap)
    _bind_lagging(result.restore, jobs)
    for snap in result.restore:
        if snap.state is PodState.RUNNING and snap.job is not None:
            busy.setdefault(snap.job, set()).add(snap.name)
    for job in jobs:
        names = {b.pod for b in job.bindings}
        if names and busy.get(job.ticket.job) == names:
            result.probe.append(job)
        else:
            result.lost.append(job)
    # A pod restored busy with a job the store does not hold as RUNNING was left behind by
    # an attempt that ended during the outage: it cannot be trusted.
    running = {j.ticket.job for j in jobs}
    keep: list[PodSnapshot] = []
    for snap in result.restore:
        if snap.state is PodState.RUNNING and snap.job not in running:
            result.delete.append(snap.name)
        else:
            keep.append(snap)
    result.restore = _with_groups(keep, result.delete)
    return result


def _bind_lagging(restore: list[PodSnapshot], jobs: Sequence[RunningJob]) -> None:
    """A pod that a RUNNING job's bindings name but whose annotations still say idle or
    held: the broker died between the job's durable commit and the best-effort annotation
    (step 4), and the attempt may have launched there. The store is authoritative for the
    job, so the pod is restored busy with it: the probe then re-attaches the attempt, or the
    job is lost and the pod released unclean. Never handed to another job meanwhile."""
    index = {snap.name: i for i, snap in enumerate(restore)}
    for job in jobs:
        for binding in job.bindings:
            i = index.get(binding.pod)
            if i is None or restore[i].state is PodState.RUNNING:
                continue
            spec = job.ticket.spec
            restore[i] = replace(
                restore[i],
                state=PodState.RUNNING,
                job=job.ticket.job,
                owner=job.ticket.caller,
                queue=spec.queue,
                tag=spec.lease_tag,
                used=True,
                hold_until=0.0,
            )


def _fits(snap: PodSnapshot, spec: PoolSpec, restored: list[PodSnapshot]) -> bool:
    """A standby needs its card's active pod restored first; a busy pod needs job and owner."""
    if snap.state is PodState.RUNNING and (snap.job is None or snap.owner is None):
        return False
    if snap.role is PodRole.STANDBY:
        return spec.is_gpu and any(
            r.group == snap.group and r.role is PodRole.ACTIVE for r in restored
        )
    return True


def _with_groups(restore: list[PodSnapshot], delete: list[str]) -> list[PodSnapshot]:
    """Drop standbys whose active pod was dropped after all."""
    actives = {s.group for s in restore if s.role is PodRole.ACTIVE}
    out: list[PodSnapshot] = []
    for snap in restore:
        if snap.role is PodRole.STANDBY and snap.group not in actives:
            delete.append(snap.name)
        else:
            out.append(snap)
    return out


def _reason(value: str) -> AcquisitionReason:
    try:
        return AcquisitionReason(value)
    except ValueError:
        return AcquisitionReason.SAME_SESSION
