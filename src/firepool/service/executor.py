"""Carrying out the core's actions, in order, on the event loop (never blocking).

Each action goes to the one collaborator that owns it: wake-ups to the loops' events,
attempts to `AttemptTasks`, verdict writes to `Verdicts`, pod creates and deletes to tasks
here. What any of them learns is fed back to the core as an event, and the actions that
answer it come back through `act`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Iterable

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
)
from firepool.control.core import BrokerCore
from firepool.service.attempt_tasks import AttemptTasks
from firepool.service.pods import PodManager
from firepool.service.telemetry import BrokerTelemetry
from firepool.service.verdicts import Verdicts
from firepool.service.wakeups import Wakeups

log = logging.getLogger("firepool.service")


class ActionExecutor:
    def __init__(
        self,
        *,
        core: BrokerCore,
        pods: PodManager,
        attempts: AttemptTasks,
        verdicts: Verdicts,
        wakeups: Wakeups,
        telemetry: BrokerTelemetry,
        clock: Callable[[], float],
    ) -> None:
        self.core = core
        self.pods = pods
        self.attempts = attempts
        self.verdicts = verdicts
        self.wakeups = wakeups
        self.telemetry = telemetry
        self.clock = clock

    def act(self, actions: Iterable[Action]) -> None:
        """Carry out the core's actions, in order. Runs on the event loop, never blocks."""
        for action in actions:
            if isinstance(action, Dispatch):
                self.wakeups.dispatch.set()
            elif isinstance(action, Reconcile):
                self.wakeups.ask_reconcile(action.pool)
            elif isinstance(action, StartAttempt):
                self.attempts.start(action)
            elif isinstance(action, LaunchAttempt):
                self.attempts.launch(action.job)
            elif isinstance(action, HoldPod):
                self.pods.spawn(self.pods.annotate(action.pod, pod_annotations.held(action.until)))
                self._at(action.until, self.expire_holds)
            elif isinstance(action, DeletePod):
                self.telemetry.deleted(self.core.tracker.get(action.pod), action.reason)
                self.pods.spawn(self._delete(action.pod))
            elif isinstance(action, CreatePod):
                self.telemetry.scaler.labels(action.order.pool, "create", action.order.role).inc()
                self.pods.spawn(self._create(action))
            elif isinstance(action, RecordVerdict):
                self.verdicts.record(action)
            elif isinstance(action, StopAttempt):
                self.attempts.stop(action)
            elif isinstance(action, FailQueued):
                self.verdicts.fail_queued(action)
            elif isinstance(action, InjectFailure):
                self._at(action.at, functools.partial(self._failure_due, action))

    def expire_holds(self) -> None:
        """The core's tick: holds whose time is up expire (their pods retire)."""
        self.act(self.core.tick(self.clock()))

    def _failure_due(self, action: InjectFailure) -> None:
        self.act(self.core.failure_due(action.job, action.attempt))

    def _at(self, when: float, callback: Callable[[], None]) -> None:
        loop = asyncio.get_running_loop()
        loop.call_later(max(when - self.clock(), 0.0), callback)

    async def _create(self, action: CreatePod) -> None:
        order = action.order
        try:
            await self.pods.create(order, self.core.specs[order.pool], action.peer)
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
