"""The backend's picture of its pods, kept current by list + watch events. Pure: no I/O.

A list replaces the picture wholesale (pods missing from it were deleted while nobody
watched); a watch event replaces one pod, unless the cache already holds a newer
resourceVersion of it (a create or patch answer can arrive before its own event). The cache
remembers when each change arrived, which is what the benchmark's watch lag measures.

Pods seen deleted stay in `gone` so that a `wait_ready` arriving after the DELETED event still
learns how the pod ended, but only for `gone_ttl_s` and at most `gone_limit` of them: a broker
that creates and deletes pods for months must not keep every name it ever used.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from firepool.backends.kubernetes.status import Observed, observe


def resource_version(obj: dict[str, Any]) -> int:
    """resourceVersion as a number for ordering one object's versions (etcd revisions are
    integers; anything else sorts as 0 and is simply taken)."""
    value = (obj.get("metadata") or {}).get("resourceVersion") or "0"
    try:
        return int(value)
    except ValueError:
        return 0


def pod_name(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


@dataclass(frozen=True)
class Change:
    name: str
    observed: Observed
    deleted: bool
    at: float


class GoneRecords:
    """How deleted pods ended, oldest first, for a bounded time and number."""

    def __init__(self, ttl_s: float, limit: int, clock: Callable[[], float]) -> None:
        self.ttl_s = ttl_s
        self.limit = limit
        self.clock = clock
        self._records: OrderedDict[str, tuple[float, Observed]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, name: object) -> bool:
        self._prune()
        return name in self._records

    def __setitem__(self, name: str, seen: Observed) -> None:
        self._records.pop(name, None)
        self._records[name] = (self.clock(), seen)
        self._prune()

    def get(self, name: str) -> Observed | None:
        self._prune()
        entry = self._records.get(name)
        return None if entry is None else entry[1]

    def pop(self, name: str, default: Observed | None = None) -> Observed | None:
        entry = self._records.pop(name, None)
        return default if entry is None else entry[1]

    def _prune(self) -> None:
        oldest = self.clock() - self.ttl_s
        while self._records:
            name, (at, _) = next(iter(self._records.items()))
            if at >= oldest and len(self._records) <= self.limit:
                return
            del self._records[name]


class PodCache:
    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        *,
        gone_ttl_s: float = 600.0,
        gone_limit: int = 10_000,
    ) -> None:
        self.clock = clock
        self.pods: dict[str, dict[str, Any]] = {}
        #: Pods seen deleted (DELETED event or gone from a relist), with how they ended.
        self.gone = GoneRecords(gone_ttl_s, gone_limit, clock)
        self.synced = False

    def replace(self, items: Iterable[dict[str, Any]], version: str = "") -> list[Change]:
        """A full list taken at resourceVersion `version`: the new truth, except for pods we
        hold in a newer version than the list (created or patched while it was in flight).
        Returns a change for every pod that is new, changed or gone, so waiters wake even for
        updates the broken watch never delivered."""
        now = self.clock()
        listed = resource_version({"metadata": {"resourceVersion": version}})
        fresh = {pod_name(p): p for p in items if pod_name(p)}
        changes: list[Change] = []
        for name in list(self.pods):
            if name not in fresh:
                if listed and resource_version(self.pods[name]) > listed:
                    continue  # newer than the list: it was not gone, the list was early
                last = self.pods.pop(name)
                seen = observe(last, deleted=True)
                self.gone[name] = seen
                changes.append(Change(name, seen, True, now))
        for name, pod in fresh.items():
            old = self.pods.get(name)
            if old is not None and resource_version(old) > resource_version(pod):
                continue
            self.pods[name] = pod
            self.gone.pop(name, None)
            if old is None or resource_version(old) != resource_version(pod):
                changes.append(Change(name, observe(pod), False, now))
        self.synced = True
        return changes

    def apply(self, kind: str, obj: dict[str, Any]) -> Change | None:
        """One watch event (ADDED, MODIFIED, DELETED). None if it changed nothing."""
        name = pod_name(obj)
        if not name:
            return None
        now = self.clock()
        if kind == "DELETED":
            self.pods.pop(name, None)
            seen = observe(obj, deleted=True)
            self.gone[name] = seen
            return Change(name, seen, True, now)
        old = self.pods.get(name)
        if old is not None and resource_version(old) > resource_version(obj):
            return None  # stale: we already hold a newer version
        if old is None and name in self.gone:
            return None  # an ADDED/MODIFIED replayed after its DELETED
        self.pods[name] = obj
        return Change(name, observe(obj), False, now)

    def put(self, obj: dict[str, Any]) -> None:
        """An object from our own create or patch answer (newer wins, as for events)."""
        name = pod_name(obj)
        old = self.pods.get(name)
        if old is None or resource_version(old) <= resource_version(obj):
            self.pods[name] = obj
            self.gone.pop(name, None)

    def forget(self, name: str) -> None:
        self.gone.pop(name, None)
