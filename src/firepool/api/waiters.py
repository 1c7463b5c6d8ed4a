"""Long-poll waiters: `GET /v1/jobs/{id}?wait_s=N` parks here until the job is terminal.

Why: a caller waiting for a short job used to poll (about five requests per job, each a store
read and a full API round trip, with up to the backoff's pause of extra latency). A parked
request costs nothing while it waits and answers the moment the terminal state is durable.

Whoever commits a terminal state calls `job_finished(job)` afterwards (the service after its
verdict or a queued job's failure, the API's own cancel path), from any thread. The waiter is
registered before the request reads the job, so a job that finishes between that read and
the wait still releases it (no lost wake-up). The released request reads the job once more:
the stored record, with any timing stamped after the verdict, is the answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator

from firepool.store import JobRecord

#: The longest a caller may ask to be held (seconds): bounded so that proxies and client
#: timeouts can be sized, and a forgotten request cannot pin a connection for ever.
MAX_WAIT_S = 60.0


class JobWaiters:
    """Futures of parked requests by job id; thread-safe release, loop-local waiting."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: dict[str, set[asyncio.Future[JobRecord]]] = {}

    @contextlib.contextmanager
    def watch(self, job_id: str) -> Iterator[asyncio.Future[JobRecord]]:
        """A future resolved with the terminal record of `job_id`; registered on entry (before
        the caller reads the job), removed on exit."""
        future: asyncio.Future[JobRecord] = asyncio.get_running_loop().create_future()
        with self._lock:
            self._waiting.setdefault(job_id, set()).add(future)
        try:
            yield future
        finally:
            with self._lock:
                waiting = self._waiting.get(job_id)
                if waiting is not None:
                    waiting.discard(future)
                    if not waiting:
                        del self._waiting[job_id]

    def job_finished(self, job: JobRecord) -> None:
        """Release every request parked on `job` (any thread; never blocks)."""
        if not job.state.terminal:
            return
        with self._lock:
            waiting = self._waiting.pop(job.id, None)
        for future in waiting or ():
            loop = future.get_loop()
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is loop:
                _resolve(future, job)
            else:
                with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits
                    loop.call_soon_threadsafe(_resolve, future, job)

    def __len__(self) -> int:
        """Parked requests (metrics, tests)."""
        with self._lock:
            return sum(len(v) for v in self._waiting.values())


def _resolve(future: asyncio.Future[JobRecord], job: JobRecord) -> None:
    if not future.done():
        future.set_result(job)
