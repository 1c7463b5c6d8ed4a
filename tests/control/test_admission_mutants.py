"""`admit`: every field of every create order, so that no mutant of control/admission.py that
changes what the driver creates survives (see docs/testing.md, "Mutation testing")."""

from __future__ import annotations

import itertools
from collections.abc import Callable

from firepool.control.admission import CreateOrder, admit
from firepool.control.budgets import BudgetLedger
from firepool.control.scaler import Census, DedicatedCreate, ScalePlan
from firepool.model import PodRole
from firepool.testing.control import cpu_pool, gpu_pool


def namer(prefix: str) -> Callable[[], str]:
    counter = itertools.count()
    return lambda: f"{prefix}-{next(counter)}"


CPU = cpu_pool(cpus_per_pod=2.0, max_count=10)
GPU = gpu_pool(standbys_per_active=1)


def test_shared_creates_are_plain_warm_pods_with_every_field_set() -> None:
    ledger = BudgetLedger({"cpu": 100})
    orders = admit(ScalePlan("cpu", Census(), create=2), CPU, ledger, namer("c"))
    assert orders == [
        CreateOrder("c-0", "cpu", PodRole.ACTIVE, None, "c-0", False, None),
        CreateOrder("c-1", "cpu", PodRole.ACTIVE, None, "c-1", False, None),
    ]
    assert [o.single_use for o in orders] == [False, False]  # shared pods are never single-use
    assert ledger.used("cpu") == 4 and ledger.holds("c-0") and ledger.holds("c-1")


def test_dedicated_creates_carry_their_single_use_flag_and_image() -> None:
    ledger = BudgetLedger({"cpu": 100})
    dedicated = [DedicatedCreate(True, None), DedicatedCreate(False, "img:1")]
    orders = admit(
        ScalePlan("cpu", Census(), create=1, create_dedicated=dedicated), CPU, ledger, namer("d")
    )
    assert orders == [
        CreateOrder("d-0", "cpu", PodRole.ACTIVE, None, "d-0", False, None),
        CreateOrder("d-1", "cpu", PodRole.ACTIVE, None, "d-1", True, None),
        CreateOrder("d-2", "cpu", PodRole.ACTIVE, None, "d-2", False, "img:1"),
    ]
    assert (orders[1].single_use, orders[1].image) == (True, None)
    assert (orders[2].single_use, orders[2].image) == (False, "img:1")


def test_gpu_actives_are_their_own_group_and_standbys_reserve_nothing() -> None:
    ledger = BudgetLedger({"H200": 8})
    plan = ScalePlan("gpu", Census(), create=1, create_standbys=["g-old", "g-old"])
    orders = admit(plan, GPU, ledger, namer("g"))
    assert orders == [
        CreateOrder("g-0", "gpu", PodRole.ACTIVE, "g-0", "g-0", False, None),
        CreateOrder("g-1", "gpu", PodRole.STANDBY, "g-old", None, False, None),
        CreateOrder("g-2", "gpu", PodRole.STANDBY, "g-old", None, False, None),
    ]
    assert all(o.pool == "gpu" for o in orders)
    assert ledger.used("H200") == 1 and not ledger.holds("g-1") and not ledger.holds("g-2")


def test_the_ledger_has_the_last_word_and_admission_stops_at_the_first_refusal() -> None:
    ledger = BudgetLedger({"cpu": 5})  # room for two 2-core pods, not three
    dedicated = [DedicatedCreate(True, None)]
    orders = admit(
        ScalePlan("cpu", Census(), create=3, create_dedicated=dedicated), CPU, ledger, namer("x")
    )
    assert [o.pod for o in orders] == ["x-0", "x-1"]
    assert ledger.used("cpu") == 4 and not ledger.holds("x-2")
