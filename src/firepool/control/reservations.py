"""Age-keyed gang reservations: a gang that cannot be placed keeps the pods that free up.

Claims are all or nothing and the dispatcher skips a job it cannot place, so a gang of n pods
never blocks the small jobs behind it; but under a steady stream of one-pod jobs, every pod
that frees up is taken before n are free at once, and the gang can wait forever (the broker
paper names gang starvation an open problem). The rule here: the oldest gang waiting for
capacity in a pool (queue order: priority, then age) opens a reservation on that pool. While it
lasts, a job behind the gang in queue order may claim only what leaves the gang its n fresh
pods: each pod that frees up goes to the gang, until it has all n and claims them. A
reservation is bounded: after `hold_s` it lapses (the gang cannot be placed, or the stream
holds pods it cannot get), and the gang may not reserve again for `rest_s`, so a gang that will
never fit cannot hold a pool's free pods for long. Jobs ahead of the gang in queue order are
never held back.

The price is pods kept idle for the gang while it collects them: `held_pod_seconds` integrates
the number of fresh pods a reservation keeps from other jobs over time (sampled at each
dispatch pass, which every release triggers).

Pure: no I/O, `now` comes from the caller.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from firepool.model import ConfigError


@dataclass(frozen=True, slots=True)
class ReservationRules:
    #: The longest a gang keeps a reservation open.
    hold_s: float = 600.0
    #: After a reservation lapsed, the gang waits this long before it may reserve again.
    rest_s: float = 600.0
    #: Only jobs of at least this many pods reserve (one pod needs no reservation: it is
    #: placed by the first pod that frees up, in queue order).
    min_pods: int = 2

    def __post_init__(self) -> None:
        if not self.hold_s > 0:
            raise ConfigError("gang reservations: hold_s must be positive", field="hold_s")
        if not self.rest_s >= 0:
            raise ConfigError("gang reservations: rest_s must be >= 0", field="rest_s")
        if self.min_pods < 2:
            raise ConfigError(
                "gang reservations: min_pods must be at least 2 (a one-pod job never starves)",
                field="min_pods",
            )


@dataclass(slots=True)
class Reservation:
    job: str
    pool: str
    pods: int
    since: float
    until: float
    #: The gang's place in queue order: the jobs after it are the ones held back.
    key: tuple[int, float, str] = (0, 0.0, "")
    #: Fresh pods this reservation kept from other jobs at the last dispatch pass.
    holding: int = 0


@dataclass(slots=True)
class GangReservations:
    """At most one reservation per pool, held by the oldest gang waiting there."""

    rules: ReservationRules = field(default_factory=ReservationRules)
    by_pool: dict[str, Reservation] = field(default_factory=dict)
    #: job -> when it may reserve again (after a lapsed reservation).
    resting: dict[str, float] = field(default_factory=dict)
    held_pod_seconds: float = 0.0
    opened: int = 0
    lapsed: int = 0
    _last: float | None = None

    def holder(self, pool: str) -> Reservation | None:
        return self.by_pool.get(pool)

    def open(
        self, job: str, pool: str, pods: int, now: float, key: tuple[int, float, str]
    ) -> Reservation | None:
        """The gang `job` found no capacity: it reserves `pool` if it is big enough, no other
        gang holds the pool, and it is not resting after a lapsed reservation."""
        if pods < self.rules.min_pods or pool in self.by_pool:
            return None
        if self.resting.get(job, now) > now:
            return None
        self.resting.pop(job, None)
        r = Reservation(job, pool, pods, now, now + self.rules.hold_s, key)
        self.by_pool[pool] = r
        self.opened += 1
        return r

    def close(self, job: str) -> bool:
        """The gang claimed its pods or left the queue."""
        self.resting.pop(job, None)
        for pool, r in list(self.by_pool.items()):
            if r.job == job:
                del self.by_pool[pool]
                return True
        return False

    def expire(self, now: float) -> list[str]:
        """Lapse every reservation past its bound; returns the gangs whose reservation lapsed
        (the pods it kept are everyone's again: a dispatch pass is due)."""
        self.account(now)
        gone = [r for r in self.by_pool.values() if r.until <= now]
        for r in gone:
            del self.by_pool[r.pool]
            self.resting[r.job] = now + self.rules.rest_s
            self.lapsed += 1
        return [r.job for r in gone]

    def next_due(self) -> float | None:
        return min((r.until for r in self.by_pool.values()), default=None)

    def allows(self, r: Reservation, fresh: int, pods: int) -> bool:
        """May a job behind the gang take `pods` fresh pods, with `fresh` free in the pool?
        Only if the gang's n remain."""
        return fresh - pods >= r.pods

    def note_holding(self, pool: str, fresh: int) -> None:
        """After a pass: the gang in `pool` keeps `min(fresh, n)` pods from everyone else."""
        r = self.by_pool.get(pool)
        if r is not None:
            r.holding = min(fresh, r.pods)

    def account(self, now: float) -> None:
        """Add the pod-seconds held since the last call at the holdings last noted."""
        if self._last is not None and now > self._last:
            dt = now - self._last
            self.held_pod_seconds += dt * sum(r.holding for r in self.by_pool.values())
        self._last = now
