"""The hold loop: the core's tick every second, a fallback for the timer each `HoldPod`
sets at its own expiry (a hold whose timer was lost still ends)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def hold_loop(expire: Callable[[], None], tick_s: float, closing: Callable[[], bool]) -> None:
    while not closing():
        await asyncio.sleep(tick_s)
        expire()
