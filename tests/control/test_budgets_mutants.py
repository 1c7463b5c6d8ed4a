"""The budget ledger's edges, one assertion per rule, so that no mutant of control/budgets.py
survives (see docs/testing.md, "Mutation testing"). Only the public methods are used."""

from __future__ import annotations

import pytest

from firepool.control.budgets import BudgetLedger
from firepool.model import ConfigError, ConflictError


def test_a_zero_budget_is_valid_and_fits_nothing_but_zero_units() -> None:
    ledger = BudgetLedger({"H200": 0})
    assert ledger.limit("H200") == 0 and ledger.headroom("H200") == 0
    assert not ledger.try_reserve("H200", "g-1", 1) and not ledger.holds("g-1")
    assert ledger.try_reserve("H200", "g-2", 0) and ledger.holds("g-2")  # zero units fit
    assert ledger.used("H200") == 0


def test_a_negative_budget_is_refused_naming_the_resource() -> None:
    with pytest.raises(ConfigError) as err:
        BudgetLedger({"cpu": 4, "H200": -1})
    assert err.value.field == "budgets.H200"
    assert err.value.message == "budget for H200 must be >= 0"


def test_used_and_headroom_of_an_untouched_resource() -> None:
    ledger = BudgetLedger({"cpu": 3})
    assert ledger.used("cpu") == 0 and ledger.used("never-seen") == 0
    assert ledger.headroom("cpu") == 3
    assert ledger.headroom("never-seen") is None and ledger.limit("never-seen") is None
    assert ledger.try_reserve("cpu", "a", 3)
    assert (ledger.used("cpu"), ledger.headroom("cpu")) == (3, 0)  # full: no headroom left


def test_negative_units_are_refused_naming_the_field() -> None:
    ledger = BudgetLedger({"cpu": 3})
    with pytest.raises(ConflictError) as err:
        ledger.try_reserve("cpu", "a", -1)
    assert (err.value.field, err.value.message) == ("units", "cannot reserve -1 units")
    assert not ledger.holds("a") and ledger.used("cpu") == 0


def test_a_second_reservation_by_one_holder_is_refused_naming_it() -> None:
    ledger = BudgetLedger({"cpu": 10})
    assert ledger.try_reserve("cpu", "pod-1", 2)
    with pytest.raises(ConflictError) as err:
        ledger.try_reserve("cpu", "pod-1", 1)
    assert err.value.field == "holder"
    assert err.value.message == "pod-1 already holds a reservation"
    assert ledger.used("cpu") == 2


def test_holds_is_true_only_while_reserved() -> None:
    ledger = BudgetLedger()
    assert not ledger.holds("x")
    assert ledger.try_reserve("cpu", "x", 1) and ledger.holds("x")
    ledger.release("x")
    assert not ledger.holds("x") and ledger.used("cpu") == 0


def test_set_limit_sets_changes_and_removes_a_limit_without_evicting() -> None:
    ledger = BudgetLedger({"cpu": 2, "H200": 4})
    assert ledger.try_reserve("cpu", "a", 2)
    ledger.set_limit("cpu", 1)  # lowered under what is held: nobody is evicted
    assert ledger.limit("cpu") == 1 and ledger.holds("a") and ledger.headroom("cpu") == 0
    assert not ledger.try_reserve("cpu", "b", 1)
    ledger.set_limit("cpu", None)  # unlimited now
    assert ledger.limit("cpu") is None and ledger.headroom("cpu") is None
    assert ledger.try_reserve("cpu", "b", 100)
    assert ledger.limit("H200") == 4  # the other resource's limit is untouched
    ledger.set_limit("L4", None)  # removing a limit that was never set is a no-op
    assert ledger.limit("L4") is None and ledger.limit("H200") == 4
    ledger.set_limit("L4", 2)
    assert ledger.limit("L4") == 2 and ledger.headroom("L4") == 2
