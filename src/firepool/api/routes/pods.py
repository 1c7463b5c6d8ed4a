"""`/v1/pods`: the pods the broker tracks; owners and sessions only on the caller's own
(an admin token sees every pod in full)."""

from __future__ import annotations

from fastapi import APIRouter

from firepool.api.context import Authed, Session
from firepool.api.routes.common import AUTHED, errors
from firepool.api.schemas import PodList, PodView

router = APIRouter(prefix="/v1/pods", tags=["pods"])

#: What another caller sees of a custom-image pod: that it is not shared capacity, not whose
#: image it runs.
CUSTOM_IMAGE_HIDDEN = "custom"


@router.get("", response_model=PodList, responses=errors(401), openapi_extra=AUTHED)
async def list_pods(session: Authed) -> PodList:
    """Every pod the broker tracks; owners and sessions only on the caller's own pods, or on
    every pod for an admin token."""
    return PodList(pods=pod_views(session))


def pod_views(session: Session) -> list[PodView]:
    """The pod list as `session`'s caller may see it (the dashboard shows the same)."""
    out: list[PodView] = []
    for pod in session.context.views.pod_list():
        mine = session.admin or pod.owner == session.caller
        out.append(
            PodView(
                name=pod.name,
                pool=pod.pool,
                role=pod.role,
                state=pod.state,
                owner=pod.owner if mine else None,
                queue=pod.queue if mine else None,
                lease_tag=pod.tag if mine else None,
                group=pod.group,
                job=pod.job if mine else None,
                hold_until=pod.hold_until if mine and pod.hold_until else None,
                created_at=pod.created_at,
                isolation=pod.isolation or None,
                image=pod.image if mine or pod.image is None else CUSTOM_IMAGE_HIDDEN,
                pid_namespace=pod.pid_namespace,
                network=pod.network or None,
            )
        )
    return out
