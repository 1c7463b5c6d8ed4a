"""The shared polling decisions: back-off growth and the log cursor's steps."""

from __future__ import annotations

import pytest

from firepool.api.schemas import LogsOut
from firepool.client.polling import Backoff, LogCursor, Step


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
