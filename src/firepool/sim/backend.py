"""The virtual pod backend: creates and deletes pods after venue-sampled delays.

It is the simulator's stand-in for the Kubernetes or local backend, not a mock: the broker
calls `create` for each admitted order and `delete` for each retired pod, and hears back through
`on_ready` / `on_deleted` after the venue's delays, with start contention applied. It also
integrates held capacity (budget units held from create to deletion), the quantity the broker
paper's frontier plots.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from firepool.sim.loop import EventLoop
from firepool.sim.venue import Venue


class VirtualBackend:
    """Pods exist from `create` until their delete completes; starts contend with each other."""

    def __init__(
        self,
        loop: EventLoop,
        venue: Venue,
        rng: random.Random,
        on_ready: Callable[[str], None],
        on_deleted: Callable[[str], None],
    ) -> None:
        self.loop = loop
        self.venue = venue
        self.rng = rng
        self._on_ready = on_ready
        self._on_deleted = on_deleted
        self.starting = 0
        self.created = 0
        self.deleted = 0
        self._deleting: set[str] = set()
        self.held_units = 0
        self._held_area = 0.0
        self._held_since = loop.now

    # ---------------------------------------------------------------- capacity accounting
    def _account(self) -> None:
        now = self.loop.now
        self._held_area += self.held_units * (now - self._held_since)
        self._held_since = now

    def hold(self, units: int) -> None:
        """Budget units held from now on (pods and GPU groups being created or alive: the
        ledger's reservations, which the broker core makes before each create)."""
        if units != self.held_units:
            self._account()
            self.held_units = units

    def held_area(self) -> float:
        """Unit-seconds held so far (GPU- or core-seconds, groups counted once)."""
        self._account()
        return self._held_area

    # ---------------------------------------------------------------- pods
    def create(self, name: str) -> None:
        delay = self.venue.create.sample(self.rng) + self.venue.contention_s * self.starting
        self.starting += 1
        self.created += 1
        self.loop.after(delay, self._ready, name)

    def _ready(self, name: str) -> None:
        self.starting -= 1
        self._on_ready(name)

    def delete(self, name: str) -> None:
        if name in self._deleting:
            return
        self._deleting.add(name)
        self.loop.after(self.venue.delete.sample(self.rng), self._gone, name)

    def _gone(self, name: str) -> None:
        self._deleting.discard(name)
        self.deleted += 1
        self._on_deleted(name)
