"""Helpers the routers share."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import Response

from firepool.api.errors import did_you_mean
from firepool.api.schemas import ErrorOut
from firepool.model import RequestValidationError, StrictModel


def json_response(model: StrictModel, status: int = 200) -> Response:
    """Serialize once with pydantic-core: the route already built a typed model, so FastAPI's
    response-model validation would only repeat the work on the hot path."""
    return Response(model.model_dump_json(), status_code=status, media_type="application/json")


def refuse_unknown_query(request: Request, allowed: set[str]) -> None:
    """Query strings are as strict as bodies: a misspelt filter fails instead of matching all."""
    for name in request.query_params:
        if name not in allowed:
            hint = did_you_mean(name, sorted(allowed))
            raise RequestValidationError(f"unknown query parameter {name!r}{hint}", field=name)


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries for the error statuses a route can answer with; every route that
    reaches the store can also answer 503 `StoreUnavailable` (with `Retry-After`)."""
    entries: dict[int | str, dict[str, Any]] = {s: {"model": ErrorOut} for s in statuses}
    entries[503] = {
        "model": ErrorOut,
        "description": "StoreUnavailable: the database cannot answer now; retry after "
        "the Retry-After header's seconds",
    }
    return entries


#: `openapi_extra` for routes that need a bearer token.
AUTHED: dict[str, Any] = {"security": [{"bearer": []}]}
