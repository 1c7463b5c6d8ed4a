"""Routes the service adds to the API: agents' exit events and package fetches (authenticated
by the pod's own secret), the caller-facing pod list, and elastic jobs' progress reports
(authenticated by the attempt's progress token, or by the job owner's own token)."""

from __future__ import annotations

import asyncio
import hmac
from typing import TYPE_CHECKING

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse

from firepool.api.context import Authed, authenticate
from firepool.api.routes.common import AUTHED, errors
from firepool.api.schemas import PodList, PodView, ProgressIn, ProgressOut
from firepool.model import (
    JobKind,
    NotFoundError,
    RequestValidationError,
    StrictModel,
    UnauthorizedError,
    parse_attempt_id,
)
from firepool.protocol import ExitEvent

if TYPE_CHECKING:
    from firepool.service.broker import Broker


_BINARY = {"type": "string", "format": "binary"}


class EventAck(StrictModel):
    accepted: bool


def _pod_secret(broker: Broker, request: Request, pod: str | None) -> str:
    """The pod whose secret the request carries (a named one, or any pod for fetches)."""
    header = request.headers.get("authorization", "")
    token = header[7:] if header.lower().startswith("bearer ") else ""
    candidates = [pod] if pod is not None else list(broker.pods.records)
    for name in candidates:
        record = broker.pods.records.get(name)
        if record is not None and token and hmac.compare_digest(record.secret, token):
            return name
    raise UnauthorizedError("not a pod of this broker", field="Authorization")


def _progress_token_ok(broker: Broker, request: Request, attempt: str) -> bool:
    header = request.headers.get("authorization", "")
    token = header[7:].strip() if header.lower().startswith("bearer ") else ""
    return bool(token) and broker.elastic.token_matches(attempt, token)


def service_router(broker: Broker) -> APIRouter:
    router = APIRouter()

    # The internal routes are in the served document too (tag `internal`): the pod agent is
    # their only client, authenticated by its pod's own secret as a bearer token.
    @router.post(
        "/internal/v1/events",
        response_model=EventAck,
        tags=["internal"],
        responses=errors(401, 413, 422),
        openapi_extra=AUTHED,
    )
    async def exit_event(event: ExitEvent, request: Request) -> EventAck:
        """An attempt's exit, reported by its pod's agent; `accepted: false` for a stale
        attempt or one already reported."""
        _pod_secret(broker, request, event.pod)
        return EventAck(accepted=broker.on_exit(event))

    @router.get(
        "/internal/v1/packages/{digest}",
        tags=["internal"],
        response_class=FileResponse,
        responses={
            200: {"content": {"application/zip": {"schema": _BINARY}}},
            **errors(401, 404, 422),
        },
        openapi_extra=AUTHED,
    )
    async def fetch_package(digest: str, request: Request) -> FileResponse:
        """A stored package's zip, for a pod of this broker."""
        _pod_secret(broker, request, None)
        path = broker.packages.path(digest)
        if path is None:
            raise NotFoundError(f"package {digest} is not stored", field="digest")
        return FileResponse(path, media_type="application/zip")

    @router.post(
        "/v1/jobs/{job_id}/progress",
        response_model=ProgressOut,
        tags=["jobs"],
        responses=errors(401, 404, 413, 422),
        openapi_extra=AUTHED,
    )
    async def report_progress(job_id: str, report: ProgressIn, request: Request) -> ProgressOut:
        """An elastic attempt's progress: the first report ends its restore; `samples_per_s`
        replaces the scheduler's estimate for its current size. A stale attempt's report is
        answered with `accepted: false`."""
        owner, _ = parse_attempt_id(report.attempt)
        if owner != job_id:
            raise RequestValidationError(
                f"attempt {report.attempt} is not an attempt of job {job_id}", field="attempt"
            )
        if not _progress_token_ok(broker, request, report.attempt):
            session = await authenticate(request)
            job = await asyncio.to_thread(broker.store.get, job_id)
            if job is None or job.caller != session.caller:
                raise NotFoundError(f"no job {job_id}", field="job_id")
            if job.spec.kind is not JobKind.ELASTIC:
                raise RequestValidationError(
                    f"job {job_id} is not elastic: only elastic jobs report progress",
                    field="job_id",
                )
        accepted = broker.elastic.progress(
            job_id,
            report.attempt,
            broker.clock(),
            samples_per_s=report.samples_per_s,
            fraction=report.fraction,
        )
        return ProgressOut(job=job_id, attempt=report.attempt, accepted=accepted)

    @router.get(
        "/v1/pods",
        response_model=PodList,
        tags=["pods"],
        responses=errors(401, 422),
        openapi_extra=AUTHED,
    )
    async def list_pods(session: Authed) -> PodList:
        """Every pod the broker tracks; owners and sessions only on the caller's own pods."""
        out: list[PodView] = []
        for spec in broker.specs.values():
            for pod in broker.tracker.pool_pods(spec.name):
                mine = pod.owner == session.caller
                out.append(
                    PodView(
                        name=pod.name,
                        pool=pod.pool,
                        role=pod.role.value,
                        state=pod.state.value,
                        owner=pod.owner if mine else None,
                        queue=pod.queue if mine else None,
                        lease_tag=pod.tag if mine else None,
                        group=pod.group,
                        job=pod.job if mine else None,
                        hold_until=pod.hold_until if mine and pod.hold_until else None,
                        created_at=pod.created_at,
                    )
                )
        return PodList(pods=out)

    return router
