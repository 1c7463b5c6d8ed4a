"""The broker in virtual time: executes the control plane's decisions as the service does.

Every decision comes from `control/`: the dispatcher's queue order and claims
(`dispatch_pass` over the `Tracker`), the scaler's plan (`plan`), budget admission (`admit`
through the `BudgetLedger`), holds, retirements, standby promotions through the per-GPU gate,
and the attempt verdict (`judge`). This module only does what a driver does: commit to the
store, call the (virtual) backend, wait the venue's delays, and feed events back. As in the
service (`service/broker.py`), submissions, releases and pod readiness wake the dispatcher, a
fallback tick (3 s) runs it while jobs wait, and the scaler runs every `reconcile_s` and at once
after a release or when a dispatch pass leaves a job waiting for capacity.

The simulator makes every change to its tracker, queue and ledger itself, so it knows when a
pool's scaler inputs are untouched since the last pass. A pass whose plan was empty is then
skipped until one of them changes or the plan's `stable_until` (the next keep-alive expiry or
hold tenure) comes: the skipped pass would have computed the same empty plan, so runs are
identical with and without the skip (`check_skips=True` computes it anyway and asserts that).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from firepool.control.admission import admit
from firepool.control.budgets import BudgetLedger
from firepool.control.dispatch import AttemptEnd, QueuedJob, dispatch_pass, judge
from firepool.control.records import (
    ClaimRequest,
    Lease,
    Promotion,
    Retired,
    Wait,
    WaitReason,
)
from firepool.control.scaler import QueuedDemand, plan
from firepool.control.tracker import Tracker
from firepool.model import AcquisitionPath, JobSpec, PodState, PoolSpec
from firepool.sim.backend import VirtualBackend
from firepool.sim.loop import EventLoop
from firepool.sim.memstore import MemStore
from firepool.sim.venue import Venue
from firepool.store.records import JobRecord, PodBinding

_STANDBY = AcquisitionPath.STANDBY


@dataclass(slots=True)
class JobStats:
    """What one job saw; start latency is `first - submitted` (submit -> first instruction)."""

    job: str
    caller: str
    pool: str
    submitted: float
    duration: float
    assigned: float = -1.0
    launched: float = -1.0  # the pod starts the hand-off (after the GPU gate and promotion)
    first: float = -1.0
    finished: float = -1.0
    paths: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()
    on_done: Callable[[JobStats], None] | None = field(default=None, repr=False)

    @property
    def queue_wait(self) -> float:
        """Submit -> a pod starts taking the job (claim, per-GPU gate, standby promotion): the
        broker paper's queue wait, which for a standby includes its promotion."""
        return self.launched - self.submitted

    @property
    def start_latency(self) -> float:
        return self.first - self.submitted


@dataclass(frozen=True, slots=True)
class JobRequest:
    """A fixed-duration job as a workload submits it."""

    caller: str
    pool: str
    duration: float
    tag: str = ""
    queue: str = "default"
    single_use: bool = False
    pods: int = 1


