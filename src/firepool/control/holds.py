"""Owner holds: after a clean release a used pod is held for its last caller's session for the
pool's `hold_seconds`, then retires; some pods retire at once instead.

`release_reason` is the one rule for which (a recycled pod's session boundary, single use, a
mutable custom image, an old template, no hold configured); `HoldQueue` orders the running
holds by expiry so that expiring them costs only the holds that are due. Kept apart from the
tracker so the hold rule reads in one place; the tracker owns the pod indexes it updates.

No I/O and no clock: callers pass `now`.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator

from firepool.control.records import Pod, RetireReason
from firepool.model import PoolSpec, image_is_pinned


def release_reason(pod: Pod, spec: PoolSpec) -> RetireReason | None:
    """Why a clean release retires the pod rather than hold it (None: it is held)."""
    reason = pod.retire_after
    if reason is None:
        if pod.single_use:
            reason = RetireReason.SINGLE_USE
        elif pod.image is not None and not image_is_pinned(pod.image):
            reason = RetireReason.CUSTOM_IMAGE
        elif pod.template != spec.template_version:
            reason = RetireReason.STALE_TEMPLATE
        elif spec.hold_seconds <= 0:
            reason = RetireReason.HOLD_EXPIRED
    return reason


class HoldQueue:
    """Running holds by expiry time. A pod re-held, reclaimed or retired since leaves a stale
    entry behind rather than being searched for; `due` yields it and the tracker skips it,
    telling it apart by the pod's own `hold_until`."""

    __slots__ = ("_heap",)

    def __init__(self) -> None:
        self._heap: list[tuple[float, str]] = []

    def add(self, until: float, name: str) -> None:
        heapq.heappush(self._heap, (until, name))

    def due(self, now: float) -> Iterator[tuple[float, str]]:
        """Pop and yield every (until, pod) entry whose hold has run out by `now`."""
        heap = self._heap
        while heap and heap[0][0] <= now:
            yield heapq.heappop(heap)
