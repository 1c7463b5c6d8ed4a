"""firepool's embedded broker in a child process of its own (as `firepool serve` runs it), so
the callers' event loop and Ray's threads do not share its CPU time slices with it.

Pools: `peers-<phase>` for the short-job stream and each loop (capped like the demo's pools),
`probe` (one pod, no owner hold: the next caller's probe job runs only once the planting
pod is gone, since a used pod never serves another caller) and `probe-same` (one pod, held
for its owner: the same caller's next probe job must run on it, after its reset).
"""

from __future__ import annotations

import asyncio
import multiprocessing
from pathlib import Path
from typing import Any

from firepool.service.tuning import run_serving

#: The phases that get a pool of their own: the short-job stream and the loops.
PHASES = ("short", "agent", "rl")


def _serve(data_dir: str, cap: int, callers: list[str], ready: Any, stop: Any) -> None:
    run_serving(_serve_async(data_dir, cap, callers, ready, stop))  # as `firepool serve` runs


async def _serve_async(data_dir: str, cap: int, callers: list[str], ready: Any, stop: Any) -> None:
    from firepool.composition import EmbeddedBroker
    from firepool.model import PoolSpec
    from firepool.service.broker import BrokerConfig
    from firepool.service.catalog import Catalog

    # One pool per workload, each capped like the demo's: a caller's held pods from one phase
    # (holds last the keep-alive) must not take the next phase's capacity.
    pools = (
        *(
            PoolSpec(
                name=f"peers-{phase}", min_count=0, max_count=cap, step=cap, idle_timeout=600.0
            )
            for phase in PHASES
        ),
        PoolSpec(
            name="probe", min_count=0, max_count=1, idle_timeout=600.0, caller_hold_seconds=0.0
        ),
        PoolSpec(name="probe-same", min_count=0, max_count=1, idle_timeout=600.0),
    )
    config = BrokerConfig(reconcile_s=5.0, hold_tick_s=0.2, exit_poll_s=1.0)
    async with EmbeddedBroker(
        Path(data_dir),
        catalog=Catalog(pools),
        config=config,
        delete_pods_on_exit=True,
        tune_gc=True,  # as `firepool serve` does
    ) as broker:
        tokens = {name: await asyncio.to_thread(broker.issue, name) for name in callers}
        ready.put((broker.url, tokens))
        await asyncio.to_thread(stop.wait)


class BrokerProcess:
    def __init__(self, data_dir: Path, *, cap: int) -> None:
        self.data_dir = data_dir
        self.cap = cap
        self._ctx = multiprocessing.get_context("spawn")  # never fork a process running Ray
        self._stop = self._ctx.Event()
        self._process: Any = None

    def start(self, callers: list[str]) -> tuple[str, dict[str, str]]:
        ready = self._ctx.Queue()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._process = self._ctx.Process(
            target=_serve,
            args=(str(self.data_dir), self.cap, callers, ready, self._stop),
            daemon=True,
        )
        self._process.start()
        url, tokens = ready.get(timeout=120)
        return url, tokens

    def stop(self) -> None:
        if self._process is None:
            return
        self._stop.set()
        self._process.join(timeout=120)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
