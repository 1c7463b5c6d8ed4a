"""The dispatch loop: a pass whenever something woke the dispatcher (a `Dispatch` action:
submissions, releases, pod readiness), and on a slow fallback tick that also re-reads the
store's queue. A store outage is logged once and waited out, never a crash of the loop."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from firepool.model import StoreUnavailableError
from firepool.service.dispatcher import Dispatcher

log = logging.getLogger("firepool.service")


async def dispatch_loop(
    dispatcher: Dispatcher, wake: asyncio.Event, tick_s: float, closing: Callable[[], bool]
) -> None:
    store_down = False
    while not closing():
        try:
            await asyncio.wait_for(wake.wait(), timeout=tick_s)
        except TimeoutError:
            dispatcher.resync_due = True
        wake.clear()
        try:
            await dispatcher.dispatch_once()
        except StoreUnavailableError as err:
            dispatcher.resync_due = True  # the queue read failed: read it again next pass
            if not store_down:
                log.warning("dispatch passes wait for the store: %s", err)
            store_down = True
            continue
        except Exception:
            log.exception("dispatch pass failed")
        if store_down:
            log.warning("dispatch passes read the store again")
            store_down = False
