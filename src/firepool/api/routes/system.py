"""Health and metrics."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from firepool.api.context import Context
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
    return Response(generate_latest(context.metrics.registry), media_type=CONTENT_TYPE_LATEST)
