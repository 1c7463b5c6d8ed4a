"""The shared polling decisions: back-off growth and the log cursor's steps."""

from __future__ import annotations

import pytest

from firepool.api.schemas import LogsOut
from firepool.client.polling import LONG_POLL_S, Backoff, LogCursor, Step, Waiting


def page(data: str, offset: int, size: int, complete: bool) -> LogsOut:
    return LogsOut(
        job="j",
        attempt="j:0",
        offset=offset,
        next_offset=offset + len(data),
        size=size,
        data=data,
        complete=complete,
    )


def test_backoff_grows_to_its_ceiling_and_resets() -> None:
    backoff = Backoff(first=0.1, factor=2.0, ceiling=0.5)
    assert [backoff.delay() for _ in range(5)] == pytest.approx([0.1, 0.2, 0.4, 0.5, 0.5])
    backoff.reset()
    assert backoff.delay() == pytest.approx(0.1)


def test_cursor_reads_on_waits_then_moves_to_the_retry() -> None:
    cursor = LogCursor("j", follow=True)
    assert cursor.feed(page("ab", 0, 4, False)) is Step.READ  # more is already there
    assert cursor.request().params == (("attempt", 0), ("offset", 2))
    assert cursor.feed(page("cd", 2, 4, False)) is Step.WAIT  # caught up, still running
    assert cursor.feed(page("", 4, 4, True)) is Step.CHECK_JOB  # the attempt ended

    class Job:
        retries = 1

    assert cursor.job_seen(Job()) is Step.READ  # type: ignore[arg-type]
    assert cursor.request().params == (("attempt", 1), ("offset", 0))
    assert cursor.feed(page("x", 0, 1, True)) is Step.CHECK_JOB
    assert cursor.job_seen(Job()) is Step.STOP  # type: ignore[arg-type]


def test_cursor_without_follow_stops_when_caught_up() -> None:
    assert LogCursor("j", follow=False).feed(page("ab", 0, 2, False)) is Step.STOP
    one = LogCursor("j", follow=True, attempt=2, only_attempt=True)
    assert one.feed(page("", 0, 0, True)) is Step.STOP


def test_waiting_long_polls_and_falls_back_to_polling_an_older_broker() -> None:
    waiting = Waiting("j", timeout=100.0, started=0.0)
    call = waiting.request(now=0.0)
    assert call.params == (("wait_s", "30"),) and call.hold_s == 30.0
    # Held for its whole wait: the job still runs, ask again at once.
    assert waiting.pause(asked=30.0, elapsed=30.0, now=30.0) == 0.0
    # Answered at once although asked to wait (a broker without long polls): back off.
    assert waiting.pause(asked=30.0, elapsed=0.001, now=30.0) == Backoff().delay()
    # Near the deadline the wait asked shrinks to what is left; past it, give up.
    assert waiting.request(now=95.0).hold_s == 5.0
    assert waiting.pause(asked=5.0, elapsed=5.0, now=100.0) is None


def test_waiting_without_timeout_asks_the_longest_poll() -> None:
    waiting = Waiting("j", timeout=None, started=0.0)
    assert waiting.request(now=1e6).hold_s == LONG_POLL_S
    assert waiting.pause(asked=LONG_POLL_S, elapsed=0.0, now=1e6) == Backoff().delay()
