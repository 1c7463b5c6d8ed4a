"""Waiting and log following without I/O: the decisions both clients share.

`Backoff` spaces polls (fast at first, so a short job is seen finishing within tens of
milliseconds; slower later, so a long wait costs the broker about one request a second).
`LogCursor` walks a job's attempts in order by byte offset: it says what to read next and
whether to read again at once, wait, look at the job (a finished attempt may have a retry
after it), or stop. The clients only execute those steps, so following behaves identically
in sync and async code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from firepool.api.schemas import JobOut, LogsOut
from firepool.client import calls


@dataclass(slots=True)
class Backoff:
    first: float = 0.05
    factor: float = 1.5
    ceiling: float = 1.0
    _next: float = field(default=0.0, init=False)

    def delay(self) -> float:
        """The next pause, growing geometrically up to `ceiling`."""
        current = self._next or self.first
        self._next = min(current * self.factor, self.ceiling)
        return current

    def reset(self) -> None:
        self._next = 0.0


class Step(Enum):
    READ = "read"  # ask for the next range now
    WAIT = "wait"  # caught up with a running attempt: pause, then read again
    CHECK_JOB = "check_job"  # an attempt ended: is there a later one?
    STOP = "stop"


@dataclass(slots=True)
class LogCursor:
    """Position in a job's logs: attempt by attempt from `attempt` (0: the whole history)."""

    job_id: str
    follow: bool
    attempt: int = 0
    only_attempt: bool = False
    offset: int = 0
    #: Which rank's output (0: the first pod's, what a job of one pod prints).
    rank: int = 0
    #: Output is watched by people: poll at least twice a second while a job is silent.
    backoff: Backoff = field(default_factory=lambda: Backoff(ceiling=0.5))

    def request(self) -> calls.Call[LogsOut]:
        return calls.logs(self.job_id, attempt=self.attempt, offset=self.offset, rank=self.rank)

    def feed(self, page: LogsOut) -> Step:
        """Take one answer; the caller yields `page.data` (if any) and does the returned step."""
        self.offset = page.next_offset
        if page.data:
            self.backoff.reset()
        if page.next_offset < page.size:
            return Step.READ
        if page.complete:
            return Step.STOP if self.only_attempt else Step.CHECK_JOB
        return Step.WAIT if self.follow else Step.STOP

    def job_seen(self, job: JobOut) -> Step:
        """After an attempt completed: move to the next attempt if the job retried."""
        if job.retries > self.attempt:
            self.attempt += 1
            self.offset = 0
            return Step.READ
        return Step.STOP


#: The longest one long poll asks the broker to hold it (the broker's bound is 60 s): short
#: enough that proxies with a minute's idle timeout never cut it.
LONG_POLL_S = 30.0


def first_wait(timeout: float | None) -> float:
    """How long `run`'s submission asks the broker to hold its answer for the job's end."""
    return LONG_POLL_S if timeout is None else max(0.0, min(LONG_POLL_S, timeout))


@dataclass(slots=True)
class Waiting:
    """`wait()`'s decisions, shared by both clients: ask with `wait_s` (a long poll, one
    request per job on a broker that has them) and, when the broker answers a non-terminal
    job well before the time asked (a broker older than long polls ignores `wait_s`), fall
    back to polling with `Backoff`'s pauses."""

    job_id: str
    timeout: float | None
    started: float  # monotonic
    backoff: Backoff = field(default_factory=Backoff)
    _deadline: float | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self._deadline = None if self.timeout is None else self.started + self.timeout

    def left(self, now: float) -> float | None:
        return None if self._deadline is None else self._deadline - now

    def request(self, now: float) -> calls.Call[JobOut]:
        left = self.left(now)
        wait_s = LONG_POLL_S if left is None else min(LONG_POLL_S, left)
        return calls.get(self.job_id, wait_s=wait_s if wait_s >= 0.001 else None)

    def pause(self, asked: float, elapsed: float, now: float) -> float | None:
        """After a non-terminal answer to a request that asked `asked` seconds and took
        `elapsed`: seconds to sleep before the next request (0: at once), or None when the
        timeout is spent."""
        left = self.left(now)
        if left is not None and left <= 0:
            return None
        if asked > 0 and elapsed >= asked / 2:
            return 0.0  # the broker held it: a long poll that ran out, ask again
        pause = self.backoff.delay()
        return pause if left is None else min(pause, left)
