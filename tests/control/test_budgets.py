"""The budget ledger and plan admission: reserve before create, never overshoot."""

from __future__ import annotations

import itertools
import threading

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


def test_concurrent_reservations_never_overshoot() -> None:
    ledger = BudgetLedger({"H200": 50})
    counter = itertools.count()
    granted: list[str] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(100):
            holder = f"h{next(counter)}"
            if ledger.try_reserve("H200", holder, 1):
                with lock:
                    granted.append(holder)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(granted) == 50 and ledger.used("H200") == 50


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
