"""`firepool sim calibrate`: measure this machine's local backend and build a venue from it.

Measured: pod create -> agent ready (one at a time, then `pods` at once for contention) and
delete -> gone. Not yet measured (kept from the `local-cluster` preset): accept, dispatch,
hand-off, first instruction, reset and promotion, which need the service's job path.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from dataclasses import replace

from firepool.sim.venue import LOCAL_CLUSTER, Dist, Venue


def _dist(samples: list[float]) -> Dist:
    ordered = sorted(samples)
    med = statistics.median(ordered)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return Dist(med, max(med, p90))


async def _measure(pods: int) -> tuple[list[float], list[float], float]:
    from firepool.backends.base import PodCreate
    from firepool.backends.local import LocalBackend
    from firepool.model import PoolSpec

    spec = PoolSpec(name="calib", cpus_per_pod=1.0)
    with tempfile.TemporaryDirectory(prefix="firepool-calib-") as root:
        backend = LocalBackend(root, isolation="weak", fake_devices=[])
        singles: list[float] = []
        deletes: list[float] = []
        for _ in range(pods):
            t0 = time.perf_counter()
            rec = await backend.create(PodCreate(pool=spec))
            await backend.wait_ready(rec.name, timeout=60.0)
            singles.append(time.perf_counter() - t0)
            t1 = time.perf_counter()
            await backend.delete(rec.name)
            deletes.append(time.perf_counter() - t1)

        async def one() -> tuple[float, str]:
            t0 = time.perf_counter()
            rec = await backend.create(PodCreate(pool=spec))
            await backend.wait_ready(rec.name, timeout=120.0)
            return time.perf_counter() - t0, rec.name

        together = await asyncio.gather(*(one() for _ in range(pods)))
        for _, name in together:
            await backend.delete(name)
        return singles, deletes, max(t for t, _ in together)


def calibrate_local(pods: int = 4) -> Venue:
    singles, deletes, worst = asyncio.run(_measure(max(2, pods)))
    create = _dist(singles)
    contention = max(0.0, (worst - create.median) / max(1, pods - 1))
    return replace(
        LOCAL_CLUSTER,
        name="local-measured",
        create=create,
        contention_s=contention,
        delete=_dist(deletes),
        source=f"firepool sim calibrate: {pods} local pods one at a time and {pods} at once",
        notes={
            "unmeasured": "accept, dispatch, handoff, first_instruction, reset, promote "
            "are the local-cluster preset's"
        },
    )
