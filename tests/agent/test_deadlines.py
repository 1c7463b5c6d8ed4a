"""The pod's one timeout thread: calls come in due order, a cancel stops its call, a sooner
deadline wakes the waiting thread, a failing call spares the rest, and cancelled entries do
not pile up."""

from __future__ import annotations

import threading
import time

from firepool.agent.deadlines import Deadlines


def test_calls_come_in_due_order_and_a_cancelled_one_never() -> None:
    deadlines = Deadlines()
    called: list[str] = []
    done = threading.Event()
    deadlines.after(0.15, lambda: called.append("c"))
    deadlines.after(0.05, lambda: called.append("a"))
    cancelled = deadlines.after(0.08, lambda: called.append("never"))
    deadlines.after(0.10, lambda: called.append("b"))
    deadlines.after(0.20, done.set)
    cancelled.cancel()
    cancelled.cancel()  # idempotent
    assert deadlines.pending() == 4
    assert done.wait(5)
    assert called == ["a", "b", "c"]
    assert deadlines.pending() == 0


def test_a_sooner_deadline_wakes_the_thread_waiting_for_a_later_one() -> None:
    deadlines = Deadlines()
    fired = threading.Event()
    deadlines.after(3600, lambda: None)  # the thread now waits an hour
    time.sleep(0.05)
    started = time.monotonic()
    deadlines.after(0.05, fired.set)
    assert fired.wait(5)
    assert time.monotonic() - started < 2


def test_a_call_that_raises_spares_the_others() -> None:
    deadlines = Deadlines()
    fired = threading.Event()

    def broken() -> None:
        raise RuntimeError("boom")

    deadlines.after(0.01, broken)
    deadlines.after(0.05, fired.set)
    assert fired.wait(5)


def test_cancelled_entries_do_not_pile_up() -> None:
    deadlines = Deadlines()
    for _ in range(5000):
        deadlines.after(3600, lambda: None).cancel()
    assert deadlines.pending() == 0
    assert len(deadlines._heap) < 200
