"""Create/delete pacing and retries: a token bucket plus exponential backoff.

The paper's broker paces pod creates and deletes at 100 per second so that a burst of demand
(or a mass scale-down) never floods the API server; the API server's own priority-and-fairness
answers 429 when it is overloaded anyway, and 5xx when it is sick. Both get retried with
jittered exponential backoff (or the server's Retry-After); anything else fails at once.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from firepool.backends.kubernetes.errors import BackendError, map_exception, retry_after

log = logging.getLogger("firepool.backends.kubernetes")

T = TypeVar("T")


class TokenBucket:
    """`qps` tokens per second, at most `burst` saved up. `acquire` waits for one token.

    Waiters are served in arrival order (one lock), so a steady stream of creates cannot starve
    the deletes that would free capacity."""

    def __init__(
        self, qps: float, burst: int, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError("qps must be > 0 and burst >= 1")
        self.qps = qps
        self.burst = float(burst)
        self.clock = clock
        self.tokens = float(burst)
        self.stamp = clock()
        self._lock = asyncio.Lock()

    def _refill(self) -> None:
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.qps)
        self.stamp = now

    def try_take(self) -> float:
        """Take a token if one is there (returns 0), else how long until one will be."""
        self._refill()
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        return (1 - self.tokens) / self.qps

    async def acquire(self) -> None:
        async with self._lock:
            while True:
                wait = self.try_take()
                if wait == 0:
                    return
                await asyncio.sleep(wait)


def backoff_delay(attempt: int, base: float, cap: float, rng: random.Random) -> float:
    """Full-jitter exponential backoff: uniform in [0, min(cap, base * 2**attempt)]."""
    return rng.uniform(0, min(cap, base * (2**attempt)))


async def with_retries(
    call: Callable[[], Awaitable[T]],
    what: str,
    *,
    retries: int,
    base: float,
    cap: float,
    rng: random.Random | None = None,
) -> T:
    """Run `call`, retrying throttling, server and transport failures; raise a BackendError."""
    rng = rng or random.Random()
    attempt = 0
    while True:
        try:
            return await call()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            error: BackendError = map_exception(exc, what)
            if not error.retryable or attempt >= retries:
                raise error from None
            delay = retry_after(exc)
            if delay is None:
                delay = backoff_delay(attempt, base, cap, rng)
            log.info("%s failed (%s); retry %d in %.2fs", what, error.message, attempt + 1, delay)
            attempt += 1
            await asyncio.sleep(min(delay, cap))
