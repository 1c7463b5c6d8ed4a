"""The budget ledger: hard limits per accelerator model (or CPU cores), across all pools.

Creations are reserved here before the backend's create call and released on deletion or on a
failed create, so two reconcile passes running at once can never both see the same headroom.
An active pod and its standbys reserve once, under their group's key: a physical GPU is one
unit of budget however many pods share it.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from firepool.model import ConfigError, ConflictError


class BudgetLedger:
    """Thread-safe reservations keyed by the holder (a GPU group or a CPU pod name)."""

    def __init__(self, limits: Mapping[str, int] | None = None) -> None:
        for resource, limit in (limits or {}).items():
            if limit < 0:
                raise ConfigError(
                    f"budget for {resource} must be >= 0", field=f"budgets.{resource}"
                )
        self._limits: dict[str, int] = dict(limits or {})
        self._used: dict[str, int] = {}
        self._holders: dict[str, tuple[str, int]] = {}
        self._lock = threading.Lock()

    def limit(self, resource: str) -> int | None:
        """The hard limit, or None where the deployment sets none."""
        return self._limits.get(resource)

    def used(self, resource: str) -> int:
        return self._used.get(resource, 0)

    def headroom(self, resource: str) -> int | None:
        """Units still free, or None when unlimited."""
        with self._lock:
            limit = self._limits.get(resource)
            if limit is None:
                return None
            return max(0, limit - self._used.get(resource, 0))

    def try_reserve(self, resource: str, holder: str, units: int) -> bool:
        """Reserve `units` for `holder` if they fit under the limit; False changes nothing."""
        if units < 0:
            raise ConflictError(f"cannot reserve {units} units", field="units")
        with self._lock:
            if holder in self._holders:
                raise ConflictError(f"{holder} already holds a reservation", field="holder")
            used = self._used.get(resource, 0)
            limit = self._limits.get(resource)
            if limit is not None and used + units > limit:
                return False
            self._used[resource] = used + units
            self._holders[holder] = (resource, units)
            return True

    def release(self, holder: str) -> None:
        """Give back a holder's units; releasing twice (or an unknown holder) is a no-op, so a
        retried delete cannot free capacity another pod holds."""
        with self._lock:
            entry = self._holders.pop(holder, None)
            if entry is None:
                return
            resource, units = entry
            self._used[resource] -= units

    def total_used(self) -> int:
        """Units held across every resource (what a simulator integrates as held capacity)."""
        with self._lock:
            return sum(self._used.values())

    def holds(self, holder: str) -> bool:
        return holder in self._holders

    def set_limit(self, resource: str, limit: int | None) -> None:
        """Change a limit (an operator edit, or borrowed capacity); never evicts holders."""
        with self._lock:
            if limit is None:
                self._limits.pop(resource, None)
            else:
                self._limits[resource] = limit
