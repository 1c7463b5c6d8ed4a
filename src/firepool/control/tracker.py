"""The pod tracker: every pod indexed by pool, owner session, job and physical GPU.

A claim finds eligible pods in placement order (`Tracker._place`, the one walk), checks
per-caller limits and records the lease (`Tracker._commit_claim`) in one step. The tracker
has no lock: it is driven only by the single-threaded broker core (`control/core.py`), one
event at a time, so no two claims interleave. Several invariants span pools (per-caller GPU
limits, budgets, standby exclusivity), which is why one tracker indexes them all. The per-GPU
gate lives in `control/gpu_gate.py` and the hold rule in `control/holds.py`.

Placement order inside a pool (broker paper, section 5 and appendix A.3):
1. the caller's own held pod with the same queue and lease tag (`warm`);
2. the caller's own held pod across a tag or queue boundary, which runs this one job and then
   retires (`recycled`); when the pool treats tags as hints, the same queue under another tag
   is still `warm` and does not retire;
3. a never-used, unheld idle pod (`warm`, or `new` when it was created after the job queued);
4. a standby on a GPU, promoted through the per-GPU gate (`standby`);
5. nothing: the job waits and the scaler sees it as demand.
A used pod is never handed to another caller.

No I/O and no clock: every method takes `now`.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from firepool.control import gpu_gate
from firepool.control.gpu_gate import gate_open
from firepool.control.holds import HoldQueue, release_reason
from firepool.control.records import (
    ClaimRequest,
    Group,
    Lease,
    LeasedPod,
    Pod,
    PodSnapshot,
    Promotion,
    ReleaseResult,
    Retired,
    RetireReason,
    Wait,
    WaitReason,
)
from firepool.model import (
    AcquisitionPath,
    AcquisitionReason,
    ConflictError,
    InvalidTransitionError,
    LeaseTagMode,
    NotFoundError,
    PodRole,
    PodState,
    PoolSpec,
    UnknownPoolError,
)

_NEW_LABEL = (AcquisitionPath.NEW, AcquisitionReason.NO_WARM_CAPACITY)
_WARM_FRESH_LABEL = (AcquisitionPath.WARM, AcquisitionReason.NO_OWN_POD)
_SAME_SESSION_LABEL = (AcquisitionPath.WARM, AcquisitionReason.SAME_SESSION)
_TAG_HINT_LABEL = (AcquisitionPath.WARM, AcquisitionReason.TAG_HINT)
_NEW_SESSION_LABEL = (AcquisitionPath.RECYCLED, AcquisitionReason.NEW_SESSION)
_QUEUE_SWITCH_LABEL = (AcquisitionPath.RECYCLED, AcquisitionReason.QUEUE_SWITCH)
_STANDBY_LABEL = (AcquisitionPath.STANDBY, AcquisitionReason.NO_IDLE_POD)
_PINNED_SESSION_LABEL = (AcquisitionPath.CUSTOM_IMAGE, AcquisitionReason.SAME_SESSION)
_CUSTOM_IMAGE_LABEL = (AcquisitionPath.CUSTOM_IMAGE, AcquisitionReason.CUSTOM_IMAGE)

#: Legal pod transitions; anything else raises InvalidTransitionError.
POD_TRANSITIONS: dict[PodState, frozenset[PodState]] = {
    PodState.STARTING: frozenset({PodState.IDLE, PodState.RETIRING}),
    PodState.IDLE: frozenset({PodState.ASSIGNED, PodState.RETIRING, PodState.STALE}),
    PodState.HELD: frozenset({PodState.ASSIGNED, PodState.RETIRING, PodState.STALE}),
    PodState.ASSIGNED: frozenset(
        {PodState.RUNNING, PodState.IDLE, PodState.HELD, PodState.RETIRING, PodState.STALE}
    ),
    PodState.RUNNING: frozenset({PodState.HELD, PodState.RETIRING, PodState.STALE}),
    PodState.STALE: frozenset({PodState.RETIRING}),
    PodState.RETIRING: frozenset(),
}


#: The paths whose pod retires after this one job: `recycled` crossed a session boundary.
_RETIRES_AFTER_JOB = frozenset({AcquisitionPath.RECYCLED})
#: What a claim makes of a pod in each state it may take one from: ASSIGNED, derived from the
#: transition table so the two cannot disagree. One lookup both checks and moves the state.
_CLAIMED = {s: PodState.ASSIGNED for s, to in POD_TRANSITIONS.items() if PodState.ASSIGNED in to}


def _illegal(pod: Pod, state: PodState) -> InvalidTransitionError:
    return InvalidTransitionError(
        f"pod {pod.name}: {pod.state.value} -> {state.value} is not allowed", field="state"
    )


def _discard(bucket: dict[str, None], name: str) -> None:
    """Remove `name` from an ordered-set bucket. The walk takes the newest entry, and
    `popitem` removes that one without leaving a hole at the dict's end that every later
    newest-first scan (`reversed`) would have to step over."""
    if next(reversed(bucket), None) == name:
        bucket.popitem()
    else:
        bucket.pop(name, None)


def _group(pod: Pod) -> str:
    """The physical GPU of a pod in a GPU pool (where every pod has one, by construction)."""
    group = pod.group
    if group is None:
        raise InvalidTransitionError(f"GPU pod {pod.name} has no group", field="group")
    return group


def fresh_label(pod: Pod, req: ClaimRequest) -> tuple[AcquisitionPath, AcquisitionReason]:
    """A never-used pod's label: `new` when it was created after the job queued (the job
    waited for it), else `warm`. The one rule, for the fast path and the general one."""
    if 0 < req.queued_at <= pod.created_at:
        return _NEW_LABEL
    return _WARM_FRESH_LABEL


def reuse_label(
    pod: Pod, req: ClaimRequest, hint: bool
) -> tuple[AcquisitionPath, AcquisitionReason] | None:
    """Owner-only reuse: how a used pod may serve `req`, or None when it may not. Only its
    last caller may have it; the same queue and tag is `warm`; the same queue under another
    tag is `warm` where the pool treats tags as hints, else `recycled` (one job, then it
    retires), as is another queue."""
    if pod.owner != req.caller or pod.image != req.image:
        return None
    if pod.queue == req.queue:
        if pod.tag == req.tag:
            return _SAME_SESSION_LABEL
        return _TAG_HINT_LABEL if hint else _NEW_SESSION_LABEL
    return _QUEUE_SWITCH_LABEL


SessionKey = tuple[str, str, str, str | None]  # caller, queue, tag, custom image
DedicatedKey = tuple[bool, str | None]  # single_use, custom image


class _PoolIndex:
    """Per-pool buckets. Insertion-ordered dicts serve as ordered sets (O(1) add/remove)."""

    __slots__ = (
        "dedicated_idle",
        "fresh",
        "gpu",
        "held_by_caller",
        "held_by_session",
        "leased_by_caller",
        "limited",
        "pods",
        "resetting",
        "spec",
        "standby",
    )

    def __init__(self, spec: PoolSpec) -> None:
        self.spec = spec
        self.gpu = spec.is_gpu
        self.limited = False
        self.pods: dict[str, None] = {}
        self.fresh: dict[str, None] = {}
        self.standby: dict[str, None] = {}
        self.held_by_session: dict[SessionKey, dict[str, None]] = {}
        self.held_by_caller: dict[str, dict[str, None]] = {}
        self.dedicated_idle: dict[DedicatedKey, dict[str, None]] = {}
        self.leased_by_caller: dict[str, int] = {}
        #: Pods being reset after a job whose verdict is out, that come back held for the
        #: job's session: that session's next claims wait for them (`Tracker.ending`).
        self.resetting: dict[SessionKey, int] = {}

    def configure(self, spec: PoolSpec, tracker_gpu_limit: int | None) -> None:
        """Cache what the claim path reads on every call."""
        self.spec = spec
        self.gpu = spec.is_gpu
        self.limited = (
            spec.max_pods_per_caller is not None
            or spec.max_gpus_per_caller is not None
            or (spec.is_gpu and tracker_gpu_limit is not None)
        )


Candidate = tuple[Pod, AcquisitionPath, AcquisitionReason]


class Tracker:
    """In-memory index of every pod; the single place where pods change hands.

    Not thread-safe, by design: only the single-threaded broker core calls it (a caller that
    shares one across threads, like the benchmark's many-claimer run, serialises its calls).
    """

    def __init__(
        self,
        pools: Iterable[PoolSpec] = (),
        *,
        max_gpus_per_caller: int | None = None,
    ) -> None:
        self._pods: dict[str, Pod] = {}
        self._pools: dict[str, _PoolIndex] = {}
        self._groups: dict[str, Group] = {}
        self._jobs: dict[str, tuple[str, ...]] = {}
        # The request behind each lease: its caller, queue and tag become the pods' session at
        # release. Kept as the caller's own immutable object, so a claim allocates nothing.
        self._job_session: dict[str, ClaimRequest] = {}
        #: Jobs whose pods are being reset to be held: job -> (pool, session, pods counted).
        self._ending: dict[str, tuple[str, SessionKey, int]] = {}
        self._caller_gpus: dict[str, int] = {}
        self._holds = HoldQueue()
        #: GPUs restored after a broker restart whose exclusivity no sweep has verified yet:
        #: their standbys are never promoted (fail closed, the broker paper's appendix A.4).
        self.unverified: set[str] = set()
        self.max_gpus_per_caller = max_gpus_per_caller  # across all pools
        for spec in pools:
            self._pools[spec.name] = _PoolIndex(spec)
            self._pools[spec.name].configure(spec, max_gpus_per_caller)

    # ------------------------------------------------------------------ pools

    def set_pool(self, spec: PoolSpec) -> list[str]:
        """Add or update a pool. A new template version marks every old pod stale: idle and
        held ones at once (returned, for the scaler to drain), busy ones when they finish."""
        index = self._pools.get(spec.name)
        if index is None:
            index = self._pools[spec.name] = _PoolIndex(spec)
            index.configure(spec, self.max_gpus_per_caller)
            return []
        old_template = index.spec.template_version
        index.configure(spec, self.max_gpus_per_caller)
        if spec.template_version == old_template:
            return []
        stale: list[str] = []
        for name in list(index.pods):
            pod = self._pods[name]
            if pod.template == spec.template_version:
                continue
            if pod.state in (PodState.IDLE, PodState.HELD):
                self._unindex_available(index, pod)
                self._set_state(pod, PodState.STALE)
                stale.append(name)
            elif pod.state in (PodState.ASSIGNED, PodState.RUNNING):
                pod.retire_after = RetireReason.STALE_TEMPLATE
        return stale

    def pool_spec(self, pool: str) -> PoolSpec:
        return self._pool(pool).spec

    def pools(self) -> list[PoolSpec]:
        return [index.spec for index in self._pools.values()]

    # ------------------------------------------------------------------ pod lifecycle

    def add_pod(
        self,
        name: str,
        pool: str,
        now: float,
        *,
        role: PodRole = PodRole.ACTIVE,
        group: str | None = None,
        single_use: bool = False,
        image: str | None = None,
    ) -> Pod:
        """Track a pod the backend is creating (state `starting`).

        GPU pods name their physical GPU group (the device UUID, or whatever opaque id the
        backend pins standbys to); a standby must join an existing group.
        """
        index = self._pool(pool)
        if name in self._pods:
            raise ConflictError(f"pod {name} is already tracked", field="name")
        if index.spec.is_gpu:
            if group is None:
                raise InvalidTransitionError(f"GPU pod {name} needs a group", field="group")
            existing = self._groups.get(group)
            if role is PodRole.STANDBY:
                if existing is None or existing.pool != pool:
                    raise InvalidTransitionError(
                        f"standby {name} names unknown group {group}", field="group"
                    )
                if single_use or image is not None:
                    raise InvalidTransitionError("standbys serve the shared pool only")
            elif existing is not None and any(
                self._pods[p].role is PodRole.ACTIVE for p in existing.pods
            ):
                raise ConflictError(f"group {group} already has an active pod", field="group")
        elif role is PodRole.STANDBY or group is not None:
            raise InvalidTransitionError(f"CPU pod {name} cannot be a standby or join a group")
        pod = Pod(
            name,
            pool,
            role=role,
            group=group,
            created_at=now,
            template=index.spec.template_version,
            single_use=single_use,
            image=image,
        )
        self._pods[name] = pod
        index.pods[name] = None
        if group is not None:
            grp = self._groups.get(group)
            if grp is None:
                grp = self._groups[group] = Group(group, pool)
            grp.pods.add(name)
        return pod

    def pod_ready(self, name: str, now: float) -> None:
        """The pod's agent answers: it becomes never-used idle supply."""
        pod = self._pod(name)
        if pod.state is not PodState.STARTING:
            raise InvalidTransitionError(
                f"pod {name} is {pod.state.value}, not starting: a duplicate ready event?",
                field="name",
            )
        self._set_state(pod, PodState.IDLE)
        pod.idle_since = now
        index = self._pools[pod.pool]
        if pod.template != index.spec.template_version:
            self._set_state(pod, PodState.STALE)
            return
        self._index_fresh(index, pod)

    def retire(self, name: str, reason: RetireReason) -> bool:
        """Mark an unleased pod for deletion (scale-down, broken hold, failed start, stale).

        Returns False, changing nothing, when the pod is leased meanwhile: the scaler's plan was
        computed from a snapshot, and a claim may have won the race.
        """
        pod = self._pods.get(name)
        if pod is None or pod.state in (PodState.ASSIGNED, PodState.RUNNING, PodState.RETIRING):
            return False
        self._unindex_available(self._pools[pod.pool], pod)
        self._set_state(pod, PodState.RETIRING)
        pod.retire_after = reason
        return True

    def pod_deleted(self, name: str) -> tuple[str | None, list[Promotion]]:
        """The backend confirmed the pod is gone.

        Returns the group whose last pod this was (its budget reservation can be released) and
        any promotion this unblocks: a pod deleted while holding its GPU's gate (an unclean
        reset) hands the gate on only now, when its processes are surely gone.
        """
        pod = self._pods.get(name)
        if pod is None:
            return None, []
        if pod.state in (PodState.ASSIGNED, PodState.RUNNING):
            raise InvalidTransitionError(
                f"pod {name} is leased to {pod.job}; release it before deleting", field="name"
            )
        index = self._pools[pod.pool]
        self._unindex_available(index, pod)
        del self._pods[name]
        del index.pods[name]
        promoted: list[Promotion] = []
        freed: str | None = None
        if pod.group is not None:
            grp = self._groups[pod.group]
            grp.pods.discard(name)
            taker = gpu_gate.forget(grp, name)
            if taker is not None:
                promoted = self._promote(grp, taker)
            if not grp.pods:
                del self._groups[pod.group]
                freed = pod.group
        else:
            freed = name
        return freed, promoted

    # ------------------------------------------------------------------ claim

    def claim(self, req: ClaimRequest, now: float) -> Lease | Wait:
        """Take the job's whole pod set in placement order, or nothing (and say why)."""
        index = self._pools.get(req.pool)
        if index is None:
            raise UnknownPoolError(f"unknown pool {req.pool!r}", field="pool")
        job = req.job
        if job in self._jobs:
            raise ConflictError(f"job {job} already holds a lease", field="job")
        n = req.pods
        if index.limited:
            refused = self._caller_limit(index, req.caller, n)
            if refused is not None:
                return Wait(job, refused)
        if index.resetting and not req.single_use:
            resetting = index.resetting.get(req.session, 0)
            if resetting and len(index.held_by_session.get(req.session, ())) < n:
                return Wait(job, WaitReason.OWN_POD_RESETTING)
        if req.simple or (not req.single_use and (req.image is None or req.image_pinned)):
            chosen = self._place(index, req, n, now)
        else:
            chosen = self._select_dedicated(index, req, n)
        if chosen is None:
            return Wait(job, WaitReason.NO_CAPACITY)
        return self._commit_claim(index, req, chosen)

    def _caller_limit(self, index: _PoolIndex, caller: str, n: int) -> WaitReason | None:
        spec = index.spec
        leased = index.leased_by_caller.get(caller, 0)
        limit = spec.max_pods_per_caller
        if limit is not None and leased + n > limit:
            return WaitReason.CALLER_POD_LIMIT
        per_pod = spec.accelerators_per_pod
        limit = spec.max_gpus_per_caller
        if limit is not None and (leased + n) * per_pod > limit:
            return WaitReason.CALLER_GPU_LIMIT
        limit = self.max_gpus_per_caller
        if per_pod and limit is not None and self._caller_gpus.get(caller, 0) + n * per_pod > limit:
            return WaitReason.CALLER_GPU_LIMIT
        return None

    def _place(
        self, index: _PoolIndex, req: ClaimRequest, n: int, now: float
    ) -> list[Candidate] | None:
        """The placement walk, the one place that applies the placement order (module
        docstring) to a claim of shared pods or of a digest-pinned custom image: `n` pods, on
        distinct physical GPUs where pods have one, each with no other claim in flight on its
        card. None when the pool cannot serve all `n` now. It only picks; `_commit_claim`
        records.

        A pinned image is reused only within the exact session that used it, else served by a
        pod created for it (`custom_image`): it never crosses a boundary or takes a standby.
        """
        pods = self._pods
        pinned = req.image is not None
        chosen: list[Candidate] = []
        taken: set[str] = set()  # the GPUs of the pods chosen so far

        # 1. The caller's own held pods of this very session, newest first.
        bucket = index.held_by_session.get(req.session)
        if bucket:
            path, reason = _PINNED_SESSION_LABEL if pinned else _SAME_SESSION_LABEL
            for name in reversed(bucket):
                pod = pods[name]
                if pod.hold_until <= now:
                    break  # newest hold expired, so every older one has too
                group = pod.group  # set for every GPU pod, by construction
                if group is not None:
                    if not gate_open(self._groups[group], name) or (group in taken and not pinned):
                        continue
                    taken.add(group)
                if n == 1:
                    return [(pod, path, reason)]  # the common claim, without the list's growth
                chosen.append((pod, path, reason))
                if len(chosen) == n:
                    return chosen
            if pinned:
                return self._place_pinned_fresh(index, req, n, chosen, taken)

        elif pinned:
            return self._place_pinned_fresh(index, req, n, chosen, taken)

        # 2. The caller's own held pods across a tag or queue boundary.
        mine = index.held_by_caller.get(req.caller)
        if mine and len(mine) != len(chosen):
            self._place_cross_boundary(index, req, n, now, mine, chosen, taken)
            if len(chosen) == n:
                return chosen

        # 3. Never-used idle pods, newest first.
        gpu = index.gpu
        groups = self._groups
        for name in reversed(index.fresh):
            pod = pods[name]
            if gpu:
                group = _group(pod)
                if group in taken or not gate_open(groups[group], name):
                    continue
                taken.add(group)
            path, reason = fresh_label(pod, req)
            chosen.append((pod, path, reason))
            if len(chosen) == n:
                return chosen
        if not gpu:
            return None

        # 4. Standbys: a GPU whose gate is open first (immediate promotion), then busy ones.
        busy: list[Pod] = []
        unverified = self.unverified
        for name in index.standby:
            pod = pods[name]
            grp = groups[_group(pod)]
            if grp.name in taken or grp.waiting is not None or grp.name in unverified:
                continue
            if grp.gate is None:
                chosen.append((pod, *_STANDBY_LABEL))
                taken.add(grp.name)
                if len(chosen) == n:
                    return chosen
            else:
                busy.append(pod)
        for pod in busy:
            group = _group(pod)
            if group in taken:
                continue
            chosen.append((pod, *_STANDBY_LABEL))
            taken.add(group)
            if len(chosen) == n:
                return chosen
        return None

    def _place_cross_boundary(
        self,
        index: _PoolIndex,
        req: ClaimRequest,
        n: int,
        now: float,
        mine: dict[str, None],
        chosen: list[Candidate],
        taken: set[str],
    ) -> None:
        """Step 2 of the walk: the caller's own held pods under another tag or queue,
        `recycled` (they retire after this job), or `warm` when the pool treats the tag as a
        hint and the queue matches; the `warm` ones come first."""
        hint = index.spec.lease_tag_mode is LeaseTagMode.HINT
        gpu = index.gpu
        groups = self._groups
        later: list[Candidate] = []
        pods = self._pods
        for name in reversed(mine):
            pod = pods[name]
            if pod.image is not None or pod.hold_until <= now:
                continue
            label = reuse_label(pod, req, hint)
            if label is None or label is _SAME_SESSION_LABEL:
                continue  # same session: considered (and refused) already
            if gpu:
                group = _group(pod)
                if group in taken or not gate_open(groups[group], name):
                    continue
                taken.add(group)
            candidate = (pod, *label)
            if candidate[1] is AcquisitionPath.WARM:
                chosen.append(candidate)
            else:
                later.append(candidate)
            if len(chosen) + len(later) >= n:
                break
        chosen.extend(later[: n - len(chosen)])

    def _place_pinned_fresh(
        self,
        index: _PoolIndex,
        req: ClaimRequest,
        n: int,
        chosen: list[Candidate],
        taken: set[str],
    ) -> list[Candidate] | None:
        """The walk's last step for a pinned image: idle pods created for it, oldest first."""
        for name in index.dedicated_idle.get((False, req.image), {}):
            pod = self._pods[name]
            if pod.group is not None and pod.group in taken:
                continue
            chosen.append((pod, *_CUSTOM_IMAGE_LABEL))
            if len(chosen) == n:
                return chosen
        return None

    def _select_dedicated(
        self, index: _PoolIndex, req: ClaimRequest, n: int
    ) -> list[Candidate] | None:
        """Single-use and mutable custom-image jobs run only on pods created for their kind."""
        bucket = index.dedicated_idle.get((req.single_use, req.image))
        if not bucket or len(bucket) < n:
            return None
        if req.image is not None:
            path, reason = _CUSTOM_IMAGE_LABEL
        else:
            path, reason = AcquisitionPath.NEW, AcquisitionReason.SINGLE_USE
        names = list(bucket)[:n]
        return [(self._pods[name], path, reason) for name in names]

    def _commit_claim(self, index: _PoolIndex, req: ClaimRequest, chosen: list[Candidate]) -> Lease:
        """Record a walk's choice, the one place a lease is recorded: the pods leave their
        buckets, become assigned to the job (a `recycled` one marked to retire at the session
        boundary) and enter their GPU's gate; the caller's counts grow."""
        job = req.job
        caller = req.caller
        for pod, path, _reason in chosen:
            claimed = _CLAIMED.get(pod.state)
            if claimed is None:
                raise _illegal(pod, PodState.ASSIGNED)
            if pod.used:  # held for its owner (a used pod is never unheld idle)
                key = pod.held_key  # `_unindex_held`, inline: this is the claim's hot path
                assert key is not None, pod
                held = index.held_by_session
                bucket = held[key]
                del bucket[pod.name]
                if not bucket:
                    del held[key]
                mine = index.held_by_caller[key[0]]
                del mine[pod.name]
                if not mine:
                    del index.held_by_caller[key[0]]
                if path in _RETIRES_AFTER_JOB:
                    pod.retire_after = RetireReason.SESSION_BOUNDARY
            elif pod.name in index.fresh:  # the common never-used pod, without two calls
                _discard(index.fresh, pod.name)
            else:
                self._unindex_idle(index, pod)
            pod.state = claimed
            pod.job = job
            if pod.group is not None:
                grp = self._groups[pod.group]
                if gpu_gate.enter(grp, pod.name):
                    self._make_active(grp, pod)
                else:
                    pod.gated = True
        n = len(chosen)
        self._job_session[job] = req
        leased = index.leased_by_caller
        leased[caller] = leased.get(caller, 0) + n
        if index.gpu:
            gpus = n * index.spec.accelerators_per_pod
            self._caller_gpus[caller] = self._caller_gpus.get(caller, 0) + gpus
        if n == 1:  # the loop's one pod
            self._jobs[job] = pod.solo
            return Lease(
                job, caller, req.pool, (LeasedPod(pod.name, path, chosen[0][2], pod.gated),)
            )
        self._jobs[job] = tuple([c[0].name for c in chosen])
        return Lease(
            job, caller, req.pool, tuple(LeasedPod(p.name, pa, r, p.gated) for p, pa, r in chosen)
        )

    # ------------------------------------------------------------------ after the claim

    def unclaim(self, job: str) -> list[Promotion]:
        """The durable commit failed: return every pod as it was before the claim. A pod that
        took its GPU's gate gives it back, which may promote another job's waiting pod."""
        promoted: list[Promotion] = []
        names = self._take_job(job)
        del self._job_session[job]
        for name in names:
            pod = self._pods[name]
            index = self._pools[pod.pool]
            pod.job = None
            if pod.retire_after is RetireReason.SESSION_BOUNDARY:
                pod.retire_after = None
            promoted.extend(self._leave_gate(pod))
            pod.gated = False
            if pod.used:  # it was held for its owner (a used pod is never unheld idle)
                self._set_state(pod, PodState.HELD)
                self._index_held(index, pod)
            else:
                self._set_state(pod, PodState.IDLE)
                self._index_fresh(index, pod)
        return promoted

    def retire_after_job(self, job: str, reason: RetireReason) -> tuple[str, ...]:
        """The job's pods retire when its attempt is over (capacity reclaimed by its owner),
        whatever hold or template they would otherwise keep."""
        names = self._jobs.get(job, ())
        for name in names:
            self._pods[name].retire_after = reason
        return names

    def mark_running(self, name: str) -> None:
        """The attempt launched on this pod; only the gate holder may run."""
        pod = self._pod(name)
        if pod.gated:
            raise InvalidTransitionError(
                f"pod {name} waits for its GPU's gate and may not run yet", field="name"
            )
        self._set_state(pod, PodState.RUNNING)

    def ending(self, job: str) -> None:
        """The job's verdict is out before its pods' reset: until `release`, its session's
        claims wait for the pods that will come back held for it, rather than take another
        pod (or have one created) for the few milliseconds a reset takes."""
        names = self._jobs.get(job)
        if names is None or job in self._ending:
            return
        req = self._job_session[job]
        pool = self._pods[names[0]].pool
        spec = self._pools[pool].spec
        held = sum(release_reason(self._pods[n], spec) is None for n in names)
        if held:
            resetting = self._pools[pool].resetting
            resetting[req.session] = resetting.get(req.session, 0) + held
            self._ending[job] = (pool, req.session, held)

    def resetting(self, pool: str) -> dict[SessionKey, int]:
        """Per session, the pool's pods being reset that will come back held for it."""
        return dict(self._pools[pool].resetting)

    def release(self, job: str, now: float, unclean: Collection[str] = ()) -> ReleaseResult:
        """The job's attempt is over and each pod's reset reported (`unclean` names the pods
        whose reset could not be confirmed). Apply holds and retirements; pass GPU gates on."""
        names = self._take_job(job)
        req = self._job_session.pop(job)
        caller, queue, tag = req.caller, req.queue, req.tag
        result = ReleaseResult()
        for name in names:
            pod = self._pods[name]
            index = self._pools[pod.pool]
            spec = index.spec
            pod.job = None
            pod.gated = False
            pod.used = True
            pod.owner, pod.queue, pod.tag = caller, queue, tag
            reason = RetireReason.UNCLEAN_RESET if name in unclean else release_reason(pod, spec)
            if reason is RetireReason.STALE_TEMPLATE:
                # An old-template pod drains through the scaler, which retires at most
                # `drain_budget` at once; until then it serves nothing new.
                self._set_state(pod, PodState.STALE)
                pod.retire_after = reason
                pod.idle_since = now
                result.promoted.extend(self._leave_gate(pod))
                continue
            if reason is not None:
                self._set_state(pod, PodState.RETIRING)
                pod.retire_after = reason
                result.retired.append(Retired(name, reason))
                if reason is not RetireReason.UNCLEAN_RESET or not self._holds_gate(pod):
                    result.promoted.extend(self._leave_gate(pod))
                # else: its processes may survive, so the gate passes on only at deletion.
                continue
            self._set_state(pod, PodState.HELD)
            pod.hold_until = now + spec.hold_seconds
            pod.idle_since = now
            self._index_held(index, pod)
            self._holds.add(pod.hold_until, name)
            result.held.append((name, pod.hold_until))
            result.promoted.extend(self._leave_gate(pod))
        return result

    def expire_holds(self, now: float) -> list[Retired]:
        """Retire every pod whose owner hold has run out."""
        out: list[Retired] = []
        for until, name in self._holds.due(now):
            pod = self._pods.get(name)
            if pod is None or pod.state is not PodState.HELD or pod.hold_until != until:
                continue  # reclaimed, retired or re-held since: a stale heap entry
            self._unindex_available(self._pools[pod.pool], pod)
            self._set_state(pod, PodState.RETIRING)
            pod.retire_after = RetireReason.HOLD_EXPIRED
            out.append(Retired(name, RetireReason.HOLD_EXPIRED))
        return out

    def exclusivity_verified(self, groups: Iterable[str]) -> None:
        """A sweep found every share of these GPUs held by their own group: promotions may
        go ahead."""
        self.unverified.difference_update(groups)

    def restore(self, snap: PodSnapshot) -> Pod:
        """Rebuild a pod after a broker restart from the backend's annotations."""
        pod = self.add_pod(
            snap.name,
            snap.pool,
            snap.created_at,
            role=snap.role,
            group=snap.group,
            single_use=snap.single_use,
            image=snap.image,
        )
        index = self._pools[snap.pool]
        if pod.group is not None and index.gpu:
            self.unverified.add(pod.group)
        pod.template = snap.template
        pod.owner, pod.queue, pod.tag, pod.used = snap.owner, snap.queue, snap.tag, snap.used
        pod.retire_after = snap.retire_after
        pod.idle_since = snap.idle_since if snap.idle_since is not None else snap.created_at
        state = snap.state
        if state is PodState.IDLE and snap.used:
            state = PodState.HELD if snap.owner is not None else PodState.RETIRING
        if state is PodState.HELD:
            pod.state = PodState.HELD
            pod.hold_until = snap.hold_until
            self._index_held(index, pod)
            self._holds.add(pod.hold_until, pod.name)
        elif state is PodState.IDLE:
            pod.state = PodState.IDLE
            self._index_fresh(index, pod)
        elif state in (PodState.ASSIGNED, PodState.RUNNING):
            if snap.job is None or snap.owner is None:
                raise InvalidTransitionError(f"busy pod {snap.name} needs job and owner")
            pod.state = state
            pod.job = snap.job
            prior = self._jobs.get(snap.job, ())
            self._jobs[snap.job] = (*prior, pod.name)
            self._job_session[snap.job] = ClaimRequest(
                snap.job, snap.owner, snap.pool, snap.queue or "default", snap.tag or ""
            )
            index.leased_by_caller[snap.owner] = index.leased_by_caller.get(snap.owner, 0) + 1
            gpus = index.spec.accelerators_per_pod
            if gpus:
                self._caller_gpus[snap.owner] = self._caller_gpus.get(snap.owner, 0) + gpus
            if pod.group is not None:
                self._groups[pod.group].gate = pod.name
        else:
            pod.state = state
        return pod

    # ------------------------------------------------------------------ reads

    def get(self, name: str) -> Pod | None:
        return self._pods.get(name)

    def job_pods(self, job: str) -> tuple[str, ...]:
        return self._jobs.get(job, ())

    def pool_pods(self, pool: str) -> list[Pod]:
        """A consistent list of the pool's pod records (read-only) for the scaler."""
        index = self._pool(pool)
        pods = self._pods
        return [pods[name] for name in index.pods]

    def fresh_count(self, pool: str) -> int:
        """Never-used idle pods any caller's claim may take (what a gang reservation keeps)."""
        return len(self._pool(pool).fresh)

    def caller_held(self, pool: str, caller: str, now: float) -> int:
        """The caller's own held pods whose hold still runs (its next claim may reuse them)."""
        mine = self._pool(pool).held_by_caller.get(caller, {})
        pods = self._pods
        return sum(1 for name in mine if pods[name].hold_until > now)

    def pool_groups(self, pool: str) -> list[Group]:
        self._pool(pool)
        return [g for g in self._groups.values() if g.pool == pool]

    def group_members(self, group: str) -> list[Pod]:
        """The pods on one physical GPU, active ones first (a standby's card is theirs)."""
        grp = self._groups.get(group)
        if grp is None:
            return []
        pods = [self._pods[name] for name in sorted(grp.pods)]
        return sorted(pods, key=lambda pod: pod.role is not PodRole.ACTIVE)

    def __len__(self) -> int:
        return len(self._pods)

    def caller_gpus(self, caller: str) -> int:
        return self._caller_gpus.get(caller, 0)

    def caller_pods(self, pool: str, caller: str) -> int:
        return self._pool(pool).leased_by_caller.get(caller, 0)

    # ------------------------------------------------------------------ internals

    def _pool(self, pool: str) -> _PoolIndex:
        index = self._pools.get(pool)
        if index is None:
            raise UnknownPoolError(f"unknown pool {pool!r}", field="pool")
        return index

    def _pod(self, name: str) -> Pod:
        pod = self._pods.get(name)
        if pod is None:
            raise NotFoundError(f"pod {name} is not tracked", field="name")
        return pod

    def _set_state(self, pod: Pod, state: PodState) -> None:
        if state not in POD_TRANSITIONS[pod.state]:
            raise _illegal(pod, state)
        pod.state = state

    def _take_job(self, job: str) -> tuple[str, ...]:
        names = self._jobs.pop(job, None)
        if names is None:
            raise NotFoundError(f"job {job} holds no lease", field="job")
        ending = self._ending.pop(job, None)
        if ending is not None:
            pool, session, count = ending
            resetting = self._pools[pool].resetting
            left = resetting[session] - count
            if left:
                resetting[session] = left
            else:
                del resetting[session]
        caller = self._job_session[job].caller
        first = self._pods[names[0]]
        index = self._pools[first.pool]
        left = index.leased_by_caller[caller] - len(names)
        if left:
            index.leased_by_caller[caller] = left
        else:
            del index.leased_by_caller[caller]
        gpus = len(names) * index.spec.accelerators_per_pod
        if gpus:
            left = self._caller_gpus[caller] - gpus
            if left:
                self._caller_gpus[caller] = left
            else:
                del self._caller_gpus[caller]
        return names

    def _index_fresh(self, index: _PoolIndex, pod: Pod) -> None:
        if pod.dedicated:
            key = (pod.single_use, pod.image)
            bucket = index.dedicated_idle.get(key)
            if bucket is None:
                bucket = index.dedicated_idle[key] = {}
            bucket[pod.name] = None
        elif pod.role is PodRole.STANDBY:
            index.standby[pod.name] = None
        else:
            index.fresh[pod.name] = None

    def _index_held(self, index: _PoolIndex, pod: Pod) -> None:
        owner = pod.owner
        assert owner is not None and pod.queue is not None and pod.tag is not None
        key = pod.held_key = (owner, pod.queue, pod.tag, pod.image)
        bucket = index.held_by_session.get(key)
        if bucket is None:
            bucket = index.held_by_session[key] = {}
        bucket[pod.name] = None
        mine = index.held_by_caller.get(owner)
        if mine is None:
            mine = index.held_by_caller[owner] = {}
        mine[pod.name] = None

    def _unindex_available(self, index: _PoolIndex, pod: Pod) -> None:
        """Remove a pod from whichever claimable bucket it sits in (if any)."""
        state = pod.state
        if state is PodState.IDLE:
            self._unindex_idle(index, pod)
        elif state is PodState.HELD:
            self._unindex_held(index, pod)

    @staticmethod
    def _unindex_idle(index: _PoolIndex, pod: Pod) -> None:
        """Remove an idle (never-used) pod from its bucket."""
        if pod.dedicated:
            kind = (pod.single_use, pod.image)
            fresh = index.dedicated_idle[kind]
            del fresh[pod.name]
            if not fresh:
                del index.dedicated_idle[kind]
        elif pod.role is PodRole.STANDBY:
            index.standby.pop(pod.name, None)
        else:
            _discard(index.fresh, pod.name)

    @staticmethod
    def _unindex_held(index: _PoolIndex, pod: Pod) -> None:
        """Remove a held pod from its session's and its owner's buckets."""
        key = pod.held_key
        assert key is not None, pod
        name = pod.name
        bucket = index.held_by_session[key]
        del bucket[name]
        if not bucket:
            del index.held_by_session[key]
        mine = index.held_by_caller[key[0]]
        del mine[name]
        if not mine:
            del index.held_by_caller[key[0]]

    def _make_active(self, grp: Group, pod: Pod) -> None:
        """Promotion: the gate holder becomes the group's active pod; the previous active
        keeps its hold (or retires) as a zero-VRAM member of the group."""
        if pod.role is PodRole.ACTIVE:
            return
        index = self._pools[pod.pool]
        for other_name in grp.pods:
            other = self._pods[other_name]
            if other.role is PodRole.ACTIVE:
                idle_fresh = other.state is PodState.IDLE
                if idle_fresh:
                    self._unindex_available(index, other)
                other.role = PodRole.STANDBY
                if idle_fresh:
                    self._index_fresh(index, other)
        pod.role = PodRole.ACTIVE

    def _holds_gate(self, pod: Pod) -> bool:
        return pod.group is not None and self._groups[pod.group].gate == pod.name

    def _leave_gate(self, pod: Pod) -> list[Promotion]:
        """The pod gives up its GPU's gate (or its place behind it)."""
        if pod.group is None:
            return []
        grp = self._groups[pod.group]
        taker = gpu_gate.leave(grp, pod.name)
        return [] if taker is None else self._promote(grp, taker)

    def _promote(self, grp: Group, name: str) -> list[Promotion]:
        """Pod `name` has just taken its GPU's gate: it becomes the card's active pod, and its
        job may launch once none of its pods waits for a gate any more."""
        pod = self._pods[name]
        pod.gated = False
        self._make_active(grp, pod)
        job = pod.job
        assert job is not None
        launchable = not any(self._pods[p].gated for p in self._jobs[job])
        return [Promotion(job, name, launchable)]

    # ------------------------------------------------------------------ self-check

    def check_invariants(self) -> None:
        """Raise AssertionError if any index disagrees with the records (tests call this)."""
        seen_jobs: dict[str, list[str]] = {}
        for name, pod in self._pods.items():
            index = self._pools[pod.pool]
            assert name in index.pods
            in_fresh = (
                name in index.fresh
                or name in index.standby
                or any(name in b for b in index.dedicated_idle.values())
            )
            assert in_fresh == (pod.state is PodState.IDLE), pod
            in_held = any(name in b for b in index.held_by_session.values())
            assert in_held == (pod.state is PodState.HELD), pod
            if pod.state is PodState.HELD:
                assert pod.used and pod.owner is not None
            if pod.state is PodState.IDLE:
                assert not pod.used, pod
            if pod.state in (PodState.ASSIGNED, PodState.RUNNING):
                assert pod.job is not None
                seen_jobs.setdefault(pod.job, []).append(name)
            else:
                assert pod.job is None, pod
            if pod.group is not None:
                assert name in self._groups[pod.group].pods
        assert {j: sorted(p) for j, p in seen_jobs.items()} == {
            j: sorted(p) for j, p in self._jobs.items()
        }
        resetting: dict[tuple[str, SessionKey], int] = {}
        for job, (pool, session, count) in self._ending.items():
            assert job in self._jobs and count > 0, job
            resetting[pool, session] = resetting.get((pool, session), 0) + count
        assert resetting == {
            (pool, session): count
            for pool, index in self._pools.items()
            for session, count in index.resetting.items()
        }
        for grp in self._groups.values():
            running = [p for p in grp.pods if self._pods[p].state is PodState.RUNNING]
            assert len(running) <= 1, grp.name
            if running:
                assert grp.gate == running[0]
            actives = [p for p in grp.pods if self._pods[p].role is PodRole.ACTIVE]
            assert len(actives) <= 1, grp.name
            if grp.waiting is not None:
                assert self._pods[grp.waiting].gated
                assert grp.gate is not None
