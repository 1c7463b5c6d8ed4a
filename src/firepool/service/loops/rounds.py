"""The elastic round loop: the round policy warmed up once (its solver's imports and first
solve off the event loop), then a round whenever the core says one is due (its period, or
an arrival, completion or failure brought it forward). Each decision's time is kept for
the experiments and exported as a histogram."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable

from firepool.control.actions import Action
from firepool.control.core import BrokerCore
from firepool.service.elastic import ElasticDriver
from firepool.service.telemetry import BrokerTelemetry

log = logging.getLogger("firepool.service")


async def round_loop(
    core: BrokerCore,
    driver: ElasticDriver,
    telemetry: BrokerTelemetry,
    act: Callable[[Iterable[Action]], None],
    clock: Callable[[], float],
    *,
    tick_s: float,
    policy: str,
    closing: Callable[[], bool],
) -> None:
    elastic = core.elastic
    if elastic is None:
        return
    try:
        await asyncio.to_thread(elastic.warm_up)
    except Exception:
        log.exception("round policy warm-up failed")
    while not closing():
        await asyncio.sleep(tick_s)
        try:
            now = clock()
            if core.round_due(now):
                started = time.perf_counter()
                actions = core.round(now)
                driver.decide_ms.append((time.perf_counter() - started) * 1000.0)
                telemetry.round.labels(policy).observe(driver.decide_ms[-1] / 1000.0)
                act(actions)
        except Exception:
            log.exception("elastic round failed")
