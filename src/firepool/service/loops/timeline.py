"""The timeline loop: one sample of held vs busy pods (and start latencies) for the
dashboard's plots every `period_s`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def timeline_loop(
    sample: Callable[[], None], period_s: float, closing: Callable[[], bool]
) -> None:
    while not closing():
        sample()
        await asyncio.sleep(period_s)
