"""Turning a scale plan into create orders, with budget reserved before any backend call.

Both drivers (the service and the simulator) execute the same orders, so the rule that a
create is reserved in the ledger first, and that a standby never reserves (its GPU is already
counted), lives here once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from firepool.control.budgets import BudgetLedger
from firepool.control.scaler import ScalePlan
from firepool.model import PodRole, PoolSpec


@dataclass(frozen=True, slots=True)
class CreateOrder:
    """One pod for the driver to create; `holder` is its budget reservation (None for a
    standby, whose group already holds one). If the create fails, release the holder."""

    pod: str
    pool: str
    role: PodRole
    group: str | None
    holder: str | None
    single_use: bool = False
    image: str | None = None


def admit(
    plan: ScalePlan,
    spec: PoolSpec,
    ledger: BudgetLedger,
    new_name: Callable[[], str],
) -> list[CreateOrder]:
    """Reserve budget for each create the plan asks for, in order, and stop at the first that
    does not fit: the ledger, not the plan's snapshot, has the last word on headroom."""
    orders: list[CreateOrder] = []
    resource = spec.budget_resource
    units = spec.units_per_pod
    wanted: list[tuple[bool, str | None]] = [(False, None)] * plan.create
    wanted += [(d.single_use, d.image) for d in plan.create_dedicated]
    for single_use, image in wanted:
        name = new_name()
        group = name if spec.is_gpu else None
        if not ledger.try_reserve(resource, name, units):
            break
        orders.append(CreateOrder(name, spec.name, PodRole.ACTIVE, group, name, single_use, image))
    for group in plan.create_standbys:
        orders.append(CreateOrder(new_name(), spec.name, PodRole.STANDBY, group, None))
    return orders
