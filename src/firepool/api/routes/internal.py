"""Routes for pod agents, authenticated by the pod's own secret, not a caller's token:
exit events, and package fetches (an agent fetches the package its attempt runs)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse

from firepool.api.context import ApiContext, bearer
from firepool.api.routes.common import AUTHED, errors
from firepool.model import NotFoundError, StrictModel, UnauthorizedError
from firepool.protocol import ExitEvent

router = APIRouter(prefix="/internal/v1", tags=["internal"])


class EventAck(StrictModel):
    accepted: bool


def _pod(request: Request, pod: str | None) -> str:
    context: ApiContext = request.app.state.firepool
    token = bearer(request)
    owner = context.pod_access.pod_for_secret(token, pod) if token else None
    if owner is None:
        raise UnauthorizedError("not a pod of this broker", field="Authorization")
    return owner


@router.post("/events", response_model=EventAck, responses=errors(401, 422), openapi_extra=AUTHED)
async def exit_event(event: ExitEvent, request: Request) -> EventAck:
    """An attempt's exit, pushed by the agent of the pod it ran on."""
    _pod(request, event.pod)
    context: ApiContext = request.app.state.firepool
    return EventAck(accepted=context.pod_access.exit_event(event))


@router.get(
    "/packages/{digest}",
    response_class=FileResponse,
    responses=errors(401, 404),
    openapi_extra=AUTHED,
)
async def fetch_package(digest: str, request: Request) -> FileResponse:
    """The package of the job leased to the asking pod (a pod never fetches another job's
    code: the same answer as for a package that is not stored)."""
    pod = _pod(request, None)
    context: ApiContext = request.app.state.firepool
    if not context.pod_access.pod_may_fetch(pod, digest):
        raise NotFoundError(f"package {digest} is not the package of this pod's job",
                            field="digest")
    path = context.packages.path(digest)
    if path is None:
        raise NotFoundError(f"package {digest} is not stored", field="digest")
    return FileResponse(path, media_type="application/zip")
