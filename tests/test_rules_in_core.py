"""No paper rule in a driver: `service/` and `sim/` execute the core's decisions and make none.

A rule written again in a driver is how `recovery_lost` once counted retries its own way
(issue 31). Two signs of one, read from the syntax tree of every driver module:
- it builds a decision: a control action (`HoldPod`, `DeletePod`, `StopAttempt`, ...) or a
  `Verdict` comes only out of `control/`;
- it computes with a rule's parameter: retries allowed, reclaims, holds, idle caps, floors and
  ceilings, idle timeouts, lease tags, budgets, borrowable capacity, timeouts, cancel flags.
  Passing one on as data (a read model's field, a request to the core) is not computing.
The behaviour side of the same claim is `tests/control/test_core_drivers.py`: both drivers get
the same actions from one core.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import firepool
from firepool.control import actions

SRC = Path(firepool.__file__).parent
DRIVERS = ("service", "sim")
#: Driver modules that may: each with why.
ALLOWED = {
    # A store, not a broker: the same row transitions as store/sql.py (a requeue counts a
    # reclaim, a repeated cancel changes nothing), kept in memory for virtual time.
    "sim/memstore.py",
}
#: The simulator's experiments build the pools and workloads they study; they decide nothing
#: of the broker's.
SETUPS = ("sim/experiments/",)
DECISIONS = frozenset(
    {name for name, obj in vars(actions).items()
     if inspect.isclass(obj) and obj.__module__ == actions.__name__ and issubclass(obj, tuple)}
    | {"Verdict"}
)
RULE_FIELDS = frozenset({
    "max_retries", "reclaims", "failures", "caller_hold_seconds", "max_idle_count",
    "min_count", "max_count", "idle_timeout", "lease_tag", "lease_tag_mode", "budget",
    "borrowable", "timeout_s", "cancel_requested",
})
COMPUTING = (ast.Compare, ast.BinOp, ast.AugAssign, ast.BoolOp, ast.UnaryOp, ast.IfExp)


def rules_in(source: str) -> list[str]:
    """Where `source` builds a decision or computes with a rule's parameter."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name in DECISIONS:
                found.append(f"line {node.lineno}: builds {name}")
        elif isinstance(node, COMPUTING):
            fields = sorted({sub.attr for sub in ast.walk(node)
                             if isinstance(sub, ast.Attribute) and sub.attr in RULE_FIELDS})
            if fields:
                found.append(f"line {node.lineno}: computes with {', '.join(fields)}")
    return found


def driver_modules() -> list[str]:
    names = [str(p.relative_to(SRC)) for d in DRIVERS for p in sorted((SRC / d).rglob("*.py"))]
    return [n for n in names if not n.startswith(SETUPS)]


def test_the_action_classes_are_all_seen() -> None:
    """The decision list is read from control/actions.py, so a new action is covered."""
    assert {"HoldPod", "DeletePod", "StopAttempt", "RecordVerdict", "Verdict"} <= DECISIONS


@pytest.mark.parametrize("module", driver_modules())
def test_a_driver_module_holds_no_rule(module: str) -> None:
    found = rules_in((SRC / module).read_text())
    if module in ALLOWED:
        assert found, f"{module} is allowed a rule it no longer has: drop it from ALLOWED"
    else:
        assert not found, f"{module} decides what the core should: {found}"


def test_the_check_sees_a_rule_written_again() -> None:
    """What `recovery_lost` did once, and a hold built by a driver, are both found; passing a
    field on as data is not."""
    retry = "def f(job, ticket):\n    if ticket.retries < job.spec.max_retries:\n        pass\n"
    hold = "from firepool.control.actions import HoldPod\nHoldPod('pod', 'caller', 1.0)\n"
    data = "def f(spec):\n    return dict(idle_cap=spec.max_idle_count)\n"
    assert rules_in(retry) == ["line 2: computes with max_retries"]
    assert rules_in(hold) == ["line 2: builds HoldPod"]
    assert rules_in(data) == []
