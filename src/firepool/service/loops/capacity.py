"""The borrowed-capacity loop: read the capacity source (the units owners reserved and do
not use) every `period_s` and feed each reading to the core (`borrowable_read`). A failed
read keeps the last good reading: a hiccup of the source changes no budget."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from firepool.service.capacity import CapacitySource

log = logging.getLogger("firepool.service")


async def capacity_loop(
    source: CapacitySource,
    feed: Callable[[dict[str, int]], None],
    period_s: float,
    closing: Callable[[], bool],
) -> None:
    reading: dict[str, int] = {}
    while not closing():
        try:
            reading = await source.read()
        except Exception as exc:  # keep the last good reading: a hiccup changes nothing
            log.warning("capacity source unreadable, keeping the last reading: %s", exc)
        try:
            feed(reading)
        except Exception:
            log.exception("capacity reading failed")
        await asyncio.sleep(period_s)
