"""What a round derives from a job's configurations, computed once per job, not per round.

A job's configurations are one tuple from its submission on, and a long run solves thousands
of rounds over the same few dozen jobs: filtering and classifying each job's configurations
afresh every round was a fifth of a simulated round's time. The memo is keyed by the tuple's
identity (hashing a tuple of configurations costs as much as the work it saves) and holds the
tuple, so its id cannot be reused while the entry lives; a list, which can change in place
under the same id, is never remembered.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Generic, TypeVar

C = TypeVar("C", bound=Sequence[object])
K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class ConfigurationsMemo(Generic[C, K, V]):
    """`compute(configurations, context)`, remembered per configurations tuple and context."""

    def __init__(self, compute: Callable[[C, K], V], max_entries: int = 65536) -> None:
        self._compute = compute
        self._entries: dict[int, tuple[C, K, V]] = {}
        self._max = max_entries

    def of(self, configurations: C, context: K) -> V:
        entry = self._entries.get(id(configurations))
        if entry is not None and entry[0] is configurations and entry[1] == context:
            return entry[2]
        value = self._compute(configurations, context)
        if isinstance(configurations, tuple):
            if len(self._entries) >= self._max:
                self._entries.clear()
            self._entries[id(configurations)] = (configurations, context, value)
        return value
