"""Riding out a store outage: the broker's writes wait for the database instead of failing.

An attempt's exit does not wait for the database: its pods are reset and its verdict decided
in memory, and the write that records it is kept (in the awaiting task) and tried again with a
capped, jittered backoff until the store answers. Each try is the same conditional write, so
a commit that did land before the connection broke makes the next try lose its race, which
the caller already treats as "re-read the row": nothing is written twice.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from firepool.model import StoreUnavailableError

log = logging.getLogger("firepool.service.outage")

T = TypeVar("T")

#: First pause, growth and cap of the backoff between tries while the store is down: short
#: enough that a restarted database sees its backlog written within seconds, long enough that
#: a broker with many finished attempts does not hammer a server that is coming up.
FIRST_PAUSE_S = 0.2
MAX_PAUSE_S = 5.0


class Backoff:
    """Capped exponential pauses with jitter (each in [delay/2, delay])."""

    def __init__(self, first_s: float = FIRST_PAUSE_S, cap_s: float = MAX_PAUSE_S) -> None:
        self._next = first_s
        self._cap = cap_s

    def delay(self) -> float:
        current = min(self._next, self._cap)
        self._next = current * 2
        return current * (0.5 + random.random() / 2)


async def until_stored(
    write: Callable[[], Awaitable[T]], *, what: str, backoff: Backoff | None = None
) -> T:
    """`await write()` again and again while it raises `StoreUnavailableError`; its result
    once the store takes it. Any other error propagates at once."""
    pauses = backoff or Backoff()
    failures = 0
    while True:
        try:
            result = await write()
        except StoreUnavailableError as err:
            failures += 1
            if failures == 1:
                log.warning("store unavailable, keeping %s until it is back: %s", what, err)
            await asyncio.sleep(pauses.delay())
            continue
        if failures:
            log.warning("store back: %s written after %d failed tries", what, failures)
        return result
