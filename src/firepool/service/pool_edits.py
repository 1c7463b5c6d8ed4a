"""An admin's pool edit, kept in the store before it takes effect, and run again at start.

`apply` writes the edit to the store first and applies it only once the store took it: an
edit the store refused is not applied (the caller gets the store's error), so what the
broker runs never exceeds what a restart would run. `restore` lays the stored edits over
the catalog before recovery adopts the pods, so pods already built from an edited template
count as current and no rollout restarts them.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from firepool.control.pool_edits import stored_edits_to_apply
from firepool.model import PoolSpec
from firepool.service.outage import until_stored

if TYPE_CHECKING:
    from firepool.service.broker import Broker

log = logging.getLogger("firepool.service.pool_edits")


async def apply(broker: Broker, spec: PoolSpec, lock: asyncio.Lock) -> PoolSpec:
    """One edit at a time (`lock`): the spec stored is the spec the core then runs."""
    async with lock:
        new = broker.core.preview_pool(spec)
        await asyncio.to_thread(broker.store.save_pool_edit, new, now=broker.clock())
        broker.act(broker.core.set_pool(new, broker.clock()))
        return broker.specs[new.name]


async def restore(broker: Broker) -> None:
    edits = await until_stored(
        lambda: asyncio.to_thread(broker.store.pool_edits), what="the applied pool edits"
    )
    chosen = stored_edits_to_apply(broker.specs, [e.spec for e in edits])
    for line in chosen.skipped:
        log.warning("%s", line)
    for spec in chosen.apply:
        broker.act(broker.core.set_pool(spec, broker.clock()))
        log.info("pool %s runs its applied edit (template_version %d)",
                 spec.name, spec.template_version)
