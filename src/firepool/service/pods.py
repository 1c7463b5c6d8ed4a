"""Executing the control plane's pod decisions against a real backend.

Create orders come from `control.admission` with their budget already reserved; this module
calls the backend, reports readiness to the tracker, and on any failure gives the pod and its
reservation back. Deletion always ends in `tracker.pod_deleted` and a ledger release, so a
retried or failed delete can never leak budget.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from firepool.backends.agent_client import AgentClient
from firepool.backends.base import PodBackend, PodCreate, PodRecord
from firepool.control.admission import CreateOrder
from firepool.control.budgets import BudgetLedger
from firepool.control.records import Promotion, RetireReason
from firepool.control.tracker import Tracker
from firepool.model import PodRole, PoolSpec

log = logging.getLogger("firepool.service.pods")

PromotionHandler = Callable[[list[Promotion]], None]


class PodManager:
    def __init__(
        self,
        backend: PodBackend,
        tracker: Tracker,
        ledger: BudgetLedger,
        *,
        clock: Callable[[], float],
        on_ready: Callable[[], None],
        on_promotions: PromotionHandler,
        callback_url: Callable[[], str | None],
        ready_timeout_s: float = 120.0,
    ) -> None:
        self.backend = backend
        self.tracker = tracker
        self.ledger = ledger
        self.clock = clock
        self.on_ready = on_ready
        self.on_promotions = on_promotions
        self.callback_url = callback_url
        self.ready_timeout_s = ready_timeout_s
        self.records: dict[str, PodRecord] = {}
        self._clients: dict[str, AgentClient] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    # ------------------------------------------------------------------ tasks

    def spawn(self, coro: Coroutine[Any, Any, object]) -> None:
        """Run a background step, keeping a reference so it is neither lost nor collected."""
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self) -> None:
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # ------------------------------------------------------------------ create / delete

    async def create(self, order: CreateOrder, spec: PoolSpec) -> None:
        """Create the pod the tracker already tracks as `starting`; on failure retire it."""
        try:
            devices: tuple[str, ...] | None = None
            if order.role is PodRole.STANDBY and order.group is not None:
                active = self.records.get(order.group)
                if active is None:
                    raise RuntimeError(f"standby {order.pod}: its group {order.group} is gone")
                devices = active.devices
            annotations = {"state": "starting", "role": order.role.value}
            if order.group is not None:
                annotations["group"] = order.group
            if order.single_use:
                annotations["single_use"] = "1"
            record = await self.backend.create(
                PodCreate(
                    pool=spec,
                    role=order.role,
                    devices=devices,
                    annotations=annotations,
                    callback_url=self.callback_url(),
                    name=order.pod,
                )
            )
            self.records[order.pod] = record
            await self.backend.wait_ready(order.pod, timeout=self.ready_timeout_s)
            self.tracker.pod_ready(order.pod, self.clock())
            await self.annotate(order.pod, {"state": "idle"})
            self.on_ready()
        except Exception as exc:  # any failure: the pod never becomes supply
            log.warning("pod %s failed to start: %r", order.pod, exc)
            self.tracker.retire(order.pod, RetireReason.POD_FAILED)
            await self.delete(order.pod)

    async def delete(self, name: str) -> None:
        """Delete through the backend, then drop it from the tracker and release its budget."""
        client = self._clients.pop(name, None)
        if client is not None:
            await client.aclose()
        try:
            await self.backend.delete(name)
        except Exception as exc:  # the backend is idempotent; record and go on
            log.warning("deleting pod %s: %r", name, exc)
        self.records.pop(name, None)
        freed, promoted = self.tracker.pod_deleted(name)
        if freed is not None:
            self.ledger.release(freed)
        if promoted:
            self.on_promotions(promoted)

    async def annotate(self, name: str, changes: Mapping[str, str | None]) -> None:
        """Best effort: ownership annotations let a restarted broker rebuild holds."""
        try:
            record = await self.backend.annotate(name, changes)
            self.records[name] = record
        except Exception as exc:
            log.info("annotating pod %s: %r", name, exc)

    def agent(self, name: str) -> AgentClient:
        client = self._clients.get(name)
        if client is None:
            record = self.records[name]
            client = self._clients[name] = self.backend.agent(record)
        return client

    async def close(self, delete_pods: bool) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)
        if delete_pods:
            await asyncio.gather(
                *(self.delete(name) for name in list(self.records)), return_exceptions=True
            )
        for client in self._clients.values():
            with contextlib.suppress(Exception):
                await client.aclose()
        self._clients.clear()
