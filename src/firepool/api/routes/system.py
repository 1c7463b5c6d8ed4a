"""Health and metrics."""

from __future__ import annotations

import time
from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST

from firepool.api.context import Context
from firepool.api.metrics import render
from firepool.api.routes.common import json_response
from firepool.api.schemas import HealthOut

router = APIRouter()

_SCHEDSTAT = Path("/proc/thread-self/schedstat")


def _run_delay() -> float | None:
    """Seconds this thread has spent runnable but not running (Linux schedstat), or None
    where the kernel does not say."""
    try:
        return int(_SCHEDSTAT.read_bytes().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


@router.get("/healthz", response_model=HealthOut, tags=["system"])
async def healthz() -> Response:
    return json_response(HealthOut(status="ok"))


@router.get(
    "/metrics",
    tags=["system"],
    response_class=Response,
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
)
async def metrics(context: Context) -> Response:
    """The render's own time goes out as `Server-Timing` (the scrape's cost without HTTP or
    the event loop's queue, which `python -m firepool.bench metrics` reads): `render` is its
    wall time, `cpu` the CPU time of the thread in it and, on Linux, `runqueue` the time the
    thread was ready but the OS ran something else. The rest of the wall time the thread
    slept: in a broker, waiting for the GIL held by one of its own threads."""
    # Read nested (wall, CPU, run queue, render, run queue, CPU, wall), so that the CPU and
    # the run-queue time are parts of the wall time even when the OS preempts the thread
    # between two of the reads.
    began = time.perf_counter()
    cpu = time.thread_time()
    queued = _run_delay()
    body = render(context.metrics.registry)
    after = _run_delay()
    used = (time.thread_time() - cpu) * 1000.0
    took = (time.perf_counter() - began) * 1000.0
    timing = f"render;dur={took:.3f}, cpu;dur={used:.3f}"
    if queued is not None and after is not None:
        timing += f", runqueue;dur={(after - queued) * 1000.0:.3f}"
    return Response(body, media_type=CONTENT_TYPE_LATEST, headers={"Server-Timing": timing})
