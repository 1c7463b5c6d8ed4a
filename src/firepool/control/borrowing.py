"""Borrowed capacity: what the broker gives back when an owner reclaims its cards.

A capacity controller publishes, per accelerator model, reserved capacity its owners are not
using (broker paper, section 7 and appendix A.7). The broker's ledger limit for that model is
its own budget plus what it may borrow, so a grant lets the scaler create pods at once. When
an owner reclaims, the limit drops below what the broker holds, and the broker gives back one
unit per unit asked: idle capacity first (unheld idle or stale pods, then held ones, oldest
idle first), then busy capacity by preempting the youngest job, whose attempt ends
`Reclaimed` and is retried without counting against its retries. Capacity already on its way
out (pods being deleted, jobs already preempted) is not given back twice; pods still starting
are left for the next pass, when they are idle supply.

No I/O, no clock: the driver polls the controller and feeds each reading to the core, which
calls `plan_giveback` with the tracker's pods.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from firepool.control.records import Pod
from firepool.model import PodState, PoolSpec

_STARTING, _HELD, _RETIRING = PodState.STARTING, PodState.HELD, PodState.RETIRING
_BUSY = (PodState.ASSIGNED, PodState.RUNNING)


@dataclass(frozen=True, slots=True)
class Giveback:
    """Pods to retire now and jobs to preempt (their pods retire when the attempt ends)."""

    retire: tuple[str, ...] = ()
    preempt: tuple[str, ...] = ()
    #: Units still above the limit after this plan (capacity that is starting up).
    short: int = 0
    #: Units this plan frees (what the owner gets back once the pods are gone).
    freed: int = 0
    #: Units asked beyond what was already leaving: `freed` exceeds it only when the
    #: youngest job holds several units.
    need: int = 0


@dataclass(slots=True)
class _Unit:
    """One budget holder: a GPU group (an active pod and its standbys) or a CPU pod."""

    units: int
    members: list[Pod] = field(default_factory=list)


def borrowed_limit(own: int | None, borrowable: int) -> int | None:
    """The ledger limit for a resource: the broker's own budget plus what it may borrow.
    A resource the deployment does not limit stays unlimited: a reading can lend it nothing,
    and must not turn it into a limited one."""
    return None if own is None else own + borrowable


def plan_giveback(
    over: int,
    pools: Iterable[PoolSpec],
    pods: Mapping[str, Sequence[Pod]],
    job_started: Mapping[str, float],
    reclaiming: Iterable[str] = (),
) -> Giveback:
    """Free `over` units from the pools drawing on one budget resource.

    `pods` are each pool's tracked pods, `job_started` when each running job claimed its pods
    (the youngest is preempted first), `reclaiming` the jobs already being preempted.
    """
    already = set(reclaiming)
    idle: list[tuple[int, float, str, _Unit]] = []
    busy_jobs: dict[str, int] = {}  # job -> units its preemption frees
    # Idle members (standbys) on a busy card: they go with it, or the card is never free.
    companions: dict[str, list[str]] = {}
    retire: list[str] = []
    leaving = 0
    for spec in pools:
        for unit in _units(spec, pods.get(spec.name, ())):
            live = [p for p in unit.members if p.state is not _RETIRING]
            if not live:
                leaving += unit.units
                continue
            if any(p.state is _STARTING for p in live):
                continue
            jobs = {p.job for p in live if p.state in _BUSY and p.job is not None}
            if jobs:
                rest = [p.name for p in live if p.state not in _BUSY]
                if jobs <= already:
                    leaving += unit.units
                    retire.extend(rest)
                    continue
                youngest = max(jobs, key=lambda j: (job_started.get(j, 0.0), j))
                busy_jobs[youngest] = busy_jobs.get(youngest, 0) + unit.units
                companions.setdefault(youngest, []).extend(rest)
                continue
            held = any(p.state is _HELD for p in live)
            since = max(p.idle_since for p in live)
            idle.append((1 if held else 0, since, live[0].name, unit))
    need = over - leaving
    freed = 0
    for _, _, _, unit in sorted(idle, key=lambda u: (u[0], u[1], u[2])):
        if freed >= need:
            break
        retire.extend(p.name for p in unit.members if p.state is not _RETIRING)
        freed += unit.units
    preempt: list[str] = []
    by_age = sorted(busy_jobs, key=lambda j: (job_started.get(j, 0.0), j), reverse=True)
    for job in by_age:
        if freed >= need:
            break
        preempt.append(job)
        retire.extend(companions.get(job, ()))
        freed += busy_jobs[job]
    return Giveback(tuple(retire), tuple(preempt), max(0, need - freed), freed, max(0, need))


def _units(spec: PoolSpec, pods: Sequence[Pod]) -> list[_Unit]:
    units = spec.units_per_pod
    if not spec.is_gpu:
        return [_Unit(units, [p]) for p in pods]
    groups: dict[str, _Unit] = {}
    for pod in pods:
        key = pod.group if pod.group is not None else pod.name
        unit = groups.get(key)
        if unit is None:
            unit = groups[key] = _Unit(units)
        unit.members.append(pod)
    return list(groups.values())
