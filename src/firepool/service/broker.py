"""The broker in real time: the asyncio executor of the broker core.

Every decision is `control/core.py`'s. This driver feeds it events with the real clock and
carries out the actions it returns with real I/O:
- the dispatcher loop, woken by a `Dispatch` action (submissions, releases, pod readiness;
  a 3 s tick is only a fallback that also re-reads the store's queue), runs `core.dispatch`;
- the reconcile loop runs `core.reconcile` for the pools a `Reconcile` action named, and for
  every pool every 30 s;
- holds are expired by `core.tick` at each `HoldPod`'s expiry (and every second as a
  fallback); elastic rounds run when the core says one is due;
- each `StartAttempt` becomes a task that commits, launches on the core's go, waits for every
  rank's exit, resets the pods and reports `attempt_over`.
Exit events pushed by pod agents arrive through `exit_event`, one of the hooks the API
calls (`api/hooks.py`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import hmac
import logging
import secrets
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.registry import Collector

from firepool.backends.base import PodBackend
from firepool.control import pod_annotations
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
from firepool.control.dispatch import AttemptEnd, Verdict
from firepool.control.records import Ticket
from firepool.control.reservations import ReservationRules
from firepool.control.rollout import RolloutProgress
from firepool.control.scaler import ScalerConfig
from firepool.control.tracker import Tracker
from firepool.model import (
    JobKind,
    JobState,
    PodInfo,
    PodState,
    PoolSpec,
    PoolStats,
    RoundAllocation,
    StoreUnavailableError,
    TimelinePoint,
)
from firepool.packages import PackageStore
from firepool.protocol import ExitEvent
from firepool.service import pool_edits
from firepool.service.attempt import AttemptRunner, LogSink, Running
from firepool.service.capacity import CapacitySource
from firepool.service.elastic import ElasticConfig, ElasticDriver
from firepool.service.outage import until_stored
from firepool.service.pods import PodManager
from firepool.service.recovery import recover, sweep_exclusivity
from firepool.service.telemetry import BrokerTelemetry, HeldClock, held_counts
from firepool.service.tickets import ticket_of
from firepool.store import JobRecord, JobStore

log = logging.getLogger("firepool.service")

#: Pod states in which a job holds the pod (the dashboard's busy capacity).
_BUSY_STATES = frozenset({PodState.ASSIGNED, PodState.RUNNING})


@dataclass(frozen=True)
class BrokerConfig:
    dispatch_tick_s: float = 3.0
    reconcile_s: float = 30.0
    hold_tick_s: float = 1.0
    exit_poll_s: float = 2.0
    ready_timeout_s: float = 120.0
    max_queue_scan: int = 10_000
    elastic: ElasticConfig = field(default_factory=ElasticConfig)
    scaler: ScalerConfig = field(default_factory=ScalerConfig)
    max_gpus_per_caller: int | None = None
    #: Seconds between two samples of the dashboard's plots (held vs busy, start latency).
    timeline_s: float = 10.0
    #: Age-keyed gang reservations (control/reservations.py); None: off.
    gang_reservations: ReservationRules | None = None
    #: How often the capacity source is read (the broker paper's default: 10 s).
    capacity_poll_s: float = 10.0


class Broker:
    def __init__(
        self,
        *,
        store: JobStore,
        backend: PodBackend,
        pools: Iterable[PoolSpec],
        ledger: BudgetLedger,
        logs: LogSink,
        packages: PackageStore,
        config: BrokerConfig | None = None,
        clock: Callable[[], float] = time.time,
        checkpoint_root: Path | None = None,
        capacity: CapacitySource | None = None,
    ) -> None:
        self.store = store
        self.backend = backend
        self.ledger = ledger
        self.logs = logs
        self.packages = packages
        self.config = config = config or BrokerConfig()
        self.clock = clock
        self.core = BrokerCore(
            pools,
            ledger,
            new_name=_pod_name,
            config=CoreConfig(
                scaler=config.scaler,
                max_gpus_per_caller=config.max_gpus_per_caller,
                elastic=config.elastic.rules(),
                gang_reservations=config.gang_reservations,
            ),
            start=clock(),
        )
        self.specs = self.core.specs
        self.base_url: str | None = None
        self.pods = PodManager(
            backend,
            callback_url=lambda: f"{self.base_url}/internal/v1/events" if self.base_url else None,
            ready_timeout_s=config.ready_timeout_s,
        )
        self.runner = AttemptRunner(
            store=store,
            pods=self.pods,
            logs=logs,
            clock=clock,
            package_url=lambda digest: f"{self.base_url}/internal/v1/packages/{digest}",
            exit_poll_s=config.exit_poll_s,
            resize_grace_s=config.elastic.stop_grace_s,
            silence_s=self.silence_s,
        )
        self.elastic = ElasticDriver(
            self.core,
            checkpoint_root=checkpoint_root
            or Path(tempfile.mkdtemp(prefix="firepool-checkpoints-")),
            secret=secrets.token_bytes(32),
        )
        self.running: dict[str, Running] = {}
        # Stored records of queued jobs: the commit is conditional on the row's version.
        self._records: dict[str, JobRecord] = {}
        # The committed record of each attempt that just ended, for its verdict's conditional
        # write (saves a store read per job; a cancel that bumped the version in between
        # makes the write lose its race, and `AttemptRunner.record` then re-reads).
        self._ended: dict[str, JobRecord] = {}
        self._resync = True
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake = asyncio.Event()
        self._reconcile_now = asyncio.Event()
        self._reconcile_pools: dict[str, None] = {}
        self._loops: list[asyncio.Task[None]] = []
        self._closing = False
        #: Told after every terminal state this broker commits (the API's long polls).
        self._finished_listeners: list[Callable[[JobRecord], None]] = []
        # The last dispatch passes' durations (bounded: the broker runs for months).
        self.dispatch_ms: collections.deque[float] = collections.deque(maxlen=1024)
        self.telemetry = BrokerTelemetry()  # served at /metrics through `metric_collectors`
        self._held = HeldClock(clock())
        self.capacity = capacity
        self._reading: dict[str, int] = {}  # the capacity source's last good reading
        self._pool_edit_lock = asyncio.Lock()
        self._started: float | None = None
        self.dispatching_after_start_s: float | None = None
        self.recovery_s = 0.0

    @property
    def tracker(self) -> Tracker:
        """Read-only use (listings, metrics): every change goes through the core."""
        return self.core.tracker

    # ------------------------------------------------------------------ life cycle

    async def start(self, base_url: str) -> None:
        """Recover, reconcile once, then run the loops. `base_url` is where agents reach us."""
        self._loop = asyncio.get_running_loop()
        self.base_url = base_url
        await pool_edits.restore(self)  # before recovery adopts pods of an edited template
        self._started = time.perf_counter()
        await recover(self)
        self.recovery_s = time.perf_counter() - self._started
        # Restart to dispatching: the first pass runs now, before the scaler's pod creates
        # (each forks on this loop) and before the first tick; queued jobs are waiting.
        try:
            await self.dispatch_once()
        except Exception:
            log.exception("first dispatch pass failed")
        self.reconcile()
        self._loops = [
            asyncio.create_task(self._dispatch_loop(), name="dispatch"),
            asyncio.create_task(self._reconcile_loop(), name="reconcile"),
            asyncio.create_task(self._hold_loop(), name="holds"),
            asyncio.create_task(self._elastic_loop(), name="elastic"),
            asyncio.create_task(self._keepalive_loop(), name="keepalive"),
            asyncio.create_task(self._timeline_loop(), name="timeline"),
            asyncio.create_task(self._capacity_loop(), name="capacity"),
            asyncio.create_task(sweep_exclusivity(self), name="exclusivity"),
        ]

    @property
    def closing(self) -> bool:
        return self._closing

    async def close(self, *, delete_pods: bool = False) -> None:
        """Graceful stop: loops end, running attempts are left to finish on their pods (a
        restarted broker re-attaches them) unless `delete_pods`."""
        self._closing = True
        for task in self._loops:
            task.cancel()
        await asyncio.gather(*self._loops, return_exceptions=True)
        await self.pods.close(delete_pods)
        await self.backend.detach()  # a cluster backend's watch thread ends with the broker

    # ------------------------------------------------------------------ executing actions

    def act(self, actions: Iterable[Action]) -> None:
        """Carry out the core's actions, in order. Runs on the event loop, never blocks."""
        for action in actions:
            if isinstance(action, Dispatch):
                self._wake.set()
            elif isinstance(action, Reconcile):
                self._reconcile_pools[action.pool] = None
                self._reconcile_now.set()
            elif isinstance(action, StartAttempt):
                self._start(action)
            elif isinstance(action, LaunchAttempt):
                running = self.running.get(action.job)
                if running is not None:
                    running.gate.set()
            elif isinstance(action, HoldPod):
                self.pods.spawn(self.pods.annotate(action.pod, pod_annotations.held(action.until)))
                self._at(action.until, self._expire_holds)
            elif isinstance(action, DeletePod):
                self.telemetry.deleted(self.tracker.get(action.pod), action.reason)
                self.pods.spawn(self._delete(action.pod))
            elif isinstance(action, CreatePod):
                self.telemetry.scaler.labels(action.order.pool, "create", action.order.role).inc()
                self.pods.spawn(self._create(action))
            elif isinstance(action, RecordVerdict):
                job_id = action.ticket.job
                task = self.pods.spawn(self._record(action, self._ended.get(job_id)))
                task.add_done_callback(functools.partial(self._recorded, job_id))
            elif isinstance(action, StopAttempt):
                self._stop(action)
            elif isinstance(action, FailQueued):
                self.pods.spawn(self._fail_queued(action))
            elif isinstance(action, InjectFailure):
                self._at(action.at, functools.partial(self._failure_due, action))

    def _failure_due(self, action: InjectFailure) -> None:
        self.act(self.core.failure_due(action.job, action.attempt))

    def _at(self, when: float, callback: Callable[[], None]) -> None:
        loop = asyncio.get_running_loop()
        loop.call_later(max(when - self.clock(), 0.0), callback)

    def _start(self, action: StartAttempt) -> None:
        ticket, lease = action.ticket, action.lease
        job = self._records.pop(ticket.job, None) or _placeholder(ticket)
        running = Running(job, lease, ticket=ticket)
        self.telemetry.leased(lease)
        if ticket.spec.kind is JobKind.ELASTIC:
            running.extra_env = self.elastic.environment(ticket, self.base_url)
        self.running[ticket.job] = running
        self.pods.spawn(self._run(running))

    def _stop(self, action: StopAttempt) -> None:
        running = self.running.get(action.job)
        if running is None:
            return
        if action.mode is StopMode.CANCEL:
            running.cancel.set()
        elif action.mode is StopMode.GRACEFUL:
            running.stop.set()
        elif action.mode is StopMode.RECLAIM:
            self.pods.spawn(self._reclaim(running))
        else:
            self.pods.spawn(self.runner.kill(running))

    async def _reclaim(self, running: Running) -> None:
        """Kill a reclaimed attempt's ranks; one the core let launch a moment ago may not
        have started on its pods yet, so wait for that (or for its end) first."""
        job = running.ticket.job
        while not running.launched and self.running.get(job) is running:
            await asyncio.sleep(0.05)
        if self.running.get(job) is running:
            await self.runner.kill(running)

    # ------------------------------------------------------------------ signals (any thread)

    def wake(self) -> None:
        self._signal(self._wake)

    def job_submitted(self, job: JobRecord) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._enqueue, job)

    def _enqueue(self, job: JobRecord) -> None:
        if job.state is JobState.QUEUED:
            self._remember(job)
            self.act(self.core.submit(ticket_of(job), self.clock()))

    def _remember(self, job: JobRecord) -> None:
        """Keep the stored record for the attempt (its version is the commit's condition)."""
        self._records[job.id] = job

    def cancel_requested(self, job: JobRecord) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._cancel, job)

    def _cancel(self, job: JobRecord) -> None:
        if job.state.terminal:
            self._forget(job.id)
        self.act(self.core.cancel(job.id, self.clock(), terminal=job.state.terminal))

    def subscribe_finished(self, listener: Callable[[JobRecord], None]) -> None:
        self._finished_listeners.append(listener)

    def job_finished(self, job: JobRecord) -> None:
        """After a terminal state is durable: callers long-polling the job answer at once."""
        for listener in self._finished_listeners:
            try:
                listener(job)
            except Exception:
                log.exception("job_finished listener failed for %s", job.id)

    def _forget(self, job_id: str) -> None:
        self._records.pop(job_id, None)

    def _signal(self, event: asyncio.Event) -> None:
        loop = self._loop
        if loop is None:
            return
        try:
            running_loop = asyncio.get_running_loop()
        except RuntimeError:
            running_loop = None
        if running_loop is loop:
            event.set()
        else:
            loop.call_soon_threadsafe(event.set)

    # ------------------------------------------------------------------ the API's reads

    def exit_event(self, event: ExitEvent) -> bool:
        """An agent's exit event; False when no live attempt matches (a stale or replayed
        event, answered but ignored: the attempt id keeps old attempts out)."""
        job_id = event.attempt.rpartition(":")[0]
        running = self.running.get(job_id)
        if running is None or running.job.attempt != event.attempt:
            return False
        fut = running.exits.get(event.pod)
        if fut is None or fut.done():
            return False
        fut.set_result(event)
        return True

    def pod_for_secret(self, token: str, pod: str | None) -> str | None:
        records = self.pods.records
        for name in [pod] if pod is not None else list(records):
            record = records.get(name)
            if record is not None and hmac.compare_digest(record.secret, token):
                return name
        return None

    def pod_may_fetch(self, pod: str, digest: str) -> bool:
        tracked = self.tracker.get(pod)
        running = self.running.get(tracked.job) if tracked is not None and tracked.job else None
        return running is not None and running.job.spec.package == digest

    def pod_list(self) -> list[PodInfo]:
        records = self.pods.records
        out: list[PodInfo] = []
        for spec in self.specs.values():
            for pod in self.tracker.pool_pods(spec.name):
                record = records.get(pod.name)
                out.append(
                    PodInfo(
                        name=pod.name,
                        pool=pod.pool,
                        role=pod.role.value,
                        state=pod.state.value,
                        owner=pod.owner,
                        queue=pod.queue,
                        tag=pod.tag,
                        group=pod.group,
                        job=pod.job,
                        hold_until=pod.hold_until,
                        created_at=pod.created_at,
                        isolation=record.isolation if record is not None else "",
                        image=pod.image,
                        pid_namespace=record.pid_namespace if record is not None else None,
                        network=record.network if record is not None else "",
                    )
                )
        return out

    def pool_stats(self) -> list[PoolStats]:
        """Each pool's figures for a scrape: O(pods), read on the event loop's thread."""
        now = self.clock()
        queued: dict[str, int] = {}
        for entry in self.core.queued.values():
            pool = entry.ticket.spec.pool
            queued[pool] = queued.get(pool, 0) + 1
        ledger = self.ledger
        out: list[PoolStats] = []
        for spec in self.specs.values():
            pool_pods = self.tracker.pool_pods(spec.name)
            kinds = collections.Counter([(pod.role, pod.state) for pod in pool_pods])
            pods = {(role.value, state.value): n for (role, state), n in kinds.items()}
            count, gpus = held_counts(spec, [pod.group for pod in pool_pods])
            pod_s, gpu_s = self._held.accrue(spec.name, now, count, gpus)
            resource = spec.budget_resource
            out.append(
                PoolStats(
                    pool=spec.name,
                    floor=spec.min_count,
                    idle_cap=spec.max_idle_count,
                    ceiling=spec.max_count,
                    pods=pods,
                    held_pod_seconds=pod_s,
                    held_gpu_seconds=gpu_s,
                    queued=queued.get(spec.name, 0),
                    budget_resource=resource,
                    budget_used=ledger.used(resource),
                    budget_limit=ledger.limit(resource),
                )
            )
        return out

    def metric_collectors(self) -> list[Collector]:
        return self.telemetry.collectors()

    def timeline(self) -> list[TimelinePoint]:
        return list(self.telemetry.timeline.points)

    def round_allocations(self) -> list[RoundAllocation]:
        elastic = self.core.elastic
        return [] if elastic is None else list(elastic.allocations)

    def sample_timeline(self) -> None:
        """One sample of held vs busy pods over every pool (and the interval's start
        latencies) for the dashboard's plots."""
        held = busy = 0
        for spec in self.specs.values():
            for pod in self.tracker.pool_pods(spec.name):
                held += 1
                busy += pod.state in _BUSY_STATES
        self.telemetry.timeline.sample(self.clock(), held, busy)

    async def _timeline_loop(self) -> None:
        while not self._closing:
            self.sample_timeline()
            await asyncio.sleep(self.config.timeline_s)

    async def apply_pool(self, spec: PoolSpec) -> PoolSpec:
        """An admin's edit of a pool: stored, then run by the core (a new template rolls the
        pods over); the pods created from now on take the spec returned."""
        return await pool_edits.apply(self, spec, self._pool_edit_lock)

    def rollouts(self) -> list[RolloutProgress]:
        return [self.core.rollout(name) for name in self.specs]

    def progress_token_ok(self, attempt: str, token: str) -> bool:
        return self.elastic.token_matches(attempt, token)

    def progress(
        self, job_id: str, attempt: str, *, samples_per_s: float | None, fraction: float | None
    ) -> bool:
        return self.elastic.progress(
            job_id, attempt, self.clock(), samples_per_s=samples_per_s, fraction=fraction
        )

    # ------------------------------------------------------------------ dispatch

    async def _dispatch_loop(self) -> None:
        store_down = False
        while not self._closing:
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=self.config.dispatch_tick_s)
            except TimeoutError:
                self._resync = True
            self._wake.clear()
            try:
                await self.dispatch_once()
            except StoreUnavailableError as err:
                self._resync = True  # the queue read failed: read it again on the next pass
                if not store_down:
                    log.warning("dispatch passes wait for the store: %s", err)
                store_down = True
                continue
            except Exception:
                log.exception("dispatch pass failed")
            if store_down:
                log.warning("dispatch passes read the store again")
                store_down = False

    def queue_read(self, jobs: list[JobRecord]) -> None:
        """The store's queue, just read: it replaces the core's (the fallback resync, and
        recovery's read at start)."""
        self._resync = False
        self._records = {j.id: j for j in jobs[: self.config.max_queue_scan]}
        self.act(self.core.resync([ticket_of(j) for j in self._records.values()], self.clock()))

    async def dispatch_once(self) -> None:
        if self._resync:
            self._resync = False
            jobs = await asyncio.to_thread(
                self.store.list_jobs, states=[JobState.QUEUED], limit=self.config.max_queue_scan
            )
            self.queue_read(jobs)
        start = time.perf_counter()
        actions = self.core.dispatch(self.clock())
        self.dispatch_ms.append((time.perf_counter() - start) * 1000.0)
        self.telemetry.dispatch.observe(self.dispatch_ms[-1] / 1000.0)
        self.act(actions)
        if self.dispatching_after_start_s is None and self._started is not None:
            # Start (recovery included) to the first dispatch pass: the restart's cost to
            # queued work, read by `firepool experiment faults` from the log.
            self.dispatching_after_start_s = time.perf_counter() - self._started
            log.info(
                "dispatching %.1f ms after start (recovery %.1f ms)",
                self.dispatching_after_start_s * 1000,
                self.recovery_s * 1000,
            )

    # ------------------------------------------------------------------ attempts

    async def _run(self, running: Running) -> None:
        job_id = running.ticket.job
        try:
            with self.telemetry.commit.time():
                job = await self.runner.commit(running)
            if job is None:  # the commit lost a race: the store has the truth
                self.running.pop(job_id, None)
                self._resync = True
                self.act(self.core.commit_lost(job_id, self.clock()))
                return
            running.marking = self.pods.spawn(self._mark_pods(running))
            self.act(self.core.committed(job_id, self.clock()))
            end = await self.runner.run(running)
            await self._finish(running, end)
        except Exception as exc:
            log.exception("attempt %s crashed in the broker", running.job.attempt)
            self._crashed(running, exc)

    async def reattach(self, running: Running) -> None:
        try:
            end = await self.runner.resume(running)
            await self._finish(running, end)
        except Exception as exc:
            log.exception("re-attached attempt %s crashed in the broker", running.job.attempt)
            self._crashed(running, exc)

    def _crashed(self, running: Running, exc: Exception) -> None:
        """The broker's own task failed mid-attempt: the job must not stay RUNNING and its
        pods must not stay leased. Nothing about the pods can be confirmed, so every one is
        released unclean (deleted, with whatever still runs there), and the attempt is judged
        like a lost pod: retried within `max_retries` under a new attempt id."""
        job_id = running.ticket.job
        self.running.pop(job_id, None)
        if running.pump_timer is not None:
            running.pump_timer.cancel()  # no pump for an attempt nobody waits on
        if job_id not in self.core.running:
            return  # it had reported already (the crash came after)
        end = AttemptEnd(
            launch_failed=not running.launched,
            pod_lost=running.launched,
            message=f"the broker failed while running this attempt: {exc!r}",
        )
        unclean = [p.name for p in running.lease.pods]
        self.act(self.core.attempt_over(job_id, end, unclean, self.clock()))

    async def _finish(self, running: Running, end: AttemptEnd) -> None:
        await self.runner.drain_logs(running)
        job_id = running.ticket.job
        self._ended[job_id] = running.job
        try:
            if _judge_first(running):
                # The verdict needs no reset: its write and the reset run side by side, and
                # the caller has the result a reset earlier (a crash in between: recovery
                # resets the pods and keeps their hold, see control/recovery.py).
                self.act(self.core.judge_before_reset(job_id, end, self.clock()))
            unclean = await self.runner.reset(
                running.lease, job=running.job, lost=running.lost, acks=running.acks
            )
            if running.log_pump is not None and not running.log_pump.done():
                running.log_pump.cancel()  # a lost pod's stream: the reset recorded the loss
            self.running.pop(job_id, None)
            self.telemetry.attempt_ended(running, self.clock(), len(unclean))
            running.ticket = ticket_of(running.job)
            # (The core holds the deletion of the attempt's pods until its verdict is stored.)
            self.act(self.core.attempt_over(job_id, end, unclean, self.clock()))
        finally:
            self._ended.pop(job_id, None)

    def _recorded(self, job_id: str, task: asyncio.Task[bool]) -> None:
        """A verdict's write ended: if it never reported the verdict stored (it failed, or
        the job's row is gone), the core is told, so the pods it holds back for it go. One
        cancelled by the broker's shutdown leaves them: recovery finds the job RUNNING, and
        its pods tell what became of the attempt."""
        if task.cancelled():
            return
        if task.exception() is not None or not task.result():
            self.act(self.core.verdict_unrecorded(job_id, self.clock()))

    async def _mark_pods(self, running: Running) -> bool:
        """Step 4, best effort and off the critical path: ownership annotations. Whether
        every pod carries them (a verdict goes out before the reset only then)."""
        ticket = ticket_of(running.job)
        marked = True
        for p in running.lease.pods:
            marked &= await self.pods.annotate(
                p.name, pod_annotations.running(ticket, self.core.retire_after(p.name))
            )
        return marked

    async def _record(self, action: RecordVerdict, ended: JobRecord | None = None) -> bool:
        """Write the core's verdict. `ended` is the attempt's committed record when the
        verdict follows its end in this process; otherwise the store is read. Whether the
        core was told the verdict is stored."""
        ticket = action.ticket
        running_job = ended
        if running_job is None or running_job.retries != ticket.retries:
            running_job = await until_stored(
                lambda: asyncio.to_thread(self.store.get, ticket.job), what=f"job {ticket.job}"
            )
        if running_job is None:
            return False
        final = await self.runner.record(running_job, action.verdict, self._verdict_refused)
        self.telemetry.job_finished(final.spec.pool, final.state, final.error_class)
        if final.state is JobState.QUEUED:
            self._remember(final)
        elif final.state.terminal:
            self.job_finished(final)
        self.act(self.core.verdict_recorded(ticket_of(final), final.state, self.clock()))
        return True

    def _verdict_refused(self, fresh: JobRecord, verdict: Verdict) -> Verdict:
        return self.core.verdict_refused(verdict, cancel_requested=fresh.cancel_requested)

    async def _fail_queued(self, action: FailQueued) -> None:
        job = await until_stored(
            lambda: asyncio.to_thread(self.store.get, action.job), what=f"job {action.job}"
        )
        self._forget(action.job)
        if job is None or job.state is not JobState.QUEUED:
            return
        failed = await until_stored(
            lambda: asyncio.to_thread(
                self.store.finish,
                job,
                JobState.FAILED,
                now=self.clock(),
                error_class=action.error,
                message=action.message,
            ),
            what=f"the failure of queued job {action.job}",
        )
        self.job_finished(failed)
        self.telemetry.job_finished(job.spec.pool, JobState.FAILED, action.error)

    # ------------------------------------------------------------------ pods

    async def _create(self, action: CreatePod) -> None:
        order = action.order
        try:
            await self.pods.create(order, self.specs[order.pool], action.peer)
        except Exception as exc:  # any failure: the pod never becomes supply
            log.warning("pod %s failed to start: %r", order.pod, exc)
            self.telemetry.pod_start_failed(order.pool, exc)
            self.act(self.core.pod_failed(order.pod, self.clock()))
            return
        self.act(self.core.pod_ready(order.pod, self.clock()))
        await self.pods.annotate(order.pod, pod_annotations.idle())

    async def _delete(self, name: str) -> None:
        await self.pods.delete(name)
        self.act(self.core.pod_deleted(name, self.clock()))

    # ------------------------------------------------------------------ scaling

    async def _reconcile_loop(self) -> None:
        while not self._closing:
            periodic = False
            try:
                await asyncio.wait_for(self._reconcile_now.wait(), self.config.reconcile_s)
            except TimeoutError:
                periodic = True
            self._reconcile_now.clear()
            try:
                self.reconcile(None if periodic else list(self._reconcile_pools))
            except Exception:
                log.exception("reconcile pass failed")

    def reconcile(self, pools: list[str] | None = None) -> None:
        """A scaler pass over `pools` (every pool when None)."""
        self._reconcile_pools.clear()
        now = self.clock()
        for pool in self.specs if pools is None else pools:
            self.act(self.core.reconcile(pool, now))

    def _expire_holds(self) -> None:
        self.act(self.core.tick(self.clock()))

    async def _hold_loop(self) -> None:
        while not self._closing:
            await asyncio.sleep(self.config.hold_tick_s)
            self._expire_holds()

    # ------------------------------------------------------------------ elastic jobs

    async def _elastic_loop(self) -> None:
        elastic = self.core.elastic
        if elastic is None:
            return
        try:
            await asyncio.to_thread(elastic.warm_up)
        except Exception:
            log.exception("round policy warm-up failed")
        while not self._closing:
            await asyncio.sleep(self.config.elastic.tick_s)
            try:
                now = self.clock()
                if self.core.round_due(now):
                    started = time.perf_counter()
                    actions = self.core.round(now)
                    self.elastic.decide_ms.append((time.perf_counter() - started) * 1000.0)
                    self.telemetry.round.labels(self.config.elastic.policy).observe(
                        self.elastic.decide_ms[-1] / 1000.0
                    )
                    self.act(actions)
            except Exception:
                log.exception("elastic round failed")


    # ------------------------------------------------------------------ borrowed capacity

    async def _capacity_loop(self) -> None:
        source = self.capacity
        if source is None:
            return
        while not self._closing:
            try:
                self._reading = await source.read()
            except Exception as exc:  # keep the last good reading: a hiccup changes nothing
                log.warning("capacity source unreadable, keeping the last reading: %s", exc)
            try:
                self.capacity_reading(self._reading)
            except Exception:
                log.exception("capacity reading failed")
            await asyncio.sleep(self.config.capacity_poll_s)

    def capacity_reading(self, reading: dict[str, int]) -> None:
        """Feed one reading of borrowable capacity to the core."""
        self.act(self.core.borrowable_read(reading, self.clock()))

    # ------------------------------------------------------------------ keep-alive

    def silence_s(self, pool: str) -> float | None:
        """The silence `pool`'s agents tolerate before ending their pods and fencing their
        attempts (None: any). One setting for both sides: the agents' fence and this
        broker's lost window (`AttemptRunner`) are derived from it."""
        spec = self.specs.get(pool)
        return self.backend.capabilities.broker_silence_s(spec) if spec is not None else None

    def keepalive_s(self) -> float | None:
        """How often every pod hears from this broker: a quarter of the shortest silence its
        agents tolerate before ending their pods (None: they tolerate any)."""
        bounds = [b for name in self.specs if (b := self.silence_s(name)) is not None]
        return max(min(bounds) / 4, 0.05) if bounds else None

    async def _keepalive_loop(self) -> None:
        period = self.keepalive_s()
        if period is None:
            return
        while not self._closing:
            await asyncio.sleep(period)

            async def ping(name: str) -> None:
                with contextlib.suppress(Exception):
                    await self.pods.agent(name).health()

            await asyncio.gather(*(ping(n) for n in list(self.pods.records)))


def _placeholder(ticket: Ticket) -> JobRecord:
    """A record for a ticket whose stored row the driver does not hold (a race with a
    resync). Its version matches no row, so the conditional commit loses, the pods go back
    and the next resync reads the row: safe, never a second launch."""
    return JobRecord(
        id=ticket.job,
        caller=ticket.caller,
        spec=ticket.spec,
        state=JobState.QUEUED,
        version=-1,
        retries=ticket.retries,
        timings={"submitted": ticket.submitted_at},
    )


def _pod_name(pool: str) -> str:
    return f"{pool}-{secrets.token_hex(4)}"


def _judge_first(running: Running) -> bool:
    """Whether the verdict may go out before the reset: every rank's whole output is stored
    and is acknowledged with the reset (it came on the exit events), so the reset can add
    nothing to the job's log, not even a note of lost bytes; and every pod is marked busy
    with the job, so a broker that dies before the release finds them (recovery resets
    them and keeps their hold) instead of taking a used pod for a fresh one."""
    acks, marking = running.acks, running.marking
    return (
        acks is not None
        and not running.lost
        and all(p.name in acks for p in running.lease.pods)
        and marking is not None
        and marking.done()
        and not marking.cancelled()
        and marking.exception() is None
        and marking.result()
    )
