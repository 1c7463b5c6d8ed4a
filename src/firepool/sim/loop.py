"""A discrete-event loop with a virtual clock.

Events are (time, sequence, callback, argument) tuples on a heap; the sequence number breaks
ties in scheduling order, which is what makes a run deterministic for a seed. One argument
(not *args) keeps the hot path free of tuple packing: 100,000+ events per second is the target.
"""

from __future__ import annotations

import gc
import heapq
from collections.abc import Callable
from typing import Any

Callback = Callable[[Any], None]


class EventLoop:
    """Virtual time in seconds; `now` only moves forward, by popping the next event."""

    __slots__ = ("_heap", "_seq", "events", "now")

    def __init__(self, start: float = 0.0) -> None:
        self.now = start
        self._heap: list[tuple[float, int, Callback, Any]] = []
        self._seq = 0
        self.events = 0  # events executed so far (the benchmark's unit of work)

    def at(self, when: float, fn: Callback, arg: Any = None) -> None:
        """Run `fn(arg)` at virtual time `when` (never earlier than now)."""
        self._seq += 1
        now = self.now
        heapq.heappush(self._heap, (when if when > now else now, self._seq, fn, arg))

    def after(self, delay: float, fn: Callback, arg: Any = None) -> None:
        """Run `fn(arg)` `delay` seconds from now (the common call: written out, not via
        `at`, as it runs for nearly every event)."""
        self._seq += 1
        heapq.heappush(
            self._heap, (self.now + delay if delay > 0.0 else self.now, self._seq, fn, arg)
        )

    def run(self, until: float = float("inf"), stop: Callable[[], bool] | None = None) -> None:
        """Execute events in time order until none are left, `until` passes, or `stop()`.

        The young-generation collection threshold is raised while it runs: a run allocates
        short-lived records by the million and makes few cycles, and collecting every 700
        allocations cost ~5-10% of the event rate. The previous thresholds come back after."""
        old = gc.get_threshold()
        gc.set_threshold(max(old[0], 50_000), old[1], old[2])
        try:
            self._run(until, stop)
        finally:
            gc.set_threshold(*old)

    def _run(self, until: float, stop: Callable[[], bool] | None) -> None:
        heap = self._heap
        pop = heapq.heappop
        while heap:
            when = heap[0][0]
            if when > until:
                self.now = until
                return
            _, _, fn, arg = pop(heap)
            self.now = when
            self.events += 1
            fn(arg)
            if stop is not None and stop():
                return

    @property
    def pending(self) -> int:
        return len(self._heap)
