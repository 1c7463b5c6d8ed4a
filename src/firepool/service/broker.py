"""The broker in real time: asyncio loops around the pure control plane.

Three loops, all thin:
- the dispatcher, woken by submissions, releases and pod readiness (a 3 s tick is only a
  fallback), runs `control.dispatch.dispatch_pass` and hands each lease to an AttemptRunner;
- the reconciler (every 30 s, and at once when a job found no pod) runs the scaler per pool,
  admits creates through the budget ledger and executes the plan;
- the hold ticker (1 s) retires pods whose owner hold ran out;
- the elastic ticker runs a round for elastic training jobs when one is due
  (`service/elastic.py`) and carries out its stops, starts and injected failures.
Exit events pushed by pod agents arrive through `on_exit`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import secrets
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from firepool.api.logs import FileLogSource
from firepool.backends.base import PodBackend
from firepool.control.admission import admit
from firepool.control.budgets import BudgetLedger
from firepool.control.dispatch import AttemptEnd, QueuedJob, Verdict, dispatch_pass, judge
from firepool.control.records import ClaimRequest, Promotion, ReleaseResult, WaitReason
from firepool.control.scaler import QueuedDemand, plan
from firepool.control.tracker import Tracker
from firepool.model import ErrorCode, JobKind, JobState, PoolSpec
from firepool.packages import PackageStore
from firepool.protocol import ExitEvent
from firepool.service.attempt import AttemptRunner, Running
from firepool.service.elastic import ElasticActions, ElasticConfig, ElasticDriver
from firepool.service.pods import PodManager
from firepool.store import JobRecord, JobStore

log = logging.getLogger("firepool.service")


@dataclass(frozen=True)
class BrokerConfig:
    dispatch_tick_s: float = 3.0
    reconcile_s: float = 30.0
    hold_tick_s: float = 1.0
    exit_poll_s: float = 2.0
    ready_timeout_s: float = 120.0
    max_queue_scan: int = 10_000
    elastic: ElasticConfig = field(default_factory=ElasticConfig)


class Broker:
    def __init__(
        self,
        *,
        store: JobStore,
        backend: PodBackend,
        pools: Iterable[PoolSpec],
        ledger: BudgetLedger,
        logs: FileLogSource,
        packages: PackageStore,
        config: BrokerConfig | None = None,
        clock: Callable[[], float] = time.time,
        checkpoint_root: Path | None = None,
    ) -> None:
        self.store = store
        self.backend = backend
        self.specs = {p.name: p for p in pools}
        self.ledger = ledger
        self.logs = logs
        self.packages = packages
        self.config = config = config or BrokerConfig()
        self.clock = clock
        self.tracker = Tracker(self.specs.values())
        self.base_url: str | None = None
        self.pods = PodManager(
            backend,
            self.tracker,
            ledger,
            clock=clock,
            on_ready=self.wake,
            on_promotions=self._promoted,
            callback_url=lambda: f"{self.base_url}/internal/v1/events" if self.base_url else None,
            ready_timeout_s=config.ready_timeout_s,
        )
        self.runner = AttemptRunner(
            store=store,
            tracker=self.tracker,
            pods=self.pods,
            logs=logs,
            clock=clock,
            package_url=lambda digest: f"{self.base_url}/internal/v1/packages/{digest}",
            on_release=self.released,
            exit_poll_s=config.exit_poll_s,
            judge_attempt=self._judge,
            resize_grace_s=config.elastic.stop_grace_s,
        )
        self.elastic = ElasticDriver(
            self.specs,
            config=config.elastic,
            checkpoint_root=checkpoint_root
            or Path(tempfile.mkdtemp(prefix="firepool-checkpoints-")),
            secret=secrets.token_bytes(32),
            clock=clock,
        )
        self.running: dict[str, Running] = {}
        # The queue as the dispatcher knows it: fed by submissions and re-queues at once, and
        # re-read from the store on every fallback tick (which catches anything missed).
        self.queued: dict[str, JobRecord] = {}
        self._resync = True
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake = asyncio.Event()
        self._reconcile_now = asyncio.Event()
        self._loops: list[asyncio.Task[None]] = []
        self._closing = False
        # The last dispatch passes' durations (bounded: the broker runs for months).
        self.dispatch_ms: collections.deque[float] = collections.deque(maxlen=1024)

    # ------------------------------------------------------------------ life cycle

    async def start(self, base_url: str) -> None:
        """Recover, reconcile once, then run the loops. `base_url` is where agents reach us."""
        from firepool.service.recovery import recover

        self._loop = asyncio.get_running_loop()
        self.base_url = base_url
        await recover(self)
        await self.reconcile()
        self._loops = [
            asyncio.create_task(self._dispatch_loop(), name="dispatch"),
            asyncio.create_task(self._reconcile_loop(), name="reconcile"),
            asyncio.create_task(self._hold_loop(), name="holds"),
            asyncio.create_task(self._elastic_loop(), name="elastic"),
        ]

    async def close(self, *, delete_pods: bool = False) -> None:
        """Graceful stop: loops end, running attempts are left to finish on their pods (a
        restarted broker re-attaches them) unless `delete_pods`."""
        self._closing = True
        for task in self._loops:
            task.cancel()
        await asyncio.gather(*self._loops, return_exceptions=True)
        await self.pods.close(delete_pods)

    # ------------------------------------------------------------------ signals (any thread)

    def wake(self) -> None:
        self._signal(self._wake)

    def job_submitted(self, job: JobRecord) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._enqueue, job)

    def _enqueue(self, job: JobRecord) -> None:
        if job.state is JobState.QUEUED and job.id not in self.running:
            self.queued[job.id] = job
            if job.spec.kind is JobKind.ELASTIC:
                self.elastic.submit(job, self.clock())
        self._wake.set()

    def cancel_requested(self, job: JobRecord) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._cancel, job)

    def _cancel(self, job: JobRecord) -> None:
        running = self.running.get(job.id)
        if running is not None:
            running.cancel.set()
        if job.state.terminal:
            self.queued.pop(job.id, None)
        if job.spec.kind is JobKind.ELASTIC:
            self._elastic_act(self.elastic.cancelled(job.id, self.clock()))

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

    def on_exit(self, event: ExitEvent) -> bool:
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

    # ------------------------------------------------------------------ dispatch

    async def _dispatch_loop(self) -> None:
        while not self._closing:
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=self.config.dispatch_tick_s)
            except TimeoutError:
                self._resync = True
            self._wake.clear()
            try:
                await self.dispatch_once()
            except Exception:
                log.exception("dispatch pass failed")

    async def dispatch_once(self) -> None:
        if self._resync:
            self._resync = False
            jobs = await asyncio.to_thread(
                self.store.list_jobs, states=[JobState.QUEUED], limit=self.config.max_queue_scan
            )
            self.queued = {j.id: j for j in jobs if j.id not in self.running}
        start = time.perf_counter()
        candidates: list[QueuedJob] = []
        for job in list(self.queued.values()):
            if job.spec.pool not in self.specs:
                del self.queued[job.id]
                await self._fail_queued(
                    job,
                    ErrorCode.UNKNOWN_POOL,
                    f"pool {job.spec.pool!r} is not in this broker's catalog",
                )
                if job.spec.kind is JobKind.ELASTIC:
                    self._elastic_act(self.elastic.cancelled(job.id, self.clock()))
                continue
            pods = job.spec.pods
            if job.spec.kind is JobKind.ELASTIC:
                self.elastic.submit(job, self.clock())  # a no-op unless the hook was missed
                world = self.elastic.dispatchable(job.id)
                if world is None:
                    continue  # waits for a round to size it
                pods = world
            candidates.append(_queued(job, pods))
        result = dispatch_pass(self.tracker, candidates, self.clock())
        for lease in result.leases:
            running = Running(self.queued.pop(lease.job), lease)
            if running.job.spec.kind is JobKind.ELASTIC:
                self.elastic.dispatched(lease.job, running.job.attempt)
                running.extra_env = self.elastic.environment(running.job, self.base_url)
            self.running[lease.job] = running
            self.pods.spawn(self._run(running))
        self.dispatch_ms.append((time.perf_counter() - start) * 1000.0)
        if any(w.reason is WaitReason.NO_CAPACITY for w in result.waiting):
            self._signal(self._reconcile_now)

    async def reattach(self, running: Running) -> None:
        try:
            await self.runner.resume(running)
        except Exception:
            log.exception("re-attached attempt %s crashed in the broker", running.job.attempt)
        finally:
            self.running.pop(running.job.id, None)
            self.wake()

    async def _run(self, running: Running) -> None:
        elastic = running.job.spec.kind is JobKind.ELASTIC
        try:
            final = await self.runner.run(running)
            if final is None:  # the commit lost a race: the store has the truth
                self._resync = True
                if elastic:
                    self.elastic.lost_race(running.job.id)
            elif final.state is JobState.QUEUED:  # a retry
                self.queued[final.id] = final
            if final is not None and elastic:
                self._elastic_act(self.elastic.exited(final, self.clock()))
        except Exception:
            log.exception("attempt %s crashed in the broker", running.job.attempt)
        finally:
            self.running.pop(running.job.id, None)
            self.wake()

    def _judge(self, job: JobRecord, end: AttemptEnd) -> Verdict:
        if job.spec.kind is JobKind.ELASTIC:
            return self.elastic.judge(job, end)
        return judge(end, job.retries, job.spec.max_retries)

    def released(self, result: ReleaseResult) -> None:
        """Act on a release: delete retired pods, start promoted jobs, rescale, redispatch."""
        for retired in result.retired:
            self.pods.spawn(self.pods.delete(retired.pod))
        self._promoted(result.promoted)
        self._signal(self._reconcile_now)
        self.wake()

    def _promoted(self, promotions: list[Promotion]) -> None:
        for promotion in promotions:
            running = self.running.get(promotion.job)
            if running is not None and promotion.job_launchable:
                running.gate.set()

    # ------------------------------------------------------------------ scaling

    async def _reconcile_loop(self) -> None:
        while not self._closing:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._reconcile_now.wait(), self.config.reconcile_s)
            self._reconcile_now.clear()
            try:
                await self.reconcile()
            except Exception:
                log.exception("reconcile pass failed")

    async def reconcile(self) -> None:
        now = self.clock()
        for spec in self.specs.values():
            demand = [
                QueuedDemand(j.caller, j.spec.pods, j.spec.single_use, j.spec.image)
                for j in self.queued.values()
                if j.spec.pool == spec.name
            ]
            scale = plan(
                spec,
                self.tracker.pool_pods(spec.name),
                self.tracker.pool_groups(spec.name),
                demand,
                now,
                headroom_units=self.ledger.headroom(spec.budget_resource),
            )
            for order in admit(scale, spec, self.ledger, functools.partial(_pod_name, spec.name)):
                self.tracker.add_pod(
                    order.pod,
                    spec.name,
                    now,
                    role=order.role,
                    group=order.group,
                    single_use=order.single_use,
                    image=order.image,
                )
                self.pods.spawn(self.pods.create(order, spec))
            for retired in scale.retire:
                if self.tracker.retire(retired.pod, retired.reason):
                    self.pods.spawn(self.pods.delete(retired.pod))

    # ------------------------------------------------------------------ elastic jobs

    async def _elastic_loop(self) -> None:
        try:
            await asyncio.to_thread(self.elastic.warm_up)
        except Exception:
            log.exception("round policy warm-up failed")
        while not self._closing:
            await asyncio.sleep(self.config.elastic.tick_s)
            try:
                actions = self.elastic.round(self.clock())
                if actions is not None:
                    self._elastic_act(actions)
            except Exception:
                log.exception("elastic round failed")

    def _elastic_act(self, actions: ElasticActions) -> None:
        """Carry out a driver's answer: graceful stops, failures to inject, unschedulable jobs
        to fail, and a dispatch pass for decided starts."""
        for job_id in actions.stop:
            running = self.running.get(job_id)
            if running is not None:
                running.stop.set()
        now = self.clock()
        for failure in actions.failures:
            running = self.running.get(failure.job_id)
            if running is None:
                continue
            attempt = running.job.attempt
            loop = asyncio.get_running_loop()
            loop.call_later(max(failure.at - now, 0.0), self._fail_later, running, attempt)
        for job_id, reason in actions.unschedulable:
            self.pods.spawn(self._unschedulable(job_id, reason))
        if actions.wake:
            self.wake()

    def _fail_later(self, running: Running, attempt: str) -> None:
        self.pods.spawn(self._inject_failure(running, attempt))

    async def _inject_failure(self, running: Running, attempt: str) -> None:
        """Experiments: SIGKILL every rank of the attempt, if it is still the live one."""
        live = self.running.get(running.job.id) is running and running.job.attempt == attempt
        if live and running.launched:  # a failure drawn before the launch is not delivered
            self.elastic.injected += 1
            await self.runner.kill(running)

    async def _unschedulable(self, job_id: str, reason: str) -> None:
        job = self.queued.pop(job_id, None) or await asyncio.to_thread(self.store.get, job_id)
        if job is None or job.state is not JobState.QUEUED:
            return
        await self._fail_queued(
            job, ErrorCode.UNSCHEDULABLE, f"no size of this elastic job can run here: {reason}"
        )

    async def _fail_queued(self, job: JobRecord, error: ErrorCode, message: str) -> None:
        """A queued job that can never run ends FAILED with a typed class, without an attempt."""
        await asyncio.to_thread(
            self.store.finish,
            job,
            JobState.FAILED,
            now=self.clock(),
            error_class=error,
            message=message,
        )

    async def _hold_loop(self) -> None:
        while not self._closing:
            await asyncio.sleep(self.config.hold_tick_s)
            for retired in self.tracker.expire_holds(self.clock()):
                self.pods.spawn(self.pods.delete(retired.pod))


def _queued(job: JobRecord, pods: int) -> QueuedJob:
    spec = job.spec
    submitted = job.timings.get("submitted") or 0.0
    return QueuedJob(
        ClaimRequest(
            job=job.id,
            caller=job.caller,
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


def _pod_name(pool: str) -> str:
    return f"{pool}-{secrets.token_hex(4)}"
