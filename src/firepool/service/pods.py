"""Pods through a real backend: the service's hands for the core's CreatePod and DeletePod.

Only I/O lives here: the backend's create, readiness wait and delete, agent clients and
best-effort annotations. What a ready, failed or deleted pod means (supply, retirement, budget
released, a gate passed on) is the core's; the broker reports each outcome to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

import httpx

from firepool.backends.agent_client import AgentClient
from firepool.backends.base import PodBackend, PodCreate, PodRecord
from firepool.control import pod_annotations
from firepool.control.admission import CreateOrder
from firepool.model import PoolSpec

log = logging.getLogger("firepool.service.pods")


class PodManager:
    def __init__(
        self,
        backend: PodBackend,
        *,
        callback_url: Callable[[], str | None],
        ready_timeout_s: float = 120.0,
    ) -> None:
        self.backend = backend
        self.callback_url = callback_url
        self.ready_timeout_s = ready_timeout_s
        self.records: dict[str, PodRecord] = {}
        self._clients: dict[str, AgentClient] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        # Annotations of one pod are written in the order they were asked for, so a release's
        # "held" never lands before the launch's "running".
        self._annotating: dict[str, asyncio.Lock] = {}
        # The HTTP client stack's one-time set-up (lazy imports, ~0.1 s) happens here, where
        # the broker is built, not in the first agent client a restart's recovery creates.
        httpx.AsyncClient(verify=False)

    # ------------------------------------------------------------------ tasks

    def spawn(self, coro: Coroutine[Any, Any, object]) -> asyncio.Task[Any]:
        """Run a background step, keeping a reference so it is neither lost nor collected."""
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def drain(self) -> None:
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # ------------------------------------------------------------------ create / delete

    async def create(self, order: CreateOrder, spec: PoolSpec, peer: str | None) -> None:
        """Create the pod and wait until its agent answers; raises on any failure. A standby
        is pinned to the devices of `peer`, a live pod on its card."""
        devices: tuple[str, ...] | None = None
        if order.group is not None and order.holder is None:  # a standby
            record = self.records.get(peer) if peer is not None else None
            if record is None:
                raise RuntimeError(f"standby {order.pod}: no live pod left on its card")
            devices = record.devices
        created = await self.backend.create(
            PodCreate(
                pool=spec,
                role=order.role,
                devices=devices,
                annotations=pod_annotations.starting(order),
                callback_url=self.callback_url(),
                name=order.pod,
                group=peer if order.holder is None else None,
                image=order.image,
            )
        )
        self.records[order.pod] = created
        await self.backend.wait_ready(order.pod, timeout=self.ready_timeout_s)
        # A cluster pod learns its address (and its agent's URL) only once it runs.
        ready = await self.backend.get(order.pod)
        if ready is not None:
            self.records[order.pod] = ready

    async def delete(self, name: str) -> None:
        """Delete through the backend (idempotent); failures are logged, never raised, so the
        core always hears that the pod is gone and its budget can never leak."""
        client = self._clients.pop(name, None)
        if client is not None:
            await client.aclose()
        try:
            await self.backend.delete(name)
        except Exception as exc:
            log.warning("deleting pod %s: %r", name, exc)
        self.records.pop(name, None)
        self._annotating.pop(name, None)

    async def annotate(self, name: str, changes: Mapping[str, str | None]) -> bool:
        """Best effort: ownership annotations let a restarted broker rebuild holds. Whether
        they were written."""
        lock = self._annotating.setdefault(name, asyncio.Lock())
        async with lock:
            if name not in self.records:
                return False
            try:
                self.records[name] = await self.backend.annotate(name, changes)
            except Exception as exc:
                log.info("annotating pod %s: %r", name, exc)
                return False
            return True

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
