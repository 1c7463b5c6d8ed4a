"""One thread for every attempt's timeout in a pod.

Why not `threading.Timer`: it starts a thread per attempt, and `Timer.start` returns only once
that thread runs, so every launch answered the broker after a thread start and a GIL hand-off
(about 0.2 ms of CPU per job, more in wall time on a busy host), then paid for the thread's
exit at the cancel. Here a launch pushes a heap entry and a cancel flips a flag.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger("firepool.agent")

#: Cancelled entries are dropped from the heap when they outnumber the live ones by this much.
_COMPACT_SLACK = 64


@dataclass(order=True)
class Deadline:
    """A call due at `when` (monotonic seconds) unless cancelled first."""

    when: float
    seq: int
    fn: Callable[[], None] = field(compare=False)
    owner: Deadlines = field(compare=False, repr=False)
    done: bool = field(default=False, compare=False)

    def cancel(self) -> None:
        """Idempotent; a call already under way is not stopped."""
        self.owner._cancel(self)


class Deadlines:
    """Calls each scheduled function on one daemon thread (started on first use) when its
    delay has passed; a function that raises is logged, not fatal to the others."""

    def __init__(self, name: str = "deadlines") -> None:
        self._name = name
        self._cond = threading.Condition()
        self._heap: list[Deadline] = []
        self._live = 0
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None

    def after(self, delay_s: float, fn: Callable[[], None]) -> Deadline:
        entry = Deadline(time.monotonic() + delay_s, next(self._seq), fn, self)
        with self._cond:
            if len(self._heap) > 2 * self._live + _COMPACT_SLACK:
                self._heap = [e for e in self._heap if not e.done]
                heapq.heapify(self._heap)
            heapq.heappush(self._heap, entry)
            self._live += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            elif self._heap[0] is entry:
                self._cond.notify()  # due sooner than what the thread waits for
        return entry

    def pending(self) -> int:
        with self._cond:
            return self._live

    def _cancel(self, entry: Deadline) -> None:
        with self._cond:
            if not entry.done:
                entry.done = True
                self._live -= 1

    def _next_due(self) -> Deadline:
        with self._cond:
            while True:
                while self._heap and self._heap[0].done:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._cond.wait()
                    continue
                delay = self._heap[0].when - time.monotonic()
                if delay > 0:
                    self._cond.wait(delay)
                    continue
                entry = heapq.heappop(self._heap)
                entry.done = True
                self._live -= 1
                return entry

    def _run(self) -> None:
        while True:
            entry = self._next_due()
            try:
                entry.fn()
            except Exception:
                log.exception("deadline call %r failed", entry.fn)
