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

A pod still marked busy with a job the store holds as ended ran that job's last attempt when
the verdict went out before the reset (`BrokerCore.judge_before_reset`) and the broker died
before the release: it is reset again (`reset`) and, if clean, held for the job's session as
the release would have held it, from the job's end; otherwise deleted. Any other pod marked
busy with a job that is not RUNNING cannot be trusted and is deleted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum

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


@dataclass(frozen=True, slots=True)
class EndedJob:
    """A job the store holds as ended (terminal), that a pod is still marked busy with."""

    ticket: Ticket
    pods: tuple[str, ...]  # its last attempt's bindings
    finished_at: float


@dataclass(frozen=True, slots=True)
class ResetThenHold:
    """Reset the pod; if clean, restore `held` (the release's hold), else delete the pod."""

    job: EndedJob
    rank: int
    held: PodSnapshot


@dataclass(slots=True)
class RecoveryPlan:
    restore: list[PodSnapshot] = field(default_factory=list)  # in this order
    delete: list[str] = field(default_factory=list)
    probe: list[RunningJob] = field(default_factory=list)  # ask the agents, then adopt or lose
    lost: list[RunningJob] = field(default_factory=list)  # pods or bindings gone
    reset: list[ResetThenHold] = field(default_factory=list)  # released before any dispatch


def plan_recovery(
    pods: Iterable[ListedPod],
    jobs: Sequence[RunningJob],
    specs: Mapping[str, PoolSpec],
    ended: Mapping[str, EndedJob] | None = None,
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
            done = (ended or {}).get(snap.job or "")
            held = _held_after(snap, done, specs[snap.pool]) if done is not None else None
            if done is not None and held is not None:
                result.reset.append(ResetThenHold(done, done.pods.index(snap.name), held))
            else:
                result.delete.append(snap.name)
        else:
            keep.append(snap)
    result.restore = _with_groups(keep, result.delete)
    result.reset.sort(key=lambda r: r.held.role is PodRole.STANDBY)  # active pods first
    standbys = [r for r in result.reset if r.held.role is PodRole.STANDBY]
    if standbys:  # a standby's card must keep an active pod among those restored
        actives = {s.group for s in result.restore if s.role is PodRole.ACTIVE}
        actives |= {r.held.group for r in result.reset if r.held.role is PodRole.ACTIVE}
        for r in standbys:
            if r.held.group not in actives:
                result.reset.remove(r)
                result.delete.append(r.held.name)
    return result


def busy_jobs(pods: Iterable[ListedPod]) -> set[str]:
    """The jobs live pods are marked busy with: the driver reads those the store holds as
    ended (`EndedJob`) for the plan."""
    return {job for p in pods if p.alive and (job := pod_annotations.busy_job(p.annotations))}


def _held_after(snap: PodSnapshot, job: EndedJob, spec: PoolSpec) -> PodSnapshot | None:
    """The pod as the ended job's release holds it, or None when the release would not (the
    pod is not of the job's last attempt, was another caller's, or retires after its job)."""
    ticket = job.ticket
    if snap.name not in job.pods or snap.owner != ticket.caller:
        return None
    if snap.retire_after is not None or snap.single_use or snap.image is not None:
        return None
    if spec.hold_seconds <= 0 or snap.template != spec.template_version:
        return None
    return replace(
        snap,
        state=PodState.HELD,
        job=None,
        used=True,
        queue=ticket.spec.queue,
        tag=ticket.spec.lease_tag,
        hold_until=job.finished_at + spec.hold_seconds,
        idle_since=job.finished_at,
    )


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


class ProbeAnswer(Enum):
    """One rank's agent's word on the attempt a restarted broker asks it about."""

    KNOWS = "knows"  # it answered with the attempt's status (running or exited)
    UNKNOWN = "unknown"  # it answered that it does not know the attempt (never launched)
    SILENT = "silent"  # it did not answer, after the probe's retries


def reattach(answers: Sequence[ProbeAnswer], *, agents_fence: bool) -> bool:
    """Whether a probed RUNNING job's attempt is re-attached (`BrokerCore.adopt`) rather than
    lost. A rank whose agent does not know the attempt means it cannot be confirmed whole, so
    it is lost (its pods released unclean and deleted, which ends whatever still runs of it).
    A silent rank is re-attached only where agents fence themselves: the runner then declares
    the pod lost once its agent has had time to fence, so a partitioned agent's attempt never
    runs twice at once; where agents never fence, a silent rank is as good as unknown."""
    if ProbeAnswer.UNKNOWN in answers:
        return False
    return agents_fence or ProbeAnswer.SILENT not in answers


def exclusive_groups(
    unverified: Mapping[str, Iterable[str]], devices: Mapping[str, Sequence[str]]
) -> list[str]:
    """The GPUs (pod groups, `unverified`: group -> its restored pods) that a listing of every
    pod the backend has (`devices`: pod -> the devices it reports) shows as exclusively the
    group's: each card its pods use is used by no pod outside the group. A group whose pods
    report no device stays closed: nothing shows the card is not shared."""
    out: list[str] = []
    for group, members in unverified.items():
        names = set(members)
        cards = {d for n in names for d in devices.get(n, ())}
        users = {pod for pod, used in devices.items() if cards.intersection(used)}
        if cards and users <= names:
            out.append(group)
    return out
