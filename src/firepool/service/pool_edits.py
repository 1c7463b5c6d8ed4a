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
from collections.abc import Callable, Iterable

from firepool.control.actions import Action
from firepool.control.core import BrokerCore
from firepool.control.pool_edits import stored_edits_to_apply
from firepool.model import PoolSpec
from firepool.service.outage import until_stored
from firepool.store import JobStore

log = logging.getLogger("firepool.service.pool_edits")


class PoolEdits:
    def __init__(
        self,
        *,
        core: BrokerCore,
        store: JobStore,
        act: Callable[[Iterable[Action]], None],
        clock: Callable[[], float],
    ) -> None:
        self.core = core
        self.store = store
        self.act = act
        self.clock = clock
        self._lock = asyncio.Lock()

    async def apply(self, spec: PoolSpec) -> PoolSpec:
        """One edit at a time: the spec stored is the spec the core then runs (and the pods
        created from now on take it)."""
        async with self._lock:
            new = self.core.preview_pool(spec)
            await asyncio.to_thread(self.store.save_pool_edit, new, now=self.clock())
            self.act(self.core.set_pool(new, self.clock()))
            return self.core.specs[new.name]

    async def restore(self) -> None:
        edits = await until_stored(
            lambda: asyncio.to_thread(self.store.pool_edits), what="the applied pool edits"
        )
        chosen = stored_edits_to_apply(self.core.specs, [e.spec for e in edits])
        for line in chosen.skipped:
            log.warning("%s", line)
        for spec in chosen.apply:
            self.act(self.core.set_pool(spec, self.clock()))
            log.info("pool %s runs its applied edit (template_version %d)",
                     spec.name, spec.template_version)  # fmt: skip
