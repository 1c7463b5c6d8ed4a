"""Health and metrics."""

from __future__ import annotations

import time

from fastapi import APIRouter
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST

from firepool.api.context import Context
from firepool.api.metrics import render
from firepool.api.routes.common import json_response
from firepool.api.schemas import HealthOut

router = APIRouter()


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
    wall time, `cpu` the CPU time of the thread in it (on a crowded machine the wall time
    also counts the moments the OS ran something else)."""
    began, cpu = time.perf_counter(), time.thread_time()
    body = render(context.metrics.registry)
    took = (time.perf_counter() - began) * 1000.0
    used = (time.thread_time() - cpu) * 1000.0
    timing = f"render;dur={took:.3f}, cpu;dur={used:.3f}"
    return Response(body, media_type=CONTENT_TYPE_LATEST, headers={"Server-Timing": timing})
