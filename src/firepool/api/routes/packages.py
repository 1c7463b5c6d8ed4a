"""`/v1/packages`: zip upload, content-addressed."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from firepool.api.context import Authed
from firepool.api.routes.common import AUTHED, errors, json_response
from firepool.api.schemas import PackageOut
from firepool.api.services import packages as service

router = APIRouter(prefix="/v1/packages", tags=["packages"])


@router.post(
    "",
    status_code=201,
    response_model=PackageOut,
    responses={
        200: {"model": PackageOut, "description": "already stored"},
        **errors(401, 413, 422),
    },
    openapi_extra={
        **AUTHED,
        "requestBody": {
            "required": True,
            "content": {
                kind: {"schema": {"type": "string", "format": "binary"}}
                for kind in ("application/zip", "application/octet-stream")
            },
        },
    },
)
async def upload_package(request: Request, session: Authed) -> Response:
    """Upload a zip as the raw request body; the answer's `digest` names it in job specs.
    Unsafe archives (symlinks, absolute or `..` paths, zip bombs, corrupt data) are refused
    and nothing is kept."""
    stored = await service.upload(session.context, session.caller, request.stream())
    body = PackageOut(digest=stored.digest, size=stored.size, created=stored.created)
    return json_response(body, 201 if stored.created else 200)
