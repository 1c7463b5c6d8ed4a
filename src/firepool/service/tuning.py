"""Process tuning for a long-running broker.

CPython's cyclic garbage collector stops the world whenever enough container objects have
been allocated; with FastAPI, pydantic and SQLAlchemy loaded, a full collection walks hundreds
of thousands of long-lived objects and shows up directly as request tail latency (measured on
this 2-core machine: API p99 at 32 clients 96 ms with the default collector, 31 ms with this).
Freezing what start-up created moves those objects out of every later collection, and a larger
first-generation threshold makes collections rarer; reference counting still frees everything
that is not part of a cycle, so memory does not grow.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

GEN0_THRESHOLD = 50_000


def tune_gc_for_serving() -> None:
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GEN0_THRESHOLD, gen1, gen2)


def run_serving(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run` on uvloop where it is installed (a dependency wherever it builds: not on
    Windows). The broker's one event loop carries every API request and every agent call, and
    on uvloop its sockets, timers and task switches cost less CPU: with httptools serving
    the API beside it, 0.85x the broker's CPU per job in alternated rounds of
    `bench throughput` on 2 cores (median of 4; docs/performance.md, "2026-12-02, afternoon").
    Only a process that *is* the broker runs this way (`firepool serve` and the benchmarks'
    broker processes); embedding code keeps the loop it chose."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)

