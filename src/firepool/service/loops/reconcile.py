"""The scaler loop: `core.reconcile` for the pools a `Reconcile` action asked for, as soon
as one does, and for every pool on the periodic pass (default 30 s)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from firepool.control.actions import Action
from firepool.control.core import BrokerCore
from firepool.service.wakeups import Wakeups

log = logging.getLogger("firepool.service")


def reconcile_pass(
    core: BrokerCore,
    wakeups: Wakeups,
    act: Callable[[Iterable[Action]], None],
    now: float,
    pools: list[str] | None = None,
) -> None:
    """A scaler pass over `pools` (every pool when None); the pools asked for are served."""
    wakeups.reconcile_pools.clear()
    for pool in core.specs if pools is None else pools:
        act(core.reconcile(pool, now))


async def reconcile_loop(
    reconcile: Callable[[list[str] | None], None],
    wakeups: Wakeups,
    period_s: float,
    closing: Callable[[], bool],
) -> None:
    while not closing():
        periodic = False
        try:
            await asyncio.wait_for(wakeups.reconcile.wait(), period_s)
        except TimeoutError:
            periodic = True
        wakeups.reconcile.clear()
        try:
            reconcile(None if periodic else list(wakeups.reconcile_pools))
        except Exception:
            log.exception("reconcile pass failed")
