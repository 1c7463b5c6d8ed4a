"""How often the broker must speak to the pods so that no agent fences itself for silence."""

from __future__ import annotations

from collections.abc import Iterable

#: A keep-alive more often than this costs more than any agent's bound needs.
MIN_KEEPALIVE_S = 0.05


def keepalive_interval(bounds: Iterable[float | None]) -> float | None:
    """A quarter of the shortest silence any pool's agents tolerate (`bounds`, None where they
    tolerate any), so three keep-alives in a row may be lost before one fences; None when no
    agent ever fences."""
    known = [b for b in bounds if b is not None]
    return max(min(known) / 4, MIN_KEEPALIVE_S) if known else None
