"""The reconcile plan: how many pods each pool creates, retires and un-holds this pass.

Scaling follows the queue, not utilisation: warm pods are idle by design, so a utilisation
scaler would shrink a pool just as it is ready for a burst. Everything is counted in physical
units, rounded to whole pods: a CPU pod, or a GPU group (an active pod and its standbys count
once, and standbys are never supply). The formulas are the broker paper's appendix A.5:

    floorDeficit  = max(0, floor - (physical - singleUse))
    demandDeficit = max(0, demand - eligible)
    add           = min(max(floorDeficit, demandDeficit), ceiling - physical, step, headroom)

and, when nothing is created, scale-down over expired idle pods only:

    idleCap = min(maxIdle, ceiling - (physical - idle))
    retain  = max(idleCap, floor - (held + assignedRunning), demand - (starting + assignedRunning))
    remove  = max(0, min(idle - retain, expiredIdle, physical - floor))

Starting pods are supply (a GPU pod takes tens of seconds to start; without this every pass
would create another wave). Held pods count toward floor and ceiling but are supply only for
their owner: those matched by the owner's own queued jobs count as idle for this pass.

The plan is data. The driver reserves budget, calls the backend and feeds the results back.
Each plan also says until when it stays valid (`stable_until`): for the same pods, queue and
budget headroom, the only inputs that move with the clock are keep-alive expiry and the hold-
breaking tenure, so a driver that knows nothing else changed (the simulator, which performs every
change itself) may skip the pass instead of recomputing the same empty plan.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from firepool.control.records import Group, Pod, Retired, RetireReason
from firepool.model import PodState, PoolSpec
from firepool.model.frozen_init import fast_frozen_init

# Bound once: Enum attribute lookups are slow on a loop over 100,000 pods.
_STARTING, _IDLE, _HELD = PodState.STARTING, PodState.IDLE, PodState.HELD
_ASSIGNED, _RUNNING = PodState.ASSIGNED, PodState.RUNNING
_RETIRING, _STALE = PodState.RETIRING, PodState.STALE
_BUSY = (_ASSIGNED, _RUNNING)
_GONE = (_RETIRING, _STALE)


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class QueuedDemand:
    """One queued job as the scaler sees it (jobs blocked by their caller's quota included)."""

    caller: str
    pods: int = 1
    single_use: bool = False
    image: str | None = None  # a custom image: served only by pods created for it

    @property
    def dedicated(self) -> bool:
        return self.single_use or self.image is not None


@dataclass(frozen=True, slots=True)
class ScalerConfig:
    hold_break_min_tenure: float = 60.0  # never break the hold of a pod younger than this
    drain_budget: int = 1  # stale (old-template) pods retiring at once during a rollout


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class Census:
    """The pool's physical units by class for one pass (also exported as metrics)."""

    starting: int = 0
    idle: int = 0  # unheld idle, plus held units matched by their owner's queued jobs
    held: int = 0  # held units not matched by their owner's queued jobs
    assigned: int = 0
    running: int = 0
    stale: int = 0  # old template or retiring: occupy capacity, serve nothing new
    single_use: int = 0  # dedicated (single-use or custom-image) units
    expired_idle: int = 0
    demand: int = 0
    eligible: int = 0
    physical: int = 0


@dataclass(frozen=True, slots=True)
class DedicatedCreate:
    single_use: bool
    image: str | None


@dataclass(slots=True)
class ScalePlan:
    pool: str
    census: Census
    create: int = 0  # shared warm pods (each a new GPU group on GPU pools)
    create_dedicated: list[DedicatedCreate] = field(default_factory=list)
    create_standbys: list[str] = field(default_factory=list)  # one entry per standby: its group
    retire: list[Retired] = field(default_factory=list)
    blocked_at_ceiling: bool = False
    # The same pods, queue and headroom give this very plan at any `now` before this time
    # (the next keep-alive expiry or hold-breaking tenure): nothing else in it reads the clock.
    stable_until: float = math.inf

    @property
    def empty(self) -> bool:
        return not (self.create or self.create_dedicated or self.create_standbys or self.retire)


class _Unit:
    """One physical unit: a CPU pod, or a GPU group with all its member pods."""

    __slots__ = ("kind", "members", "owner", "since", "tenure")

    def __init__(
        self, kind: str, members: list[Pod], owner: str | None, since: float, tenure: float
    ) -> None:
        self.kind = kind
        self.members = members
        self.owner = owner
        self.since = since
        self.tenure = tenure  # creation time of the unit's oldest pod


class _Tally:
    """The units of one pool by class; only held and expired units are kept as objects."""

    __slots__ = (
        "dedicated_supply",
        "expired",
        "expired_pods",
        "held",
        "held_pods",
        "kinds",
        "next_expiry",
        "physical",
        "retiring",
        "stale_pods",
        "units",
    )

    def __init__(self) -> None:
        # Plain dicts, not Counters: a Counter costs ~1 us to build, and the simulator plans a
        # small pool after every release.
        self.kinds: dict[str, int] = {}
        self.held: list[_Unit] = []  # GPU pools
        self.expired: list[_Unit] = []  # GPU pools
        # CPU pools keep bare pods: allocating a unit per pod on a 100,000-pod pass costs more
        # in garbage collection than the whole tally.
        self.held_pods: list[Pod] = []
        self.expired_pods: list[Pod] = []
        self.dedicated_supply: dict[DedicatedCreate, int] = {}
        self.units: list[_Unit] = []  # every unit, for GPU pools only (standby staging)
        self.physical = 0
        self.next_expiry = math.inf  # when the next idle unit's keep-alive runs out
        # Pods in state RETIRING / STALE, for the template roll-out (CPU pools count them in
        # the same pass; None: not counted, `_drain_stale` walks the pods itself).
        self.retiring: int | None = None
        self.stale_pods: list[Pod] = []

    def held_owners(self) -> dict[str | None, int]:
        out: dict[str | None, int] = {}
        for owner in (p.owner for p in self.held_pods) if self.held_pods else (
            u.owner for u in self.held
        ):
            out[owner] = out.get(owner, 0) + 1
        return out

    def held_units(self) -> list[_Unit]:
        return self.held + [
            _Unit("held", [p], p.owner, p.idle_since, p.created_at) for p in self.held_pods
        ]

    def expired_units(self, limit: int) -> list[_Unit]:
        """The `limit` longest-idle expired units, oldest first."""
        if self.expired_pods:
            oldest = heapq.nsmallest(limit, self.expired_pods, key=lambda p: p.idle_since)
            return [_Unit("expired", [p], None, p.idle_since, p.created_at) for p in oldest]
        return heapq.nsmallest(limit, self.expired, key=lambda u: u.since)


def _classify(members: list[Pod], template: int, timeout: float, now: float) -> str:
    """The class of one GPU group; `expired` when every member is idle past its keep-alive."""
    live = [p for p in members if p.state not in _GONE]
    if not live:
        return "stale"
    if any(p.state in _BUSY for p in live):
        if live[0].dedicated:
            return "dedicated"
        return "running" if any(p.state is _RUNNING for p in live) else "assigned"
    if any(p.dedicated for p in live):
        return "dedicated"
    if any(p.template != template for p in live):
        return "stale"
    if any(p.state is _IDLE for p in live):
        if len(live) == len(members) and all(
            p.state is _IDLE and p.idle_since + timeout <= now for p in live
        ):
            return "expired"
        return "idle"
    if any(p.state is _STARTING for p in live):
        return "starting"
    return "held"


def _tally_gpu(spec: PoolSpec, pods: Sequence[Pod], groups: Iterable[Group], now: float) -> _Tally:
    tally = _Tally()
    by_name = {p.name: p for p in pods}
    for group in groups:
        # By name, not set order: retirements must not depend on string hashing.
        members = [by_name[n] for n in sorted(group.pods) if n in by_name]
        if not members:
            continue
        kind = _classify(members, spec.template_version, spec.idle_timeout, now)
        owner = None
        since = max(p.idle_since for p in members)
        if kind == "held":
            held = [p for p in members if p.state is _HELD]
            owner = held[0].owner
            since = min(p.idle_since for p in held)
        unit = _Unit(kind, members, owner, since, min(p.created_at for p in members))
        tally.units.append(unit)
        tally.kinds[kind] = tally.kinds.get(kind, 0) + 1
        if kind == "held":
            tally.held.append(unit)
        elif kind == "expired":
            tally.expired.append(unit)
        elif kind == "idle":
            if all(p.state is _IDLE for p in members):  # expires when its last member does
                expiry = since + spec.idle_timeout
                if expiry < tally.next_expiry:
                    tally.next_expiry = expiry
        elif kind == "dedicated":
            _count_dedicated_supply(tally, members)
    tally.physical = len(tally.units)
    return tally


def _tally_cpu(spec: PoolSpec, pods: Sequence[Pod], now: float) -> _Tally:
    """One pass over the pool's pods, with no per-pod allocation except for held and expired
    pods: this loop is the whole cost of a reconcile over 100,000 pods."""
    tally = _Tally()
    template = spec.template_version
    timeout = spec.idle_timeout
    stale = starting = idle = assigned = running = dedicated = retiring = 0
    next_expiry = math.inf
    held_pods = tally.held_pods
    expired = tally.expired_pods
    supply = tally.dedicated_supply
    for p in pods:
        st = p.state
        if st is _RUNNING:
            if p.dedicated:
                dedicated += 1
            else:
                running += 1
        elif st is _HELD:
            if p.dedicated:
                dedicated += 1
            elif p.template != template:
                stale += 1
            else:
                held_pods.append(p)
        elif st is _IDLE:
            if p.dedicated:
                dedicated += 1
                key = DedicatedCreate(p.single_use, p.image)
                supply[key] = supply.get(key, 0) + 1
            elif p.template != template:
                stale += 1
            elif p.idle_since + timeout <= now:
                expired.append(p)
            else:
                idle += 1
                if p.idle_since + timeout < next_expiry:
                    next_expiry = p.idle_since + timeout
        elif st is _ASSIGNED:
            if p.dedicated:
                dedicated += 1
            else:
                assigned += 1
        elif st is _STARTING:
            if p.dedicated:
                dedicated += 1
                key = DedicatedCreate(p.single_use, p.image)
                supply[key] = supply.get(key, 0) + 1
            elif p.template != template:
                stale += 1
            else:
                starting += 1
        else:
            stale += 1
            if st is _RETIRING:
                retiring += 1
            elif st is _STALE:
                tally.stale_pods.append(p)
    tally.kinds = {
        "stale": stale,
        "starting": starting,
        "idle": idle,
        "assigned": assigned,
        "running": running,
        "dedicated": dedicated,
        "held": len(held_pods),
        "expired": len(expired),
    }
    tally.physical = len(pods)
    tally.next_expiry = next_expiry
    tally.retiring = retiring
    return tally


def _count_dedicated_supply(tally: _Tally, members: list[Pod]) -> None:
    supply = tally.dedicated_supply
    for p in members:
        if p.state is _STARTING or p.state is _IDLE:
            key = DedicatedCreate(p.single_use, p.image)
            supply[key] = supply.get(key, 0) + 1


def plan(
    spec: PoolSpec,
    pods: Sequence[Pod],
    groups: Iterable[Group],
    queued: Iterable[QueuedDemand],
    now: float,
    *,
    headroom_units: int | None = None,
    config: ScalerConfig = ScalerConfig(),
) -> ScalePlan:
    """One reconcile pass for one pool. `headroom_units` is the global budget left (GPUs or
    cores), None when unlimited."""
    tally = _tally_gpu(spec, pods, groups, now) if spec.is_gpu else _tally_cpu(spec, pods, now)
    kinds = tally.kinds
    queued_by_caller: dict[str, int] = {}
    dedicated_demand: dict[DedicatedCreate, int] = {}
    queued_shared = 0
    for q in queued:
        if q.dedicated:
            key = DedicatedCreate(q.single_use, q.image)
            dedicated_demand[key] = dedicated_demand.get(key, 0) + q.pods
        else:
            queued_by_caller[q.caller] = queued_by_caller.get(q.caller, 0) + q.pods
            queued_shared += q.pods
    matched = 0
    if queued_by_caller and (tally.held_pods or tally.held):
        for owner, n in tally.held_owners().items():
            matched += min(n, queued_by_caller.get(owner or "", 0))

    get = kinds.get
    starting = get("starting", 0)
    unheld_idle = get("idle", 0) + get("expired", 0)
    idle = unheld_idle + matched
    held = get("held", 0) - matched
    assigned, running = get("assigned", 0), get("running", 0)
    busy = assigned + running
    stale = get("stale", 0)
    single_use = get("dedicated", 0)
    physical = tally.physical
    demand = queued_shared + busy
    eligible = starting + idle + busy

    floor_deficit = max(0, spec.min_count - (physical - single_use))
    demand_deficit = max(0, demand - eligible)
    room = max(0, spec.max_count - physical)
    per_unit = spec.units_per_pod
    head = room if headroom_units is None else max(0, headroom_units // per_unit)
    add = max(0, min(max(floor_deficit, demand_deficit), room, spec.step, head))

    expired_count = get("expired", 0)
    census = Census(
        starting=starting,
        idle=idle,
        held=held,
        assigned=assigned,
        running=running,
        stale=stale,
        single_use=single_use,
        expired_idle=expired_count,
        demand=demand,
        eligible=eligible,
        physical=physical,
    )
    result = ScalePlan(spec.name, census, create=add, stable_until=tally.next_expiry)

    # Dedicated pods (single-use, custom image) for queued jobs that only they can serve.
    deficit_left = demand_deficit - add
    if dedicated_demand:
        supply = tally.dedicated_supply
        budget = min(room, spec.step, head) - add
        for key, wanted in sorted(dedicated_demand.items(), key=lambda kv: str(kv[0])):
            for _ in range(max(0, wanted - supply.get(key, 0))):
                if budget <= 0:
                    break
                result.create_dedicated.append(key)
                budget -= 1
        deficit_left += sum(max(0, n - supply.get(k, 0)) for k, n in dedicated_demand.items())
        deficit_left -= len(result.create_dedicated)
    result.blocked_at_ceiling = deficit_left > 0 and (room - add <= 0 or head - add <= 0)
    if result.blocked_at_ceiling:
        _break_holds(result, tally.held_units(), queued_by_caller, deficit_left, now, config)

    if not add and not result.create_dedicated:
        idle_cap = min(spec.max_idle_count, spec.max_count - (physical - idle))
        retain = max(idle_cap, spec.min_count - (held + busy), demand - (starting + busy))
        remove = max(0, min(idle - retain, expired_count, physical - spec.min_count))
        for unit in tally.expired_units(remove) if remove else ():
            result.retire.extend(Retired(p.name, RetireReason.SCALE_DOWN) for p in unit.members)

    _drain_stale(result, pods, config, tally)
    if spec.standbys_per_active:
        _stage_standbys(result, spec, tally.units)
    return result


def _break_holds(
    result: ScalePlan,
    held_units: list[_Unit],
    queued_by_caller: dict[str, int],
    wanted: int,
    now: float,
    config: ScalerConfig,
) -> None:
    """A queued job is blocked at the ceiling: free capacity held for callers who are not
    waiting, oldest hold first, only on pods past the minimum tenure. A broken hold retires
    its pod; it is never handed to another caller."""
    eligible: list[_Unit] = []
    for u in held_units:
        if queued_by_caller.get(u.owner or "", 0):
            continue
        ripe = u.tenure + config.hold_break_min_tenure
        if ripe <= now:
            eligible.append(u)
        elif ripe < result.stable_until:
            result.stable_until = ripe  # a younger hold becomes breakable then
    candidates = sorted(eligible, key=lambda u: u.since)
    for unit in candidates[:wanted]:
        result.retire.extend(
            Retired(p.name, RetireReason.HOLD_BROKEN) for p in unit.members if p.state is _HELD
        )


def _drain_stale(
    result: ScalePlan, pods: Sequence[Pod], config: ScalerConfig, tally: _Tally
) -> None:
    """Roll out a new template gradually: at most `drain_budget` old pods retiring at once."""
    if tally.retiring is not None:  # counted in the tally's pass
        retiring, stale = tally.retiring, tally.stale_pods
    else:
        retiring = 0
        stale = []
        for p in pods:
            st = p.state
            if st is _RETIRING:
                retiring += 1
            elif st is _STALE:
                stale.append(p)
    allowance = config.drain_budget - retiring
    if allowance <= 0 or not stale:
        return
    stale.sort(key=lambda p: p.created_at)
    result.retire.extend(Retired(p.name, RetireReason.STALE_TEMPLATE) for p in stale[:allowance])


def _stage_standbys(result: ScalePlan, spec: PoolSpec, units: list[_Unit]) -> None:
    """Refill every live group to one active plus `standbys_per_active` standbys."""
    leaving = {r.pod for r in result.retire}
    slots = 1 + spec.standbys_per_active
    budget = spec.step
    for unit in units:
        if unit.kind in ("stale", "dedicated", "starting"):
            continue
        live = [p for p in unit.members if p.state not in _GONE and p.name not in leaving]
        if not live or live[0].group is None:
            continue
        for _ in range(slots - len(live)):
            if budget <= 0:
                return
            result.create_standbys.append(live[0].group)
            budget -= 1
