"""`/` (the dashboard's shell) and `/dashboard/panel` (its data, for a bearer token).

The shell is public and holds no data; the panel authenticates like every API route, so the
API token is what unlocks the dashboard. Both stay out of the OpenAPI document: they are a
face for people, not part of the contract programs use.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import HTMLResponse
from starlette.concurrency import run_in_threadpool

from firepool.api.context import Authed
from firepool.api.routes.pods import pod_views
from firepool.api.schemas import JobOut
from firepool.dashboard.page import SHELL, PanelData, panel
from firepool.model import JobKind
from firepool.store import JobRecord

router = APIRouter(include_in_schema=False)

#: The caller's jobs the panel shows: newest first, read with a LIMIT, so the page costs the
#: same with ten jobs in the store or a million.
RECENT_JOBS = 50
#: Elastic jobs of the shown rounds whose owner is looked up (one read each), at most.
MAX_ELASTIC_JOBS = 50


@router.get("/", response_class=HTMLResponse)
async def shell() -> HTMLResponse:
    return HTMLResponse(SHELL, headers={"Cache-Control": "no-store"})


@router.get("/dashboard/panel", response_class=HTMLResponse)
async def dashboard_panel(session: Authed) -> HTMLResponse:
    context = session.context
    views = context.views
    rounds = views.round_allocations()
    elastic_ids = sorted({job for r in rounds for job in r.pods})[:MAX_ELASTIC_JOBS]

    def read() -> tuple[list[JobRecord], frozenset[str]]:
        store = context.store
        recent = store.list_jobs(caller=session.caller, limit=RECENT_JOBS, newest_first=True)
        mine = {job.id for job in recent if job.spec.kind is JobKind.ELASTIC}
        for job_id in elastic_ids:
            found = None if job_id in mine else store.get(job_id)
            if found is not None and found.caller == session.caller:
                mine.add(job_id)
        return recent, frozenset(mine)

    jobs, own = await run_in_threadpool(read)
    data = PanelData(
        caller=session.caller,
        now=context.clock(),
        pools=list(context.pools()),
        stats=views.pool_stats(),
        pods=pod_views(session),
        jobs=[JobOut.of(job) for job in jobs],
        timeline=views.timeline(),
        rounds=rounds,
        own=own,
    )
    return HTMLResponse(panel(data), headers={"Cache-Control": "no-store"})
