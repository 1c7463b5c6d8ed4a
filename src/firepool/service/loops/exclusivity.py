"""The exclusivity sweep after a restart: standbys are promoted only on GPUs a live sweep
has verified (every pod the backend has on the card belongs to the card's own group, one of
ours restored into that group; the rule is `control.recovery.exclusive_groups`). A card
whose devices the backend does not report, or that another pod shares, stays closed; a
failed read changes nothing. Repeats until every card is open, then ends."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from firepool.backends.base import PodBackend
from firepool.control.actions import Action
from firepool.control.core import BrokerCore

log = logging.getLogger("firepool.service.recovery")

#: How often the exclusivity sweep reads the cards again while some are unverified.
SWEEP_RETRY_S = 5.0


async def sweep_exclusivity(
    backend: PodBackend,
    core: BrokerCore,
    act: Callable[[Iterable[Action]], None],
    clock: Callable[[], float],
    closing: Callable[[], bool],
) -> None:
    tracker = core.tracker
    while tracker.unverified and not closing():
        try:
            records = await backend.list_pods()
        except Exception as exc:
            log.warning("exclusivity sweep could not list pods: %r", exc)
            records = None
        if records is not None:
            devices = {r.name: r.devices for r in records}
            act(core.devices_listed(devices, clock()))
        if tracker.unverified:
            await asyncio.sleep(SWEEP_RETRY_S)
