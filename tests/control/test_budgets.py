"""The budget ledger and plan admission: reserve before create, never overshoot."""

from __future__ import annotations

import contextlib
import itertools
import threading
import time

import pytest

from firepool.control.admission import admit
from firepool.control.budgets import BudgetLedger
from firepool.control.scaler import QueuedDemand, plan
from firepool.control.tracker import Tracker
from firepool.model import ConfigError, ConflictError, PodRole
from firepool.testing.control import gpu_pool, ready_pods


def test_reserve_and_release() -> None:
    ledger = BudgetLedger({"H200": 3})
    assert ledger.try_reserve("H200", "g0", 2)
    assert not ledger.try_reserve("H200", "g1", 2)  # 2 + 2 > 3, and nothing changed
    assert ledger.used("H200") == 2 and ledger.headroom("H200") == 1
    ledger.release("g0")
    ledger.release("g0")  # a retried delete frees nothing twice
    assert ledger.used("H200") == 0
    assert ledger.headroom("cpu") is None  # unlimited


def test_bad_budgets_and_double_reservations_are_typed_errors() -> None:
    with pytest.raises(ConfigError) as err:
        BudgetLedger({"H200": -1})
    assert err.value.field == "budgets.H200"
    ledger = BudgetLedger()
    ledger.try_reserve("cpu", "p", 1)
    with pytest.raises(ConflictError):
        ledger.try_reserve("cpu", "p", 1)


class HighWater(dict[str, int]):
    """The ledger's per-resource counts, recording the highest value ever written and
    yielding to other threads between a read and the write that follows it: without the
    ledger's lock, concurrent reservations then interleave and overshoot."""

    def __init__(self) -> None:
        super().__init__()
        self.peak = 0

    def get(self, key: str, default: int | None = None) -> int | None:  # type: ignore[override]
        value = super().get(key, default)
        time.sleep(0.0002)  # a thread switch here is what a race needs
        return value

    def __setitem__(self, key: str, value: int) -> None:
        self.peak = max(self.peak, value)
        super().__setitem__(key, value)


def reserve_concurrently(ledger: BudgetLedger, threads: int = 8, each: int = 40) -> list[str]:
    counter = itertools.count()
    granted: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(threads)

    def worker() -> None:
        start.wait()
        for _ in range(each):
            holder = f"h{next(counter)}"
            if ledger.try_reserve("H200", holder, 1):
                with lock:
                    granted.append(holder)

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    return granted


def test_concurrent_reservations_never_overshoot_at_any_instant() -> None:
    ledger = BudgetLedger({"H200": 50})
    counts = HighWater()
    ledger._used = counts
    granted = reserve_concurrently(ledger)
    assert len(granted) == 50 and ledger.used("H200") == 50
    assert counts.peak == 50  # never above the limit, not even between two writes


def test_the_race_is_visible_without_the_ledgers_lock() -> None:
    """The test above can fail: with the lock replaced by a no-op, the forced interleaving
    lets threads pass the limit check on the same count."""
    ledger = BudgetLedger({"H200": 50})
    counts = HighWater()
    ledger._used = counts
    ledger._lock = contextlib.nullcontext()  # type: ignore[assignment]
    reserve_concurrently(ledger)
    assert counts.peak > 50 or ledger.used("H200") != len(ledger._holders)


def test_admit_reserves_groups_once_and_stops_at_the_ledger() -> None:
    spec = gpu_pool(standbys_per_active=2, max_count=10, step=10)
    t = Tracker([spec])
    (g0,) = ready_pods(t, "gpu", 1)
    ledger = BudgetLedger({"H200": 3})
    ledger.try_reserve("H200", g0, 1)
    names = (f"new-{i}" for i in itertools.count())
    p = plan(spec, t.pool_pods("gpu"), t.pool_groups("gpu"), [QueuedDemand("a")] * 5, 1.0)
    assert p.create == 4  # the plan had no headroom figure ...
    orders = admit(p, spec, ledger, lambda: next(names))
    actives = [o for o in orders if o.role is PodRole.ACTIVE]
    standbys = [o for o in orders if o.role is PodRole.STANDBY]
    assert len(actives) == 2  # ... the ledger allowed only 2 more GPUs
    assert all(o.holder == o.group == o.pod for o in actives)
    assert [o.group for o in standbys] == [g0, g0] and all(o.holder is None for o in standbys)
    assert ledger.used("H200") == 3
