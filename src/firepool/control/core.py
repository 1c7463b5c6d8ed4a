"""The broker core: every rule of the job path, as events in and actions out.

Both drivers run this one object. The service (`service/`) executes its actions with real
I/O on the asyncio loop; the simulator (`sim/`) executes them in virtual time. Neither holds a
rule of either paper: which job claims which pods and in which order, when an elastic job may
claim (only once a round has sized it), what the scaler creates and retires and how budget is
reserved for it, holds, retirements, standby promotions through the per-GPU gate, the attempt
verdict and the retry, and the experiments' failure stream are decided here.

The driver reports each outcome as an event (`pod_ready`, `committed`, `attempt_over`,
`verdict_recorded`, ...) and executes whatever actions the call returns, in order.

Skipping work that cannot change anything: every change to the tracker, the queue and the
ledger goes through this object, so it knows when a pool's inputs are untouched since the last
pass. A failed claim is not retried until something it could use appears (on a GPU pool any
change to its pods; on a CPU pool a never-used pod, or a release by the same caller), and a
scaler pass whose plan was empty is skipped until its pods, queue or headroom change or the
plan's `stable_until` comes. `check_skips=True` computes the skipped work anyway and asserts it
would have changed nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from firepool.control.actions import (
    DISPATCH,
    Action,
    CreatePod,
    DeletePod,
    FailQueued,
    HoldPod,
    InjectFailure,
    LaunchAttempt,
    Reconcile,
    RecordVerdict,
    StartAttempt,
    StopAttempt,
    StopMode,
)
from firepool.control.admission import admit
from firepool.control.borrowing import borrowed_limit, plan_giveback
from firepool.control.budgets import BudgetLedger
from firepool.control.dispatch import (
    AttemptEnd,
    QueuedJob,
    Verdict,
    dispatch_pass,
    judge,
    no_retry_after_cancel,
)
from firepool.control.elastic_jobs import ElasticJobs, ElasticRules, ElasticStep
from firepool.control.records import (
    ClaimRequest,
    Lease,
    PodSnapshot,
    Promotion,
    ReleaseResult,
    Retired,
    RetireReason,
    Ticket,
    Wait,
    WaitReason,
)
from firepool.control.recovery import exclusive_groups
from firepool.control.reservations import GangReservations, ReservationRules
from firepool.control.rollout import RolloutProgress, applied_spec, rollout_progress
from firepool.control.scaler import QueuedDemand, ScalerConfig, plan
from firepool.control.tracker import Tracker
from firepool.model import (
    JobErrorClass,
    JobKind,
    JobState,
    PodRole,
    PodState,
    PoolSpec,
    UnknownPoolError,
)
from firepool.scheduling import make_policy

_NO_CAPACITY = WaitReason.NO_CAPACITY
_STARTING = PodState.STARTING
_RETIRING = PodState.RETIRING
_ELASTIC = JobKind.ELASTIC
_QUEUED = JobState.QUEUED


@dataclass(frozen=True, slots=True)
class CoreConfig:
    scaler: ScalerConfig = field(default_factory=ScalerConfig)
    #: A limit on the GPUs one caller may hold across every pool (None: none).
    max_gpus_per_caller: int | None = None
    #: Elastic jobs' rounds; None runs no round policy (every elastic job fails Unschedulable).
    elastic: ElasticRules | None = field(default_factory=ElasticRules)
    #: Compute skipped claims and scaler passes anyway and assert they would change nothing.
    check_skips: bool = False
    #: Age-keyed gang reservations (control/reservations.py); None: gangs reserve nothing.
    gang_reservations: ReservationRules | None = None


@dataclass(slots=True)
class _Queued:
    ticket: Ticket
    entry: QueuedJob


@dataclass(slots=True)
class Live:
    """An attempt between its claim and its verdict."""

    ticket: Ticket
    lease: Lease
    committed: bool = False
    ungated: bool = False  # every pod holds its GPU's gate (or needs none)
    launched: bool = False  # LaunchAttempt was issued
    started: float = 0.0  # when it claimed its pods (reclaims preempt the youngest first)
    judged: bool = False  # its verdict went out before its pods' reset (`judge_before_reset`)
    cancel_requested: bool = False  # the caller asked for no more attempts


class BrokerCore:
    """One broker's state: the tracker, the ledger, the queue, live attempts, elastic rounds."""

    def __init__(
        self,
        pools: Iterable[PoolSpec],
        ledger: BudgetLedger,
        *,
        new_name: Callable[[str], str],
        config: CoreConfig | None = None,
        start: float = 0.0,
    ) -> None:
        self.config = config = config or CoreConfig()
        self.specs = {p.name: p for p in pools}
        self.tracker = Tracker(self.specs.values(), max_gpus_per_caller=config.max_gpus_per_caller)
        self.ledger = ledger
        self.new_name = new_name
        self.queued: dict[str, _Queued] = {}
        self.running: dict[str, Live] = {}
        self.elastic: ElasticJobs | None = None
        if config.elastic is not None:
            self.elastic = ElasticJobs(
                self.specs, config.elastic, make_policy(config.elastic.policy), start=start
            )
        self.reservations: GangReservations | None = None
        if config.gang_reservations is not None:
            self.reservations = GangReservations(config.gang_reservations)
        self.injected = 0  # failures delivered to a launched attempt (experiments)
        self.passes_skipped = 0
        self.claims_skipped = 0
        self._check = config.check_skips
        names = list(self.specs)
        self._gen = dict.fromkeys(names, 0)  # any change to a pool's pods
        self._queue_gen = dict.fromkeys(names, 0)
        self._fresh_gen = dict.fromkeys(names, 0)  # a never-used pod may have appeared
        self._caller_gen: dict[tuple[str, str], int] = {}  # a caller's pods were released
        self._quiet: dict[str, tuple[int, int, int | None, float]] = {}
        self._no_capacity: dict[str, tuple[tuple[int, int, int], Wait]] = {}
        self._gpu_pools = frozenset(p.name for p in self.specs.values() if p.is_gpu)
        self._rolling: set[str] = set()  # pools with pods of an old template
        self.edited: set[str] = set()  # pools running an admin's edit, not the catalog's spec
        # Jobs preempted to give borrowed capacity back. Their `Reclaimed` attempts are
        # counted by the store (`Ticket.reclaims`), so they never use up `max_retries`.
        self._reclaiming: set[str] = set()
        # Each resource's budget of the broker's own, as its ledger had it before the first
        # reading of borrowable capacity raised it (`borrowable_read`).
        self._own_budget: dict[str, int | None] = {}
        self.reclaimed = 0  # attempts preempted that way
        self.units_asked = 0  # units asked back that could go (beyond what was leaving anyway)
        self.units_given = 0  # units the broker's give-back plans freed for them
        # Jobs whose RecordVerdict is out and not yet reported stored, and the deletions of
        # their attempts' pods that wait for it (`_after_verdict`).
        self._unrecorded: set[str] = set()
        self._deletes_after: dict[str, list[DeletePod]] = {}

    # ------------------------------------------------------------------ the queue

    def submit(self, ticket: Ticket, now: float) -> list[Action]:
        """A job is QUEUED in the store (new, or re-read by a driver's resync)."""
        job = ticket.job
        if job in self.running:
            return []
        spec = ticket.spec
        self.queued[job] = _Queued(ticket, _entry(ticket, spec.pods))
        pool_gen = self._queue_gen
        if spec.pool in pool_gen:
            pool_gen[spec.pool] += 1
        if spec.kind is _ELASTIC and self.elastic is not None:
            self.elastic.submit(ticket, now)
        return [DISPATCH]

    def resync(self, tickets: Iterable[Ticket], now: float) -> list[Action]:
        """The store's queue, re-read by the driver's fallback tick: it replaces the core's
        (a job cancelled or finished elsewhere leaves it; one missed is added)."""
        fresh = {t.job: t for t in tickets if t.job not in self.running}
        for job in [j for j in self.queued if j not in fresh]:
            self._dequeue(job)
        actions: list[Action] = []
        for job, ticket in fresh.items():
            if job not in self.queued:
                actions += self.submit(ticket, now)
        return actions or [DISPATCH]

    def cancel(self, job: str, now: float, *, terminal: bool) -> list[Action]:
        """A cancel request; `terminal` when the store already ended the job (it was queued)."""
        actions: list[Action] = []
        live = self.running.get(job)
        if live is not None:
            live.cancel_requested = True  # its verdict, whenever judged, retries no more
            actions.append(StopAttempt(job, StopMode.CANCEL))
        elif terminal:
            self._dequeue(job)
        if self.elastic is not None:
            actions += self._elastic(self.elastic.cancelled(job, now))
        return actions

    def _dequeue(self, job: str) -> _Queued | None:
        queued = self.queued.pop(job, None)
        if queued is not None:
            self._no_capacity.pop(job, None)
            if self.reservations is not None:
                self.reservations.close(job)
            pool = queued.ticket.spec.pool
            if pool in self._queue_gen:
                self._queue_gen[pool] += 1
        return queued

    # ------------------------------------------------------------------ dispatch

    def dispatch(self, now: float) -> list[Action]:
        """One pass over the queue in priority order: StartAttempt for each job that claimed
        its full pod set, Reconcile for each pool where a job found no capacity."""
        actions: list[Action] = []
        todo: list[QueuedJob] = []
        skipped: list[Wait] = []
        known = self._no_capacity
        elastic = self.elastic
        for job, queued in list(self.queued.items()):
            spec = queued.ticket.spec
            if spec.pool not in self.specs:
                actions += self._fail_queued(
                    job,
                    JobErrorClass.UNKNOWN_POOL,
                    f"pool {spec.pool!r} is not in this broker's catalog",
                    now,
                )
                continue
            entry = queued.entry
            if spec.kind is _ELASTIC:
                if elastic is None:
                    actions += self._fail_queued(
                        job, JobErrorClass.UNSCHEDULABLE, "this broker runs no round policy", now
                    )
                    continue
                elastic.submit(queued.ticket, now)  # a no-op unless it was missed
                world = elastic.world(job)
                if world is None:
                    continue  # waits for a round to size it
                if entry.request.pods != world:
                    entry = queued.entry = _entry(queued.ticket, world)
            seen = known.get(job)
            if seen is not None and seen[0] == self._claim_inputs(entry.request):
                skipped.append(seen[1])
                self.claims_skipped += 1
                if not self._check:
                    continue
            todo.append(entry)
        result = dispatch_pass(self.tracker, todo, now, self.reservations)
        if self._check:
            placed = {lease.job for lease in result.leases}
            wrong = [w.job for w in skipped if w.job in placed]
            if wrong:
                raise AssertionError(f"skipped claims that would have succeeded: {wrong}")
            skipped = []
        queue = self.queued
        for w in result.waiting:
            if w.reason is _NO_CAPACITY:
                known[w.job] = (self._claim_inputs(queue[w.job].entry.request), w)
        for lease in result.leases:
            actions.append(self._claimed(lease, now))
        waiting = result.waiting
        if skipped:
            waiting = waiting + skipped
            if len(self.specs) > 1:  # the wake-up order below follows the queue order
                waiting.sort(key=lambda w: queue[w.job].entry.order_key)
        # An ordered set: the wake-up order must not depend on string hashing.
        pools = dict.fromkeys(
            queue[w.job].ticket.spec.pool for w in waiting if w.reason is _NO_CAPACITY
        )
        actions += [Reconcile(pool) for pool in pools]
        return actions

    def _claim_inputs(self, req: ClaimRequest) -> tuple[int, int, int]:
        """Generations of what a failed claim of `req` could change with (see the module)."""
        pool = req.pool
        if pool in self._gpu_pools:
            return (self._gen[pool], -1, req.pods)
        return (self._fresh_gen[pool], self._caller_gen.get((pool, req.caller), 0), req.pods)

    def _claimed(self, lease: Lease, now: float) -> StartAttempt:
        queued = self.queued.pop(lease.job)
        self._no_capacity.pop(lease.job, None)
        pool = lease.pool
        self._gen[pool] += 1
        self._queue_gen[pool] += 1
        ticket = queued.ticket
        self.running[lease.job] = Live(ticket, lease, ungated=lease.launchable, started=now)
        if ticket.spec.kind is _ELASTIC and self.elastic is not None:
            self.elastic.dispatched(lease.job, ticket.attempt)
        return StartAttempt(ticket, lease)

    def committed(self, job: str, now: float) -> list[Action]:
        """The RUNNING transition is durable: launch now, or when the GPU gate passes."""
        live = self.running.get(job)
        if live is None or live.committed:
            return []
        live.committed = True
        return self._launch_if_ready(live)

    def commit_lost(self, job: str, now: float) -> list[Action]:
        """The commit lost a race (a cancel, another broker): the pods go back as they were;
        the store has the job's truth, and the driver re-reads it."""
        live = self.running.pop(job, None)
        if live is None:
            return []
        promoted = self.tracker.unclaim(job)
        pool, caller = live.lease.pool, live.ticket.caller
        self._gen[pool] += 1
        self._fresh_gen[pool] += 1
        self._bump_caller(pool, caller)
        if self.elastic is not None:
            self.elastic.lost_race(job)
        return [*self._promoted(promoted), DISPATCH]

    def _launch_if_ready(self, live: Live) -> list[Action]:
        if live.launched or not (live.committed and live.ungated):
            return []
        live.launched = True
        mark = self.tracker.mark_running
        for pod in live.lease.pods:
            mark(pod.name)
        self._gen[live.lease.pool] += 1
        return [LaunchAttempt(live.ticket.job)]

    def _promoted(self, promotions: Iterable[Promotion]) -> list[Action]:
        actions: list[Action] = []
        for promotion in promotions:
            live = self.running.get(promotion.job)
            if live is not None and promotion.job_launchable:
                live.ungated = True
                actions += self._launch_if_ready(live)
        return actions

    # ------------------------------------------------------------------ an attempt's end

    def judge_before_reset(self, job: str, end: AttemptEnd, now: float) -> list[Action]:
        """Every rank exited and the attempt's whole output is stored, before the pods' reset.
        A final verdict (no retry) of a task job goes out now: its caller learns the result
        while the pods are reset, and the job's session waits for them meanwhile
        (`Tracker.ending`). A retry, an elastic job or a reclaimed attempt is judged with the
        reset as before (`attempt_over`): a retry must not queue while its pods are leased."""
        live = self.running.get(job)
        if live is None or live.judged or job in self._reclaiming:
            return []
        if live.ticket.spec.kind is _ELASTIC and self.elastic is not None:
            return []
        verdict = self._judge(live.ticket, end, cancel_requested=live.cancel_requested)
        if verdict.retry:
            return []
        live.judged = True
        self.tracker.ending(job)
        self._gen[live.lease.pool] += 1  # the scaler's demand changed (see `_demand`)
        self._unrecorded.add(job)
        return [RecordVerdict(live.ticket, verdict)]

    def attempt_over(
        self, job: str, end: AttemptEnd, unclean: Iterable[str], now: float
    ) -> list[Action]:
        """Every rank exited (or was stopped) and every pod's reset reported; `unclean` names
        the pods whose reset could not be confirmed. Releases the pods (holds, retirements,
        gate promotions) and judges the attempt, unless `judge_before_reset` already did."""
        live = self.running.pop(job, None)
        if live is None:
            return []
        released = self.tracker.release(job, now, unclean=list(unclean))
        pool = live.lease.pool
        self._gen[pool] += 1
        self._bump_caller(pool, live.ticket.caller)
        reclaimed = job in self._reclaiming
        self._reclaiming.discard(job)
        verdicts: list[Action] = []
        if not live.judged:  # (a job reclaimed after its verdict ended on its own)
            verdict = self._judge(live.ticket, end)
            if reclaimed and verdict.state is not JobState.SUCCEEDED:
                self.reclaimed += 1
                verdict = reclaimed_verdict(end)
            verdict = self.verdict_refused(verdict, cancel_requested=live.cancel_requested)
            self._unrecorded.add(job)
            verdicts.append(RecordVerdict(live.ticket, verdict))
        actions = self._after_verdict(job, self._released(released))
        actions += verdicts
        actions.append(Reconcile(pool))  # restage standbys, retire, refill floors
        actions.append(DISPATCH)
        return actions

    def _judge(
        self, ticket: Ticket, end: AttemptEnd, *, cancel_requested: bool = False
    ) -> Verdict:
        if ticket.spec.kind is _ELASTIC and self.elastic is not None:
            verdict = self.elastic.judge(ticket, end)
        else:
            verdict = judge(end, ticket.failures, ticket.spec.max_retries)
        return self.verdict_refused(verdict, cancel_requested=cancel_requested)

    def verdict_refused(self, verdict: Verdict, *, cancel_requested: bool) -> Verdict:
        """The store refused a verdict's write because the job's row changed under it (a
        cancel request bumps its version; so does an earlier try that committed before its
        connection broke), and the row still holds this attempt: what to write instead. The
        cancel may have reached another broker's API, so the store's flag decides, not this
        core's `cancel` event."""
        return no_retry_after_cancel(verdict) if cancel_requested else verdict

    def _after_verdict(self, job: str, actions: list[Action]) -> list[Action]:
        """Keep back the deletions of `job`'s pods while its verdict is not stored: a pod
        deleted first takes its agent's memory of the exit with it, and a broker killed in
        between would find the job RUNNING with its pods gone and run it again. They go out
        with `verdict_recorded` (or `verdict_unrecorded`)."""
        if job not in self._unrecorded:
            return actions
        kept = self._deletes_after.setdefault(job, [])
        out: list[Action] = []
        for action in actions:
            if isinstance(action, DeletePod):
                kept.append(action)
            else:
                out.append(action)
        return out

    def _released(self, released: ReleaseResult) -> list[Action]:
        actions: list[Action] = [HoldPod(pod, until) for pod, until in released.held]
        actions += [DeletePod(r.pod, r.reason) for r in released.retired]
        actions += self._promoted(released.promoted)
        return actions

    def verdict_recorded(self, ticket: Ticket, state: JobState, now: float) -> list[Action]:
        """The store holds the verdict: `ticket` as the store has the job now (a retry has
        its new attempt number), `state` its state (a cancel may have won the race). The
        attempt's pods held back for it may go now."""
        self._unrecorded.discard(ticket.job)
        actions: list[Action] = list(self._deletes_after.pop(ticket.job, ()))
        elastic = self.elastic
        if state is _QUEUED and not (ticket.spec.kind is _ELASTIC and elastic is not None):
            actions += self.submit(ticket, now)
        if ticket.spec.kind is _ELASTIC and elastic is not None:
            if state is _QUEUED:
                self.queued[ticket.job] = _Queued(ticket, _entry(ticket, ticket.spec.pods))
                self._queue_gen[ticket.spec.pool] += 1
            actions += self._elastic(elastic.exited(ticket, state, now))
        return actions

    def verdict_unrecorded(self, job: str, now: float) -> list[Action]:
        """The driver gave up writing the verdict (the job's row is gone, or kept changing
        under the write): the store has the job's truth, and the pods held back for the
        verdict go, since nothing will report it stored."""
        self._unrecorded.discard(job)
        return list(self._deletes_after.pop(job, ()))

    # ------------------------------------------------------------------ pods

    def reconcile(self, pool: str, now: float) -> list[Action]:
        """The scaler's pass for one pool: creates (budget reserved first) and retirements."""
        spec = self.specs[pool]
        gen, queue_gen = self._gen[pool], self._queue_gen[pool]
        headroom = self.ledger.headroom(spec.budget_resource)
        quiet = self._quiet.get(pool)
        skipped = (
            quiet is not None
            and quiet[0] == gen
            and quiet[1] == queue_gen
            and quiet[2] == headroom
            and now < quiet[3]
        )
        if skipped:
            self.passes_skipped += 1
            if not self._check:
                return []
        tracker = self.tracker
        scale = plan(
            spec,
            tracker.pool_pods(pool),
            tracker.pool_groups(pool) if spec.is_gpu else (),  # CPU plans read no groups
            self._demand(pool),
            now,
            config=self.config.scaler,
            headroom_units=headroom,
        )
        if scale.empty:
            self._quiet[pool] = (gen, queue_gen, headroom, scale.stable_until)
            return []
        if skipped:
            raise AssertionError(f"skipped a scaler pass of {pool} whose plan was not empty")
        self._quiet.pop(pool, None)
        self._gen[pool] += 1
        actions: list[Action] = []
        for order in admit(scale, spec, self.ledger, lambda: self.new_name(pool)):
            tracker.add_pod(
                order.pod,
                pool,
                now,
                role=order.role,
                group=order.group,
                single_use=order.single_use,
                image=order.image,
            )
            actions.append(CreatePod(order, self._peer(order.group, order.pod)))
        for retired in scale.retire:
            if tracker.retire(retired.pod, retired.reason):
                actions.append(DeletePod(retired.pod, retired.reason))
        return actions

    def _demand(self, pool: str) -> list[QueuedDemand]:
        """Queued jobs of the pool as the scaler counts them; an elastic job counts once a
        round has sized it (at its world size), not before; a job's pods that its session's
        pods now being reset will provide (`Tracker.ending`) do not count."""
        demand: list[QueuedDemand] = []
        elastic = self.elastic
        resetting = self.tracker.resetting(pool)
        for queued in self.queued.values():
            ticket = queued.ticket
            spec = ticket.spec
            if spec.pool != pool:
                continue
            pods = spec.pods
            if spec.kind is _ELASTIC:
                world = elastic.world(ticket.job) if elastic is not None else None
                if world is None:
                    continue
                pods = world
            if resetting and not spec.single_use:
                session = queued.entry.request.session
                coming = min(resetting.get(session, 0), pods)
                if coming:
                    resetting[session] -= coming
                    pods -= coming
                    if not pods:
                        continue
            demand.append(QueuedDemand(ticket.caller, pods, spec.single_use, spec.image))
        return demand

    def _peer(self, group: str | None, pod: str) -> str | None:
        """A live pod on the standby's card, whose devices the new standby is pinned to. The
        group keeps the name of the pod that founded it, which may be long gone."""
        if group is None:
            return None
        for member in self.tracker.group_members(group):
            if member.name != pod and member.state is not _RETIRING:
                return member.name
        return None

    def pod_ready(self, name: str, now: float) -> list[Action]:
        pod = self.tracker.get(name)
        if pod is None:
            return []
        if pod.state is not _STARTING:
            reason = pod.retire_after or RetireReason.SCALE_DOWN
            return [DeletePod(name, reason)] if pod.state is _RETIRING else []
        self.tracker.pod_ready(name, now)
        self._gen[pod.pool] += 1
        self._fresh_gen[pod.pool] += 1
        return [DISPATCH]

    def pod_failed(self, name: str, now: float) -> list[Action]:
        """The pod never became ready (or its backend gave up on it): it is never supply."""
        pod = self.tracker.get(name)
        if pod is not None and self.tracker.retire(name, RetireReason.POD_FAILED):
            self._gen[pod.pool] += 1
        return [DeletePod(name, RetireReason.POD_FAILED)]

    def pod_deleted(self, name: str, now: float) -> list[Action]:
        """The backend confirmed the pod is gone: release its budget, pass its gate on. The
        room it leaves wakes the scaler when a job of its pool waits for capacity (a job
        queued while the pool was full, e.g. by a caller that learned its last verdict before
        that job's single-use pod was deleted): no job waits for the dispatcher's fallback
        tick to find it."""
        pod = self.tracker.get(name)
        freed, promoted = self.tracker.pod_deleted(name)
        if freed is not None:
            self.ledger.release(freed)
        actions = self._promoted(promoted)
        if pod is not None:
            pool = pod.pool
            self._gen[pool] += 1
            if pool in self._rolling or self._waits_for_capacity(pool):
                actions.append(Reconcile(pool))  # (rolling: the next old pod may drain now)
        return actions

    def _waits_for_capacity(self, pool: str) -> bool:
        queued = self.queued
        return any(
            (q := queued.get(job)) is not None and q.ticket.spec.pool == pool
            for job in self._no_capacity
        )

    def tick(self, now: float) -> list[Action]:
        """Time passed: retire every pod whose owner hold ran out."""
        retired = self.tracker.expire_holds(now)
        actions = self._retire_expired(retired)
        if self.reservations is not None and self.reservations.expire(now):
            actions.append(DISPATCH)  # the pods a lapsed reservation kept are everyone's
        return actions

    def _retire_expired(self, retired: list[Retired]) -> list[Action]:
        actions: list[Action] = []
        for r in retired:
            pod = self.tracker.get(r.pod)
            if pod is not None:
                self._gen[pod.pool] += 1
            actions.append(DeletePod(r.pod, r.reason))
        return actions

    def retire_after(self, pod: str) -> RetireReason | None:
        """What a busy pod retires after (a recycled pod: its session boundary), for the
        annotations a restarted broker trusts."""
        tracked = self.tracker.get(pod)
        return tracked.retire_after if tracked is not None else None

    def _bump_caller(self, pool: str, caller: str) -> None:
        key = (pool, caller)
        self._caller_gen[key] = self._caller_gen.get(key, 0) + 1

    # ------------------------------------------------------------------ template rollout

    def set_pool(self, spec: PoolSpec, now: float) -> list[Action]:
        """An operator changed a pool's catalog entry. A new template marks the pool's old
        pods stale (idle ones at once, busy ones after their job); the scaler then drains them
        `drain_budget` at a time and creates replacements inside the ceiling and budget."""
        new = self.preview_pool(spec)
        self.specs[new.name] = new
        self.edited.add(new.name)
        self.tracker.set_pool(new)
        pool = new.name
        self._gen[pool] += 1
        self._fresh_gen[pool] += 1
        self._quiet.pop(pool, None)
        if not self.rollout(pool).done:
            self._rolling.add(pool)
        return [Reconcile(pool), DISPATCH]

    def preview_pool(self, spec: PoolSpec) -> PoolSpec:
        """The spec `set_pool(spec)` would run, changing nothing (a driver stores it before
        applying it); raises the typed error `set_pool` would."""
        current = self.specs.get(spec.name)
        if current is None:
            raise UnknownPoolError(
                f"pool {spec.name!r} is not in this broker's catalog", field="name"
            )
        return applied_spec(current, spec)

    def rollout(self, pool: str) -> RolloutProgress:
        """How far the pool's pods are on its current template."""
        progress = rollout_progress(self.specs[pool], self.tracker.pool_pods(pool))
        if progress.done:
            self._rolling.discard(pool)
        if pool in self.edited:
            progress = replace(progress, edited=True)
        return progress

    # ------------------------------------------------------------------ borrowed capacity

    def borrowable_read(self, reading: Mapping[str, int], now: float) -> list[Action]:
        """A capacity controller's reading: per resource, the units its owners reserved and
        are not using, which this broker may borrow. Each limit becomes the broker's own
        budget plus that (`control.borrowing.borrowed_limit`); a resource the reading no
        longer names lends nothing, and an unlimited one stays unlimited. Readings repeat."""
        actions: list[Action] = []
        for resource in sorted(set(reading) | set(self._own_budget)):
            if resource not in self._own_budget:
                self._own_budget[resource] = self.ledger.limit(resource)
            limit = borrowed_limit(self._own_budget[resource], reading.get(resource, 0))
            if limit is not None:
                actions += self.capacity_changed(resource, limit, now)
        return actions

    def capacity_changed(self, resource: str, limit: int | None, now: float) -> list[Action]:
        """The capacity controller's reading: the broker may hold `limit` units of
        `resource` (its own budget plus what it may borrow; None: no limit). Above the limit
        it gives back one unit per unit: idle pods first, then the youngest jobs, preempted
        with a `Reclaimed` verdict. A reading may repeat: what is already leaving is not given
        back twice, so the driver calls this on every poll."""
        before = self.ledger.headroom(resource)
        self.ledger.set_limit(resource, limit)
        pools = [s for s in self.specs.values() if s.budget_resource == resource]
        actions: list[Action] = []
        if limit is not None and self.ledger.used(resource) > limit:
            tracker = self.tracker
            giveback = plan_giveback(
                self.ledger.used(resource) - limit,
                pools,
                {s.name: tracker.pool_pods(s.name) for s in pools},
                {job: live.started for job, live in self.running.items()},
                self._reclaiming,
            )
            # Units still starting are asked again next pass, when they can go: count what
            # this pass could give, so given / asked above 1 is an over-release.
            self.units_asked += giveback.need - giveback.short
            self.units_given += giveback.freed
            for name in giveback.retire:
                pod = tracker.get(name)
                if pod is not None and tracker.retire(name, RetireReason.RECLAIMED):
                    self._gen[pod.pool] += 1
                    actions.append(DeletePod(name, RetireReason.RECLAIMED))
            for job in giveback.preempt:
                live = self.running.get(job)
                if live is None:
                    continue
                self._reclaiming.add(job)
                tracker.retire_after_job(job, RetireReason.RECLAIMED)
                actions.append(StopAttempt(job, StopMode.RECLAIM))
        if self.ledger.headroom(resource) != before:
            actions += [Reconcile(s.name) for s in pools]
        return actions

    # ------------------------------------------------------------------ elastic rounds

    def round_due(self, now: float) -> bool:
        return self.elastic is not None and self.elastic.round_due(now)

    def round(self, now: float) -> list[Action]:
        """Run an elastic round if one is due."""
        if self.elastic is None:
            return []
        step = self.elastic.round(now)
        return [] if step is None else self._elastic(step)

    def _elastic(self, step: ElasticStep) -> list[Action]:
        actions: list[Action] = [
            StopAttempt(job, StopMode.GRACEFUL) for job in step.stop if job in self.running
        ]
        for job, reason in step.unschedulable:
            if job in self.queued:
                actions += self._fail_queued(
                    job,
                    JobErrorClass.UNSCHEDULABLE,
                    f"no size of this elastic job can run here: {reason}",
                    None,
                )
        for failure in step.failures:
            live = self.running.get(failure.job_id)
            elastic = self.elastic
            if (
                live is not None
                and elastic is not None
                and elastic.live_attempt(failure.job_id) == failure.attempt
            ):
                actions.append(InjectFailure(failure.job_id, live.ticket.attempt, failure.at))
        if step.dispatch:
            actions.append(DISPATCH)
        return actions

    def failure_due(self, job: str, attempt: str) -> list[Action]:
        """An injected failure's time came: kill the attempt if it is still the live one and
        was launched (a failure drawn before the launch is not delivered)."""
        live = self.running.get(job)
        if live is None or live.ticket.attempt != attempt or not live.launched:
            return []
        self.injected += 1
        return [StopAttempt(job, StopMode.KILL)]

    def _fail_queued(
        self, job: str, error: JobErrorClass, message: str, now: float | None
    ) -> list[Action]:
        self._dequeue(job)
        actions: list[Action] = [FailQueued(job, error, message)]
        if self.elastic is not None and now is not None:
            actions += self._elastic(self.elastic.cancelled(job, now))
        return actions

    # ------------------------------------------------------------------ recovery

    def restore_pod(self, snap: PodSnapshot) -> None:
        """A pod a restarted broker found alive: back into the tracker with its hold, and its
        budget reserved again (an active pod and its standbys reserve once, as at create)."""
        spec = self.specs[snap.pool]
        self.tracker.restore(snap)
        holder = snap.group if spec.is_gpu else snap.name
        if snap.role is PodRole.ACTIVE and holder and not self.ledger.holds(holder):
            self.ledger.try_reserve(spec.budget_resource, holder, spec.units_per_pod)
        self._gen[snap.pool] += 1
        self._fresh_gen[snap.pool] += 1

    def reset_then_held(self, snap: PodSnapshot, now: float) -> list[Action]:
        """A pod of a job that ended during the outage, reset clean after the restart
        (`control.recovery.ResetThenHold`): back into the tracker and held for the job's
        session, as the release the broker did not live to make would have held it."""
        self.restore_pod(snap)
        return [HoldPod(snap.name, snap.hold_until)]

    def devices_listed(self, devices: Mapping[str, Sequence[str]], now: float) -> list[Action]:
        """A listing of every pod the backend has, with the devices each reports, while some
        restored GPUs are not verified yet: the ones it shows exclusively ours open
        (`control.recovery.exclusive_groups`)."""
        unverified = self.tracker.unverified
        members: dict[str, list[str]] = {}
        for spec in self.specs.values():
            if spec.is_gpu:
                for pod in self.tracker.pool_pods(spec.name):
                    if pod.group is not None and pod.group in unverified:
                        members.setdefault(pod.group, []).append(pod.name)
        opened = exclusive_groups(members, devices)
        return self.exclusivity_verified(opened, now) if opened else []

    def exclusivity_verified(self, groups: Iterable[str], now: float) -> list[Action]:
        """The sweep after a restart verified these GPUs: their standbys may be promoted."""
        self.tracker.exclusivity_verified(groups)
        for name, spec in self.specs.items():
            if spec.is_gpu:
                self._gen[name] += 1  # new supply: jobs that found none look again
        return [DISPATCH]

    def adopt(self, ticket: Ticket, lease: Lease) -> None:
        """A RUNNING job whose attempt a restarted broker re-attached: committed, launched."""
        self.running[ticket.job] = Live(ticket, lease, committed=True, ungated=True,
                                        launched=True)

    def recovery_lost(self, ticket: Ticket, now: float) -> list[Action]:
        """A RUNNING job whose attempt cannot be confirmed after a restart: its pods (if any
        are left) are released as unclean, and the attempt is judged lost, so the retry
        respects `max_retries` like any other failure."""
        actions: list[Action] = []
        self._unrecorded.add(ticket.job)  # its RecordVerdict is below: pods wait for it
        if self.tracker.job_pods(ticket.job):
            released = self.tracker.release(
                ticket.job, now, unclean=list(self.tracker.job_pods(ticket.job))
            )
            pool = ticket.spec.pool
            if pool in self._gen:
                self._gen[pool] += 1
            actions += self._after_verdict(ticket.job, self._released(released))
        # The one rule every attempt's end goes through: reclaims are no failures, and an
        # elastic job's resizes are none either (its rounds count its failures).
        verdict = self._judge(
            ticket,
            AttemptEnd(pod_lost=True, message="its attempt was lost while the broker was down"),
        )
        actions.append(RecordVerdict(ticket, verdict))
        return actions


def reclaimed_verdict(end: AttemptEnd) -> Verdict:
    """A preempted attempt on reclaimed capacity: the job goes back to the queue whatever
    its retries, since the owner's reclaim is no fault of the job's."""
    return Verdict(
        JobState.QUEUED,
        JobErrorClass.RECLAIMED,
        end.exit_code,
        "the borrowed capacity this attempt ran on was reclaimed by its owner",
    )


def _entry(ticket: Ticket, pods: int) -> QueuedJob:
    spec = ticket.spec
    submitted = ticket.submitted_at
    return QueuedJob(
        ClaimRequest(
            job=ticket.job,
            caller=ticket.caller,
            pool=spec.pool,
            queue=spec.queue,
            tag=spec.lease_tag,
            pods=pods,
            single_use=spec.single_use,
            image=spec.image,
            image_pinned=spec.image_is_pinned,
            queued_at=submitted,
        ),
        priority=spec.priority,
        submitted_at=submitted,
    )
