"""The broker in real time: the composition root of the asyncio executor of the broker core.

Every decision is `control/core.py`'s. `Broker` wires the collaborators that feed the core
events with the real clock and carry out the actions it returns with real I/O, starts the
loops and answers the API's hooks (`api/hooks.py`) by delegating to them:
- `ActionExecutor` (`service/executor.py`) carries out each action, in order;
- `Dispatcher` (`service/dispatcher.py`) keeps the queued jobs' stored records and runs
  `core.dispatch`; `AttemptTasks` (`service/attempt_tasks.py`) runs each `StartAttempt` as a
  task (commit, launch on the core's go, wait for every rank's exit, reset, `attempt_over`);
  `Verdicts` (`service/verdicts.py`) writes the verdicts;
- `BrokerViews` (`service/views.py`) answers the read models;
- `Recovery` (`service/recovery.py`) and `PoolEdits` (`service/pool_edits.py`) run at start;
- the loops, one module each under `service/loops/`: dispatch (woken by a `Dispatch` action,
  a 3 s tick is only a fallback that also re-reads the store's queue), reconcile (the pools a
  `Reconcile` action named, and every pool every 30 s), holds (a 1 s fallback to each
  `HoldPod`'s own timer), elastic rounds, keep-alive, the dashboard's timeline, borrowed
  capacity and the exclusivity sweep after a restart.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import tempfile
import time
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.registry import Collector

from firepool.backends.base import PodBackend
from firepool.control.actions import Action
from firepool.control.budgets import BudgetLedger
from firepool.control.core import BrokerCore, CoreConfig
from firepool.control.reservations import ReservationRules
from firepool.control.rollout import RolloutProgress
from firepool.control.scaler import ScalerConfig
from firepool.control.tracker import Tracker
from firepool.model import PodInfo, PoolSpec, PoolStats, RoundAllocation, TimelinePoint
from firepool.packages import PackageStore
from firepool.protocol import ExitEvent
from firepool.service.attempt import AttemptRunner, LogSink, Running
from firepool.service.attempt_tasks import AttemptTasks
from firepool.service.capacity import CapacitySource
from firepool.service.dispatcher import Dispatcher
from firepool.service.elastic import ElasticConfig, ElasticDriver
from firepool.service.executor import ActionExecutor
from firepool.service.loops import keepalive
from firepool.service.loops.capacity import capacity_loop
from firepool.service.loops.dispatch import dispatch_loop
from firepool.service.loops.exclusivity import sweep_exclusivity
from firepool.service.loops.holds import hold_loop
from firepool.service.loops.reconcile import reconcile_loop, reconcile_pass
from firepool.service.loops.rounds import round_loop
from firepool.service.loops.timeline import timeline_loop
from firepool.service.pods import PodManager
from firepool.service.pool_edits import PoolEdits
from firepool.service.recovery import Recovery
from firepool.service.telemetry import BrokerTelemetry
from firepool.service.verdicts import FinishedListeners, Verdicts
from firepool.service.views import BrokerViews
from firepool.service.wakeups import Wakeups
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
        self.capacity = capacity
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
        self.telemetry = BrokerTelemetry()  # served at /metrics through `metric_collectors`
        self.wakeups = Wakeups()
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
        self.finished = FinishedListeners()
        self.dispatcher = Dispatcher(
            core=self.core,
            store=store,
            act=self.act,
            clock=clock,
            telemetry=self.telemetry,
            max_queue_scan=config.max_queue_scan,
        )
        self.verdicts = Verdicts(
            core=self.core,
            store=store,
            runner=self.runner,
            dispatcher=self.dispatcher,
            telemetry=self.telemetry,
            finished=self.finished,
            act=self.act,
            spawn=self.pods.spawn,
            clock=clock,
        )
        self.attempts = AttemptTasks(
            core=self.core,
            pods=self.pods,
            runner=self.runner,
            elastic=self.elastic,
            dispatcher=self.dispatcher,
            verdicts=self.verdicts,
            telemetry=self.telemetry,
            act=self.act,
            clock=clock,
            base_url=lambda: self.base_url,
        )
        self.executor = ActionExecutor(
            core=self.core,
            pods=self.pods,
            attempts=self.attempts,
            verdicts=self.verdicts,
            wakeups=self.wakeups,
            telemetry=self.telemetry,
            clock=clock,
        )
        self.views = BrokerViews(
            core=self.core,
            ledger=ledger,
            pods=self.pods,
            running=self.attempts.running,
            telemetry=self.telemetry,
            clock=clock,
        )
        self.pool_edits = PoolEdits(core=self.core, store=store, act=self.act, clock=clock)
        self._loops: list[asyncio.Task[None]] = []

    @property
    def tracker(self) -> Tracker:
        """Read-only use (listings, metrics): every change goes through the core."""
        return self.core.tracker

    @property
    def running(self) -> dict[str, Running]:
        """The live attempts by job id."""
        return self.attempts.running

    @property
    def dispatch_ms(self) -> Iterable[float]:
        """The last dispatch passes' durations, in milliseconds."""
        return self.dispatcher.dispatch_ms

    @property
    def recovery_s(self) -> float:
        return self.dispatcher.recovery_s

    @property
    def dispatching_after_start_s(self) -> float | None:
        """Start (recovery included) to the first dispatch pass."""
        return self.dispatcher.after_start_s

    # ------------------------------------------------------------------ life cycle

    async def start(self, base_url: str) -> None:
        """Recover, reconcile once, then run the loops. `base_url` is where agents reach us."""
        self.wakeups.loop = asyncio.get_running_loop()
        self.base_url = base_url
        await self.pool_edits.restore()  # before recovery adopts pods of an edited template
        started = self.dispatcher.started = time.perf_counter()
        await self._recovery().recover()
        self.dispatcher.recovery_s = time.perf_counter() - started
        # Restart to dispatching: the first pass runs now, before the scaler's pod creates
        # (each forks on this loop) and before the first tick; queued jobs are waiting.
        try:
            await self.dispatch_once()
        except Exception:
            log.exception("first dispatch pass failed")
        self.reconcile()
        self._loops = [asyncio.create_task(c, name=n) for n, c in self._loop_coroutines()]

    def _recovery(self) -> Recovery:
        return Recovery(
            backend=self.backend,
            store=self.store,
            core=self.core,
            pods=self.pods,
            attempts=self.attempts,
            runner=self.runner,
            logs=self.logs,
            telemetry=self.telemetry,
            queue_read=self.queue_read,
            max_queue_scan=self.config.max_queue_scan,
            silence_s=self.silence_s,
            act=self.act,
            clock=self.clock,
        )

    def _loop_coroutines(self) -> list[tuple[str, Coroutine[Any, Any, None]]]:
        """Each background loop by name, over the collaborators it needs."""
        config, wakeups, closing = self.config, self.wakeups, self.wakeups.is_closing
        elastic = config.elastic
        loops: list[tuple[str, Coroutine[Any, Any, None]]] = [
            ("dispatch", dispatch_loop(self.dispatcher, wakeups.dispatch,
                                       config.dispatch_tick_s, closing)),
            ("reconcile", reconcile_loop(self.reconcile, wakeups, config.reconcile_s, closing)),
            ("holds", hold_loop(self.executor.expire_holds, config.hold_tick_s, closing)),
            ("elastic", round_loop(self.core, self.elastic, self.telemetry, self.act,
                                   self.clock, tick_s=elastic.tick_s, policy=elastic.policy,
                                   closing=closing)),
            ("keepalive", keepalive.keepalive_loop(self.pods, self.keepalive_s(), closing)),
            ("timeline", timeline_loop(self.sample_timeline, config.timeline_s, closing)),
            ("exclusivity", sweep_exclusivity(self.backend, self.core, self.act, self.clock,
                                              closing)),
        ]  # fmt: skip
        if self.capacity is not None:
            feed = capacity_loop(self.capacity, self.capacity_reading, config.capacity_poll_s,
                                 closing)  # fmt: skip
            loops.append(("capacity", feed))
        return loops

    @property
    def closing(self) -> bool:
        return self.wakeups.closing

    async def close(self, *, delete_pods: bool = False) -> None:
        """Graceful stop: loops end, running attempts are left to finish on their pods (a
        restarted broker re-attaches them) unless `delete_pods`."""
        self.wakeups.closing = True
        for task in self._loops:
            task.cancel()
        await asyncio.gather(*self._loops, return_exceptions=True)
        await self.pods.close(delete_pods)
        await self.backend.detach()  # a cluster backend's watch thread ends with the broker

    # ------------------------------------------------------------------ executing actions

    def act(self, actions: Iterable[Action]) -> None:
        """Carry out the core's actions, in order. Runs on the event loop, never blocks."""
        self.executor.act(actions)

    async def dispatch_once(self) -> None:
        await self.dispatcher.dispatch_once()

    def queue_read(self, jobs: list[JobRecord]) -> None:
        """The store's queue, just read: it replaces the core's."""
        self.dispatcher.queue_read(jobs)

    def reconcile(self, pools: list[str] | None = None) -> None:
        """A scaler pass over `pools` (every pool when None)."""
        reconcile_pass(self.core, self.wakeups, self.act, self.clock(), pools)

    def capacity_reading(self, reading: dict[str, int]) -> None:
        """Feed one reading of borrowable capacity to the core."""
        self.act(self.core.borrowable_read(reading, self.clock()))

    async def reattach(self, running: Running) -> None:
        await self.attempts.reattach(running)

    # ------------------------------------------------------------------ keep-alive

    def silence_s(self, pool: str) -> float | None:
        """The silence `pool`'s agents tolerate before ending their pods and fencing their
        attempts (None: any): the backend's capability, for the agents' fence and this
        broker's lost window (`AttemptRunner`) alike."""
        return keepalive.silence_s(self.backend.capabilities, self.specs, pool)

    def keepalive_s(self) -> float | None:
        """How often every pod hears from this broker (None: never needed)."""
        return keepalive.keepalive_s(self.backend.capabilities, self.specs)

    # ------------------------------------------------------------------ hooks: job signals

    def wake(self) -> None:
        self.wakeups.signal(self.wakeups.dispatch)

    def job_submitted(self, job: JobRecord) -> None:
        self.wakeups.call_soon(self.dispatcher.submitted, job)

    def cancel_requested(self, job: JobRecord) -> None:
        self.wakeups.call_soon(self.dispatcher.cancelled, job)

    def subscribe_finished(self, listener: Callable[[JobRecord], None]) -> None:
        self.finished.subscribe(listener)

    def job_finished(self, job: JobRecord) -> None:
        """After a terminal state is durable: callers long-polling the job answer at once."""
        self.finished.tell(job)

    # ------------------------------------------------------------------ hooks: pods

    def exit_event(self, event: ExitEvent) -> bool:
        return self.attempts.exit_event(event)

    def pod_for_secret(self, token: str, pod: str | None) -> str | None:
        return self.views.pod_for_secret(token, pod)

    def pod_may_fetch(self, pod: str, digest: str) -> bool:
        return self.views.pod_may_fetch(pod, digest)

    # ------------------------------------------------------------------ hooks: read models

    def pod_list(self) -> list[PodInfo]:
        return self.views.pod_list()

    def pool_stats(self) -> list[PoolStats]:
        return self.views.pool_stats()

    def metric_collectors(self) -> list[Collector]:
        return self.views.metric_collectors()

    def timeline(self) -> list[TimelinePoint]:
        return self.views.timeline()

    def round_allocations(self) -> list[RoundAllocation]:
        return self.views.round_allocations()

    def rollouts(self) -> list[RolloutProgress]:
        return self.views.rollouts()

    def sample_timeline(self) -> None:
        self.views.sample_timeline()

    # ------------------------------------------------------------------ hooks: pools, progress

    async def apply_pool(self, spec: PoolSpec) -> PoolSpec:
        """An admin's edit of a pool: stored, then run by the core (a new template rolls the
        pods over); the pods created from now on take the spec returned."""
        return await self.pool_edits.apply(spec)

    def progress_token_ok(self, attempt: str, token: str) -> bool:
        return self.elastic.token_matches(attempt, token)

    def progress(
        self, job_id: str, attempt: str, *, samples_per_s: float | None, fraction: float | None
    ) -> bool:
        return self.elastic.progress(
            job_id, attempt, self.clock(), samples_per_s=samples_per_s, fraction=fraction
        )


def _pod_name(pool: str) -> str:
    return f"{pool}-{secrets.token_hex(4)}"