class SimBroker:
    """One broker over some pools, a budget ledger and a virtual backend."""

    def __init__(
        self,
        loop: EventLoop,
        venue: Venue,
        pools: Iterable[PoolSpec],
        budgets: dict[str, int],
        rng: random.Random,
        *,
        reconcile_s: float = 30.0,
        dispatch_tick_s: float = 3.0,
        check_skips: bool = False,
    ) -> None:
        self.loop = loop
        self.venue = venue
        self.rng = rng
        self.specs = {p.name: p for p in pools}
        self.tracker = Tracker(self.specs.values())
        self.ledger = BudgetLedger(budgets)
        self.store = MemStore()
        self.backend = VirtualBackend(loop, venue, rng, self._pod_ready, self._pod_deleted)
        self.reconcile_s = reconcile_s
        self.dispatch_tick_s = dispatch_tick_s
        self._tick_pending = False
        self.queued: dict[str, QueuedJob] = {}
        self.stats: dict[str, JobStats] = {}
        self.records: dict[str, JobRecord] = {}
        self._names = (f"pod-{i}" for i in itertools.count())
        self._specs_cache: dict[tuple[str, str, str, bool, int], JobSpec] = {}
        self._dispatch_pending = False
        self._reconcile_pending: set[str] = set()
        self._in_flight_units = 0
        self.peak_units = 0  # peak units wanted by submitted, unfinished jobs
        self._unit_of = {p.name: max(1, p.units_per_pod) for p in self.specs.values()}
        self._stopped = False
        # Per pool: bumped on every change to its pods, and to its queue; and the last empty
        # plan's (pods, queue, headroom, stable_until), under which a pass may be skipped.
        self._gen = dict.fromkeys(self.specs, 0)
        self._queue_gen = dict.fromkeys(self.specs, 0)
        self._quiet: dict[str, tuple[int, int, int | None, float]] = {}
        self._check_skips = check_skips
        self.passes_skipped = 0
        # Per queued job: what its claim depended on when it last found no capacity, and that
        # answer. A claim only takes pods, never frees them, and time only expires holds, so
        # while those inputs are unchanged the claim would fail the same way: it is not
        # repeated on every pass (the dispatcher sees the same queue order and outcomes).
        # On a GPU pool the inputs are all its pods. On a CPU pool a job can only take its
        # caller's own held pods or never-used ones, so they are the pool's ready pods (a
        # never-used pod appears only when a pod becomes ready) and the caller's releases.
        self._no_capacity: dict[str, tuple[tuple[int, int], Wait]] = {}
        self._fresh_gen = dict.fromkeys(self.specs, 0)
        self._caller_gen: dict[tuple[str, str], int] = {}
        self._gpu_pools = frozenset(p.name for p in self.specs.values() if p.is_gpu)
        loop.after(reconcile_s, self._periodic)

    # ---------------------------------------------------------------- set-up
    def warm_up(self) -> None:
        """Create every pool's floor and run until it is ready (the state a benchmark starts
        from, since arms follow one another on a live pool)."""
        for pool in self.specs:
            self._reconcile(pool)
        self.loop.run(stop=lambda: self.backend.starting == 0)

    def stop(self) -> None:
        """Stop the periodic reconcile so the loop can drain."""
        self._stopped = True

    # ---------------------------------------------------------------- submission
    def _spec(self, req: JobRequest) -> JobSpec:
        key = (req.pool, req.queue, req.tag, req.single_use, req.pods)
        spec = self._specs_cache.get(key)
        if spec is None:
            spec = JobSpec(
                pool=req.pool,
                command=["sim"],
                queue=req.queue,
                lease_tag=req.tag,
                single_use=req.single_use,
                pods=req.pods,
                timeout_s=None,
            )
            if len(self._specs_cache) < 4096:
                self._specs_cache[key] = spec
        return spec

    def submit(self, req: JobRequest, on_done: Callable[[JobStats], None] | None = None) -> str:
        now = self.loop.now
        record = self.store.submit(req.caller, self._spec(req), now=now).job
        job = record.id
        self.records[job] = record
        self.stats[job] = JobStats(job, req.caller, req.pool, now, req.duration, on_done=on_done)
        self._in_flight_units += req.pods * self._unit_of[req.pool]
        self.peak_units = max(self.peak_units, self._in_flight_units)
        self.loop.after(self.venue.accept.sample(self.rng), self._accepted, (job, req))
        return job

    def _accepted(self, arg: tuple[str, JobRequest]) -> None:
        job, req = arg
        now = self.loop.now
        request = ClaimRequest(
            job, req.caller, req.pool, req.queue, req.tag, req.pods, req.single_use, queued_at=now
        )
        self.queued[job] = QueuedJob(request, 0, now)
        self._queue_gen[req.pool] += 1
        self._wake_dispatch()

    # ---------------------------------------------------------------- dispatch
    def _wake_dispatch(self) -> None:
        if not self._dispatch_pending and self.queued:
            self._dispatch_pending = True
            self.loop.after(self.venue.dispatch.sample(self.rng), self._dispatch)

    def _dispatch(self, _: object = None) -> None:
        self._dispatch_pending = False
        if not self.queued:
            return
        now = self.loop.now
        known = self._no_capacity
        claim_inputs = self._claim_inputs
        todo: list[QueuedJob] = []
        skipped: list[Wait] = []
        for q in self.queued.values():
            seen = known.get(q.request.job)
            if seen is not None and seen[0] == claim_inputs(q.request):
                skipped.append(seen[1])
                if self._check_skips:
                    todo.append(q)
            else:
                todo.append(q)
        result = dispatch_pass(self.tracker, todo, now)
        if self._check_skips:
            placed = {lease.job for lease in result.leases}
            wrong = [w.job for w in skipped if w.job in placed]
            if wrong:
                raise AssertionError(f"skipped claims that would have succeeded: {wrong}")
            skipped = []
        for w in result.waiting:
            if w.reason is WaitReason.NO_CAPACITY:
                known[w.job] = (claim_inputs(self.queued[w.job].request), w)
        for lease in result.leases:
            self._commit(lease, now)
        waiting = result.waiting
        if skipped:
            waiting = waiting + skipped
            if len(self.specs) > 1:  # the wake-up order below follows the queue order
                waiting.sort(key=lambda w: self.queued[w.job].order_key)
        # An ordered set: the wake-up order must not depend on string hashing.
        pools = dict.fromkeys(self.queued[w.job].request.pool for w in waiting
                              if w.reason is WaitReason.NO_CAPACITY)
        for pool in pools:
            self._wake_reconcile(pool)
        if self.queued and not self._tick_pending:
            # The service's fallback tick: a pass every dispatch_tick_s while jobs wait, which
            # is what notices budget freed by a deletion (nothing else wakes the dispatcher).
            self._tick_pending = True
            self.loop.after(self.dispatch_tick_s, self._tick)

    def _claim_inputs(self, req: ClaimRequest) -> tuple[int, int]:
        """Generations of what a failed claim of `req` could change with (see `__init__`)."""
        pool = req.pool
        if pool in self._gpu_pools:
            return (self._gen[pool], -1)
        return (self._fresh_gen[pool], self._caller_gen.get((pool, req.caller), 0))

    def _tick(self, _: object = None) -> None:
        self._tick_pending = False
        if self.queued and not self._dispatch_pending:
            self._dispatch()

    def _commit(self, lease: Lease, now: float) -> None:
        job = lease.job
        del self.queued[job]
        self._no_capacity.pop(job, None)
        self._gen[lease.pool] += 1
        self._queue_gen[lease.pool] += 1
        bindings = [
            PodBinding(rank, p.name, p.path, p.reason.value, lease.pool)
            for rank, p in enumerate(lease.pods)
        ]
        self.records[job] = self.store.start(self.records[job], bindings, now=now)
        st = self.stats[job]
        st.assigned = now
        st.paths = tuple(p.path.value for p in lease.pods)
        st.reasons = tuple(p.reason.value for p in lease.pods)
        if lease.launchable:
            self._launch(job, any(p.path is _STANDBY for p in lease.pods))
        # else: a gated standby; `_promoted` launches it when the card's gate passes.

    def _launch(self, job: str, standby: bool) -> None:
        for name in self.tracker.job_pods(job):
            self.tracker.mark_running(name)
        self._gen[self.stats[job].pool] += 1
        v, rng = self.venue, self.rng
        delay = v.handoff.sample(rng) + v.first_instruction.sample(rng)
        promote = v.promote.sample(rng) if standby else 0.0
        self.stats[job].launched = self.loop.now + promote
        self.loop.after(delay + promote, self._first_instruction, job)

    def _first_instruction(self, job: str) -> None:
        st = self.stats[job]
        st.first = self.loop.now
        self.loop.after(st.duration, self._exited, job)

    def _exited(self, job: str) -> None:
        st = self.stats[job]
        st.finished = self.loop.now
        verdict = judge(AttemptEnd(exit_code=0), self.records[job].retries, 0)
        self.records[job] = self.store.finish(
            self.records[job], verdict.state, now=st.finished, exit_code=verdict.exit_code
        )
        self._in_flight_units -= len(st.paths) * self._unit_of[st.pool]
        self.loop.after(self.venue.reset.sample(self.rng), self._reset_done, job)
        if st.on_done is not None:
            st.on_done(st)

    def _reset_done(self, job: str) -> None:
        now = self.loop.now
        result = self.tracker.release(job, now)
        st = self.stats[job]
        self._gen[st.pool] += 1
        key = (st.pool, st.caller)
        self._caller_gen[key] = self._caller_gen.get(key, 0) + 1
        for _, until in result.held:
            self.loop.at(until, self._expire_holds)
        self._retired(result.retired)
        self._promoted(result.promoted)
        self._wake_dispatch()
        self._wake_reconcile(self.stats[job].pool)  # restage standbys, retire, refill floors

    def _promoted(self, promotions: Iterable[Promotion]) -> None:
        for promo in promotions:
            if promo.job_launchable:
                self._launch(promo.job, True)

    def _retired(self, retired: Iterable[Retired]) -> None:
        for r in retired:
            self.backend.delete(r.pod)

    def _expire_holds(self, _: object = None) -> None:
        retired = self.tracker.expire_holds(self.loop.now)
        for r in retired:
            pod = self.tracker.get(r.pod)
            if pod is not None:
                self._gen[pod.pool] += 1
        self._retired(retired)

    # ---------------------------------------------------------------- scaling
    def _wake_reconcile(self, pool: str) -> None:
        if pool not in self._reconcile_pending:
            self._reconcile_pending.add(pool)
            self.loop.after(0.0, self._reconcile_event, pool)

    def _reconcile_event(self, pool: str) -> None:
        self._reconcile_pending.discard(pool)
        self._reconcile(pool)

    def _periodic(self, _: object = None) -> None:
        if self._stopped:
            return
        self._expire_holds()
        for pool in self.specs:
            self._reconcile(pool)
        self.loop.after(self.reconcile_s, self._periodic)

    def _reconcile(self, pool: str) -> None:
        spec = self.specs[pool]
        now = self.loop.now
        gen, queue_gen = self._gen[pool], self._queue_gen[pool]
        headroom = self.ledger.headroom(spec.budget_resource)
        quiet = self._quiet.get(pool)
        if (
            quiet is not None
            and quiet[0] == gen
            and quiet[1] == queue_gen
            and quiet[2] == headroom
            and now < quiet[3]
        ):
            self.passes_skipped += 1
            if not self._check_skips:
                return
            skipped = True
        else:
            skipped = False
        demand = [
            QueuedDemand(q.request.caller, q.request.pods, q.request.single_use)
            for q in self.queued.values()
            if q.request.pool == pool
        ]
        tracker = self.tracker
        p = plan(
            spec,
            tracker.pool_pods(pool),
            tracker.pool_groups(pool) if spec.is_gpu else (),  # CPU plans read no groups
            demand,
            now,
            headroom_units=headroom,
        )
        if p.empty:
            self._quiet[pool] = (gen, queue_gen, headroom, p.stable_until)
            return
        if skipped:
            raise AssertionError(f"skipped a scaler pass of {pool} whose plan was not empty: {p}")
        self._quiet.pop(pool, None)
        self._gen[pool] += 1
        units = max(1, spec.units_per_pod)
        for order in admit(p, spec, self.ledger, lambda: next(self._names)):
            tracker.add_pod(
                order.pod,
                pool,
                now,
                role=order.role,
                group=order.group,
                single_use=order.single_use,
                image=order.image,
            )
            if order.holder is not None:
                self.backend.reserve(units)
            self.backend.create(order.pod)
        for r in p.retire:
            if tracker.retire(r.pod, r.reason):
                self.backend.delete(r.pod)

    # ---------------------------------------------------------------- backend events
    def _pod_ready(self, name: str) -> None:
        pod = self.tracker.get(name)
        if pod is None:
            return
        if pod.state is not PodState.STARTING:
            if pod.state is PodState.RETIRING:
                self.backend.delete(name)
            return
        self.tracker.pod_ready(name, self.loop.now)
        self._gen[pod.pool] += 1
        self._fresh_gen[pod.pool] += 1
        self._wake_dispatch()

    def _pod_deleted(self, name: str) -> None:
        pod = self.tracker.get(name)
        pool = pod.pool if pod is not None else None
        freed, promoted = self.tracker.pod_deleted(name)
        if pool is not None:
            self._gen[pool] += 1
        if freed is not None:
            self.ledger.release(freed)
            if pool is not None:
                self.backend.free(max(1, self.specs[pool].units_per_pod))
        self._promoted(promoted)
        # As in the service, a deletion wakes nobody: the dispatcher's fallback tick finds
        # the waiting jobs, and its NO_CAPACITY wait wakes the scaler.

    # ---------------------------------------------------------------- results
    def finished(self) -> list[JobStats]:
        return [s for s in self.stats.values() if s.finished >= 0.0]
