"""The broker in virtual time: the simulator's executor of the broker core.

Every decision is `control/core.py`'s, the very object the service runs: claims and their
order, the scaler's plan and budget admission, holds, retirements, standby promotions through
the per-GPU gate, verdicts and retries. This module only does what a driver does: commit to
the in-memory store, call the virtual backend, wait the venue's delays, and feed the outcomes
back as events. As in the service, a `Dispatch` action runs a pass (after the venue's dispatch
delay), a fallback tick (3 s) runs one while jobs wait, and the scaler runs every `reconcile_s`
and for each pool a `Reconcile` action names.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from firepool.control.actions import (
    Action,
    CreatePod,
    DeletePod,
    Dispatch,
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
from firepool.control.budgets import BudgetLedger
from firepool.control.core import BrokerCore, CoreConfig
from firepool.control.dispatch import AttemptEnd
from firepool.control.elastic_jobs import ElasticRules
from firepool.control.gang import GangAction, GangExit, GangOver, RankExit, StopRanks
from firepool.control.images import check_image
from firepool.control.records import Lease, Ticket
from firepool.control.reservations import ReservationRules
from firepool.control.tracker import Tracker
from firepool.model import (
    AcquisitionPath,
    ElasticSpec,
    JobKind,
    JobSpec,
    JobState,
    PoolSpec,
    Topology,
)
from firepool.model.frozen_init import fast_frozen_init
from firepool.scheduling.utility import p_restart_for
from firepool.sim.backend import VirtualBackend
from firepool.sim.loop import EventLoop
from firepool.sim.memstore import MemStore
from firepool.sim.venue import Venue
from firepool.store.records import JobRecord, PodBinding

_STANDBY = AcquisitionPath.STANDBY
ROUND_TICK_S = 1.0
#: An elastic job checkpoints this often; a kill loses the work since the last checkpoint.
CHECKPOINT_S = 60.0
#: A rank the broker stopped (SIGTERM): no exit code of its own, as the agent reports it.
_TERMINATED = RankExit(None, signal=15)
#: A rank the broker killed (fault injection, reclaim). The code -9 is what the simulator
#: has always recorded for a kill (the agent would report none): kept so runs compare.
_KILLED = RankExit(-9, signal=9)
_CLEAN = RankExit(0)


@dataclass(slots=True)
class ElasticWork:
    """An elastic job's training in the simulator: `total` seconds of work at one pod's
    goodput, advanced at the fitted model's goodput of each attempt's world size after the
    attempt has restored (the application's restart penalty)."""

    total: float
    done: float = 0.0
    since: float = -1.0  # when the live attempt started training (after its restore)
    rate: float = 0.0  # work per second of the live attempt
    epoch: int = 0  # bumped when an attempt ends: its pending events go stale
    attempts: int = 0
    finished: float = -1.0


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


@fast_frozen_init
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
    image: str | None = None
    priority: int = 0
    #: An elastic training job (sized by the core's rounds, `pods` is ignored).
    elastic: ElasticSpec | None = None
    max_retries: int = 0
    #: The exit code of each attempt in turn (0 once they run out): scripted failures.
    exit_codes: tuple[int, ...] = ()
    #: How a gang's ranks are wired; a Ray gang's other ranks serve rank 0 until stopped.
    topology: Topology = Topology.NONE
    #: The rank whose process exits with a scripted failure (the others run on until the
    #: gang rule stops them).
    failing_rank: int = 0


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
        elastic: ElasticRules | None = None,
        gang_reservations: ReservationRules | None = None,
    ) -> None:
        self.loop = loop
        self.venue = venue
        self.rng = rng
        self.ledger = BudgetLedger(budgets)
        self._names = (f"pod-{i}" for i in itertools.count())
        self.core = BrokerCore(
            pools,
            self.ledger,
            new_name=lambda _pool: next(self._names),
            config=CoreConfig(elastic=elastic, check_skips=check_skips,
                              gang_reservations=gang_reservations),
            start=loop.now,
        )
        self.specs = self.core.specs
        self.store = MemStore()
        self.backend = VirtualBackend(loop, venue, rng, self._pod_ready, self._pod_deleted)
        self.reconcile_s = reconcile_s
        self.dispatch_tick_s = dispatch_tick_s
        self._tick_pending = False
        self.stats: dict[str, JobStats] = {}
        self.records: dict[str, JobRecord] = {}
        self.leases: dict[str, Lease] = {}
        self.exit_codes: dict[str, tuple[int, ...]] = {}
        self.failing_rank: dict[str, int] = {}
        #: Each live attempt's ranks, through the gang rule the service uses too.
        self.gangs: dict[str, GangExit] = {}
        self.elastic_work: dict[str, ElasticWork] = {}
        self._specs_cache: dict[tuple[object, ...], JobSpec] = {}
        self._dispatch_pending = False
        self._reconcile_pending: set[str] = set()
        self._in_flight_units = 0
        self.peak_units = 0  # peak units wanted by submitted, unfinished jobs
        self._unit_of = {p.name: max(1, p.units_per_pod) for p in self.specs.values()}
        self._stopped = False
        self._handlers = self._action_handlers()
        loop.after(reconcile_s, self._periodic)
        if elastic is not None:
            loop.after(0.0, self._round_tick)

    @property
    def tracker(self) -> Tracker:
        return self.core.tracker

    @property
    def passes_skipped(self) -> int:
        return self.core.passes_skipped

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

    # ---------------------------------------------------------------- executing actions
    def _act(self, actions: list[Action]) -> None:
        handlers = self._handlers
        for action in actions:
            handlers[type(action)](action)

    def _action_handlers(self) -> dict[type, Callable[[Any], None]]:
        """Each action type's executor, looked up by the action's exact type: the actions are
        final NamedTuples, and one dictionary lookup per action is cheaper than a `match` that
        tests each case in turn (about 2% of a run's time)."""
        return {
            Dispatch: lambda _: self._wake_dispatch(),
            Reconcile: lambda a: self._wake_reconcile(a.pool),
            StartAttempt: self._commit,
            LaunchAttempt: lambda a: self._launch(a.job),
            HoldPod: lambda a: self.loop.at(a.until, self._tick),
            DeletePod: lambda a: self.backend.delete(a.pod),
            CreatePod: lambda a: self.backend.create(a.order.pod),
            RecordVerdict: self._record,
            StopAttempt: self._stop,
            FailQueued: self._fail_queued,
            InjectFailure: lambda a: self.loop.at(a.at, self._failure_due, a),
        }

    # ---------------------------------------------------------------- submission
    def _spec(self, req: JobRequest) -> JobSpec:
        key = (req.pool, req.queue, req.tag, req.single_use, req.pods, req.image, req.priority,
               req.elastic, req.max_retries, req.topology)
        spec = self._specs_cache.get(key)
        if spec is None:
            spec = JobSpec(
                pool=req.pool,
                command=["sim"],
                queue=req.queue,
                lease_tag=req.tag,
                single_use=req.single_use,
                pods=1 if req.elastic is not None else req.pods,
                image=req.image,
                priority=req.priority,
                max_retries=req.max_retries,
                timeout_s=None,
                kind=JobKind.ELASTIC if req.elastic is not None else JobKind.TASK,
                elastic=req.elastic,
                topology=req.topology,
            )
            if len(self._specs_cache) < 4096:
                self._specs_cache[key] = spec
        return spec

    def submit(self, req: JobRequest, on_done: Callable[[JobStats], None] | None = None) -> str:
        """Queue a job; a custom image its pool does not admit is refused here, by the same
        rule as the API's (`ImageNotAllowedError`), before anything is recorded."""
        now = self.loop.now
        check_image(self.specs[req.pool], req.image)
        record = self.store.submit(req.caller, self._spec(req), now=now).job
        job = record.id
        self.records[job] = record
        self.stats[job] = JobStats(job, req.caller, req.pool, now, req.duration, on_done=on_done)
        if req.exit_codes:
            self.exit_codes[job] = req.exit_codes
        if req.failing_rank:
            self.failing_rank[job] = req.failing_rank
        if req.elastic is not None:
            self.elastic_work[job] = ElasticWork(req.duration)
        if req.elastic is None:  # training holds what the rounds give it, not a fixed size
            self._in_flight_units += req.pods * self._unit_of[req.pool]
            self.peak_units = max(self.peak_units, self._in_flight_units)
        self.loop.after(self.venue.accept.sample(self.rng), self._accepted, job)
        return job

    def cancel(self, job: str) -> None:
        """The caller cancels, as the API records it: a queued job ends CANCELLED in the
        store at once; a running one is flagged, and the core stops it and retries it no
        more (a cancel during its pods' reset included)."""
        record = self.store.cancel(job, now=self.loop.now)
        self.records[job] = record
        self._act(self.core.cancel(job, self.loop.now, terminal=record.state.terminal))

    def _accepted(self, job: str) -> None:
        # The broker sees the job when the API's commit is done: that instant is its queue
        # time (a pod created after it is `new`, not `warm`).
        record = self.records[job]
        now = self.loop.now
        self._act(self.core.submit(Ticket(job, record.caller, record.spec, now), now))

    # ---------------------------------------------------------------- dispatch
    def _wake_dispatch(self) -> None:
        if not self._dispatch_pending and self.core.queued:
            self._dispatch_pending = True
            self.loop.after(self.venue.dispatch.sample(self.rng), self._dispatch)

    def _dispatch(self, _: object = None) -> None:
        self._dispatch_pending = False
        if not self.core.queued:
            return
        self._act(self.core.dispatch(self.loop.now))
        if self.core.queued and not self._tick_pending:
            # The service's fallback tick: a pass every dispatch_tick_s while jobs wait, which
            # is what notices budget freed by a deletion (nothing else wakes the dispatcher).
            self._tick_pending = True
            self.loop.after(self.dispatch_tick_s, self._dispatch_tick)

    def _dispatch_tick(self, _: object = None) -> None:
        self._tick_pending = False
        if self.core.queued and not self._dispatch_pending:
            self._dispatch()

    def _commit(self, action: StartAttempt) -> None:
        lease = action.lease
        job = lease.job
        now = self.loop.now
        self.leases[job] = lease
        self.gangs[job] = GangExit.of([p.name for p in lease.pods], self.records[job].spec)
        bindings = [
            PodBinding(rank, p.name, p.path, p.reason.value, lease.pool)
            for rank, p in enumerate(lease.pods)
        ]
        self.records[job] = self.store.start(self.records[job], bindings, now=now)
        st = self.stats[job]
        st.assigned = now
        st.paths = tuple(p.path.value for p in lease.pods)
        st.reasons = tuple(p.reason.value for p in lease.pods)
        self._act(self.core.committed(job, now))
        # A gated standby launches when the core's LaunchAttempt says its gate passed.

    def _launch(self, job: str) -> None:
        standby = any(p.path is _STANDBY for p in self.leases[job].pods)
        v, rng = self.venue, self.rng
        delay = v.handoff.sample(rng) + v.first_instruction.sample(rng)
        promote = v.promote.sample(rng) if standby else 0.0
        self.stats[job].launched = self.loop.now + promote
        self.loop.after(delay + promote, self._first_instruction, job)

    def _first_instruction(self, job: str) -> None:
        st = self.stats[job]
        if st.finished >= 0.0 or job not in self.leases:
            return  # stopped before its first instruction
        work = self.elastic_work.get(job)
        if work is not None:
            if st.first < 0.0:
                st.first = self.loop.now
            work.attempts += 1
            spec = self.records[job].spec.elastic
            assert spec is not None
            restore = p_restart_for(spec.app, spec.p_restart_s)
            self.loop.after(restore, self._restored, (job, work.epoch))
            return
        st.first = self.loop.now
        codes, attempt = self.exit_codes.get(job, ()), self.records[job].retries
        code = codes[attempt] if attempt < len(codes) else 0
        self.loop.after(st.duration, self._ran, (job, code))

    def _ran(self, arg: tuple[str, int]) -> None:
        """A task's scripted exit. With a failure only the failing rank's process exits (the
        others would run on until the gang rule stops them); without one every rank exits 0,
        except a Ray gang's other nodes, which serve rank 0's driver until they are stopped."""
        job, code = arg
        gang = self.gangs.get(job)
        if gang is None or self.stats[job].finished >= 0.0 or job not in self.leases:
            return
        pods = gang.pods
        if code != 0:
            rank = min(self.failing_rank.get(job, 0), len(pods) - 1)
            self._ranks(job, {pods[rank]: RankExit(code)})
        elif gang.ray:
            self._ranks(job, {pods[0]: _CLEAN})
        else:
            self._ranks(job, dict.fromkeys(pods, _CLEAN))

    def _ranks(
        self,
        job: str,
        exits: dict[str, RankExit] | None = None,
        *,
        cancel: bool = False,
        stop: bool = False,
    ) -> None:
        """Feed the gang rule one wake-up and carry out what it says: a stop ends every rank
        still running at once (0 after a graceful stop's checkpoint, SIGTERM otherwise), the
        gang's end ends the attempt."""
        gang = self.gangs.get(job)
        if gang is None:
            return
        actions: list[GangAction] = gang.woke(exits, cancel=cancel, stop=stop)
        while actions:
            over = next((a for a in actions if isinstance(a, GangOver)), None)
            if over is not None:
                del self.gangs[job]
                self._exited((job, over.end))
                return
            halt = next((a for a in actions if isinstance(a, StopRanks)), None)
            if halt is None:
                return
            stopped = _CLEAN if halt.graceful else _TERMINATED
            actions = gang.woke(dict.fromkeys(gang.pending, stopped))

    def _restored(self, arg: tuple[str, int]) -> None:
        """An elastic attempt finished restoring: it reports progress (which ends its restore
        in the rounds' lifecycle) and trains at its world size's goodput until it is done."""
        job, epoch = arg
        work = self.elastic_work[job]
        if epoch != work.epoch or job not in self.leases:
            return
        record = self.records[job]
        ticket = Ticket(job, record.caller, record.spec, 0.0, record.retries, record.reclaims)
        fraction = work.done / work.total if work.total > 0 else 1.0
        elastic = self.core.elastic
        assert elastic is not None
        work.rate = elastic.goodput(ticket, len(self.leases[job].pods), fraction)
        work.since = self.loop.now
        elastic.progress(job, record.attempt, self.loop.now, samples_per_s=None,
                         fraction=fraction)
        if work.rate > 0.0:
            left = max(work.total - work.done, 0.0) / work.rate
            self.loop.after(left, self._trained, (job, epoch))

    def _trained(self, arg: tuple[str, int]) -> None:
        job, epoch = arg
        work = self.elastic_work[job]
        if epoch == work.epoch and job in self.leases:
            work.done = work.total
            gang = self.gangs.get(job)
            if gang is not None:
                self._ranks(job, dict.fromkeys(gang.pending, _CLEAN))

    def _exited(self, arg: tuple[str, AttemptEnd]) -> None:
        job, end = arg
        st = self.stats[job]
        if st.finished >= 0.0 or job not in self.leases:
            return  # already ended (a stop raced the natural exit)
        st.finished = self.loop.now
        work = self.elastic_work.get(job)
        if work is not None:
            work.epoch += 1  # the attempt is over: its pending events are stale
            work.since = -1.0
            self.loop.after(self.venue.reset.sample(self.rng), self._reset_done, (job, end))
            return
        self._in_flight_units -= len(st.paths) * self._unit_of[st.pool]
        # The virtual pods' output is stored with their exit, so the verdict goes out before
        # the reset, as the service's does when the exit events carried the output.
        self._act(self.core.judge_before_reset(job, end, self.loop.now))
        self.loop.after(self.venue.reset.sample(self.rng), self._reset_done, (job, end))
        if st.on_done is not None:
            st.on_done(st)

    def _reset_done(self, arg: tuple[str, AttemptEnd]) -> None:
        job, end = arg
        self.leases.pop(job, None)
        self._act(self.core.attempt_over(job, end, (), self.loop.now))

    def _record(self, action: RecordVerdict) -> None:
        job, verdict = action.ticket.job, action.verdict
        now = self.loop.now
        record = self.records[job]
        if verdict.retry:
            record = self.store.requeue(record, now=now, error_class=verdict.error_class)
        else:
            record = self.store.finish(
                record,
                verdict.state,
                now=now,
                exit_code=verdict.exit_code,
                error_class=verdict.error_class,
                message=verdict.message,
            )
        self.records[job] = record
        ticket = Ticket(job, record.caller, record.spec, action.ticket.submitted_at,
                        record.retries, record.reclaims)
        work = self.elastic_work.get(job)
        if record.state is JobState.QUEUED:
            st = self.stats[job]
            st.finished = -1.0
            if work is None:
                st.first = -1.0
        elif work is not None:
            work.finished = now
        self._act(self.core.verdict_recorded(ticket, record.state, now))

    def _stop(self, action: StopAttempt) -> None:
        """A stop ends the attempt at once, through the gang rule: a graceful stop's ranks exit
        0 after checkpointing, a kill's by SIGKILL, a cancel's by SIGTERM."""
        job = action.job
        if job not in self.leases or self.stats[job].finished >= 0.0:
            return
        work = self.elastic_work.get(job)
        if work is not None and work.since >= 0.0:
            trained = self.loop.now - work.since
            if action.mode is not StopMode.GRACEFUL:  # only what the last checkpoint saved
                trained = (trained // CHECKPOINT_S) * CHECKPOINT_S
            if action.mode is not StopMode.CANCEL:
                work.done = min(work.total, work.done + trained * work.rate)
        gang = self.gangs.get(job)
        if action.mode is StopMode.GRACEFUL:
            self._ranks(job, stop=True)
        elif action.mode is StopMode.CANCEL:
            self._ranks(job, cancel=True)
        elif gang is not None:  # the driver kills every rank at once
            self._ranks(job, dict.fromkeys(gang.pending, _KILLED))

    def _failure_due(self, action: InjectFailure) -> None:
        self._act(self.core.failure_due(action.job, action.attempt))

    def _fail_queued(self, action: FailQueued) -> None:
        record = self.records[action.job]
        self.records[action.job] = self.store.finish(
            record, JobState.FAILED, now=self.loop.now, error_class=action.error,
            message=action.message,
        )

    # ---------------------------------------------------------------- operator and controller
    def set_pool(self, spec: PoolSpec) -> None:
        """An operator applied a changed catalog entry (a template rollout, if it is one)."""
        self._act(self.core.set_pool(spec, self.loop.now))

    def borrowable(self, reading: dict[str, int]) -> None:
        """A capacity controller's reading of what may be borrowed, as the service's poll
        feeds it."""
        self._act(self.core.borrowable_read(reading, self.loop.now))
        self.backend.hold(self.ledger.total_used())

    def _tick(self, _: object = None) -> None:
        self._act(self.core.tick(self.loop.now))

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
        self._tick()
        for pool in self.specs:
            self._reconcile(pool)
        self.loop.after(self.reconcile_s, self._periodic)

    def _reconcile(self, pool: str) -> None:
        actions = self.core.reconcile(pool, self.loop.now)
        if actions:
            self.backend.hold(self.ledger.total_used())
            self._act(actions)

    def _round_tick(self, _: object = None) -> None:
        """Elastic rounds: checked every second of virtual time (a round is due on its timer
        and at once after an arrival, a completion or a failure, as the core decides)."""
        if self._stopped:
            return
        now = self.loop.now
        if self.core.round_due(now):
            self._act(self.core.round(now))
        self.loop.after(ROUND_TICK_S, self._round_tick)

    # ---------------------------------------------------------------- backend events
    def _pod_ready(self, name: str) -> None:
        self._act(self.core.pod_ready(name, self.loop.now))

    def _pod_deleted(self, name: str) -> None:
        actions = self.core.pod_deleted(name, self.loop.now)
        self.backend.hold(self.ledger.total_used())
        self._act(actions)

    # ---------------------------------------------------------------- results
    def finished(self) -> list[JobStats]:
        return [s for s in self.stats.values() if s.finished >= 0.0]
