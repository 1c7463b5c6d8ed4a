"""`/v1/pools`: the pools and their rollouts; an admin changes a pool with `PUT`."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from firepool.api.context import AdminSession, Authed
from firepool.api.routes.common import AUTHED, errors, json_response
from firepool.api.schemas import PoolListOut, PoolOut, RolloutOut
from firepool.control.rollout import RolloutProgress
from firepool.model import PoolSpec, RequestValidationError

router = APIRouter(prefix="/v1/pools", tags=["pools"])


@router.get("", response_model=PoolListOut, responses=errors(401), openapi_extra=AUTHED)
async def list_pools(session: Authed) -> Response:
    """Every pool's spec, and how far each is on its current template."""
    context = session.context
    rollouts = [rollout_view(r) for r in context.views.rollouts()]
    return json_response(
        PoolListOut.model_construct(pools=list(context.pools()), rollouts=rollouts)
    )


@router.put(
    "/{name}",
    response_model=PoolOut,
    responses=errors(401, 403, 422, 503),
    openapi_extra=AUTHED,
)
async def apply_pool(name: str, spec: PoolSpec, session: AdminSession) -> Response:
    """Change a pool (admins only). A changed template (image, shape, preloaded modules, or
    a higher `template_version`) rolls the pool's pods over: idle old pods drain first, busy
    ones after their job, `drain_budget` at a time, never above the ceiling."""
    if spec.name != name:
        raise RequestValidationError(
            f"the body names pool {spec.name!r}, the path {name!r}", field="name"
        )
    context = session.context
    applied = await context.pool_admin.apply_pool(spec)
    progress = next(r for r in context.views.rollouts() if r.pool == applied.name)
    return json_response(PoolOut(pool=applied, rollout=rollout_view(progress)))


def rollout_view(progress: RolloutProgress) -> RolloutOut:
    return RolloutOut(
        pool=progress.pool,
        template_version=progress.template_version,
        pods=progress.pods,
        current=progress.current,
        stale_idle=progress.stale_idle,
        stale_busy=progress.stale_busy,
        retiring=progress.retiring,
        done=progress.done,
        edited=progress.edited,
    )
