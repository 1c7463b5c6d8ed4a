"""The keep-alive loop, and the silence bound it follows.

A backend whose agents end their pods after a silence of the broker (its capability
`agent_fence`, `backends/base.py`) must hear from the broker more often than that: every pod
is pinged at a quarter of the shortest bound. The same bound sets the broker's lost window
(`AttemptRunner`) and recovery's choice to re-attach a silent rank, so both sides derive
from one setting.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping

from firepool.backends.base import BackendCapabilities
from firepool.control.keepalive import keepalive_interval
from firepool.model import PoolSpec
from firepool.service.pods import PodManager


def silence_s(
    capabilities: BackendCapabilities, specs: Mapping[str, PoolSpec], pool: str
) -> float | None:
    """The silence `pool`'s agents tolerate before ending their pods and fencing their
    attempts (None: any, or no such pool)."""
    spec = specs.get(pool)
    return capabilities.broker_silence_s(spec) if spec is not None else None


def keepalive_s(
    capabilities: BackendCapabilities, specs: Mapping[str, PoolSpec]
) -> float | None:
    """How often every pod hears from the broker: a quarter of the shortest silence its
    agents tolerate before ending their pods (None: they tolerate any)."""
    return keepalive_interval(silence_s(capabilities, specs, name) for name in specs)


async def keepalive_loop(
    pods: PodManager, period_s: float | None, closing: Callable[[], bool]
) -> None:
    if period_s is None:
        return
    while not closing():
        await asyncio.sleep(period_s)

        async def ping(name: str) -> None:
            with contextlib.suppress(Exception):
                await pods.agent(name).health()

        await asyncio.gather(*(ping(n) for n in list(pods.records)))
