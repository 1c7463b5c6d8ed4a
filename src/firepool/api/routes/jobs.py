"""`/v1/jobs`: submit, read, list, cancel, logs."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from firepool.api.context import ApiContext, Authed, authenticate, bearer
from firepool.api.routes.common import AUTHED, errors, json_response, refuse_unknown_query
from firepool.api.schemas import JobListOut, JobOut, LogsOut, ProgressIn, ProgressOut
from firepool.api.services import jobs as service
from firepool.api.waiters import MAX_WAIT_S
from firepool.model import (
    JobKind,
    JobSpec,
    JobState,
    NotFoundError,
    RequestValidationError,
    parse_attempt_id,
)

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])

JobId = Annotated[str, Query(min_length=1, max_length=64)]
#: A long poll, on a submission or a read: one request instead of polling.
WaitS = Annotated[
    float | None,
    Query(
        ge=0,
        le=MAX_WAIT_S,
        description="Hold the answer until the job is terminal, at most this many seconds "
        f"(0 to {MAX_WAIT_S:g}), then answer with the job as it stands. One request instead "
        "of polling (on a submission: a short job's submission and result in one).",
    ),
]


@router.post(
    "",
    status_code=201,
    response_model=JobOut,
    responses={
        200: {"model": JobOut, "description": "an earlier submission with the same request_id"},
        **errors(401, 409, 413, 422),
    },
    openapi_extra=AUTHED,
)
async def submit_job(
    spec: JobSpec,
    session: Authed,
    wait_s: WaitS = None,
) -> Response:
    """Submit a job. With `request_id`, a retried submission returns the first job (200).
    With `wait_s`, the answer waits for the job's end as `GET /v1/jobs/{id}?wait_s` does."""
    submitted = await service.submit(session.context, session.caller, spec)
    job = submitted.job
    if wait_s and not job.state.terminal:
        if submitted.created:
            job = await service.wait_for_created(session.context, job, wait_s)
        else:
            job = await service.get_own_waiting(session.context, session.caller, job.id, wait_s)
    return json_response(JobOut.of(job), 201 if submitted.created else 200)


@router.get("", response_model=JobListOut, responses=errors(401, 422), openapi_extra=AUTHED)
async def list_jobs(
    request: Request,
    session: Authed,
    state: Annotated[list[JobState] | None, Query()] = None,
    pool: Annotated[str | None, Query(max_length=63)] = None,
    queue: Annotated[str | None, Query(max_length=128)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    after: Annotated[str | None, Query(min_length=1, max_length=64)] = None,
) -> Response:
    """The caller's own jobs, oldest first, filtered by state (repeatable), pool and queue.
    A full page carries `next`: pass it as `after` for the following page."""
    refuse_unknown_query(request, {"state", "pool", "queue", "limit", "after"})
    found = await run_in_threadpool(
        lambda: service.list_own(
            session.context,
            session.caller,
            states=state or (),
            pool=pool,
            queue=queue,
            limit=limit,
            after=after,
        )
    )
    following = found[-1].id if len(found) == limit else None
    return json_response(
        JobListOut.model_construct(jobs=[JobOut.of(j) for j in found], next=following)
    )


@router.get(
    "/{job_id}", response_model=JobOut, responses=errors(401, 404, 422), openapi_extra=AUTHED
)
async def get_job(
    job_id: str,
    session: Authed,
    wait_s: WaitS = None,
) -> Response:
    """The job. With `wait_s`, answered as soon as the job is terminal (or after `wait_s`
    seconds with its current state)."""
    if wait_s:
        job = await service.get_own_waiting(session.context, session.caller, job_id, wait_s)
    else:
        job = await run_in_threadpool(service.get_own, session.context, session.caller, job_id)
    return json_response(JobOut.of(job))


@router.post(
    "/{job_id}/cancel",
    response_model=JobOut,
    responses={
        202: {"model": JobOut, "description": "running; the stop is pending"},
        **errors(401, 404, 409),
    },
    openapi_extra=AUTHED,
)
async def cancel_job(job_id: str, session: Authed) -> Response:
    """Cancel. A queued job is CANCELLED at once (200); a running one is marked and stopped by
    the dispatcher (202, `cancel_requested: true`); a finished job is returned unchanged."""
    job = await run_in_threadpool(service.cancel, session.context, session.caller, job_id)
    pending = job.state == JobState.RUNNING
    return json_response(JobOut.of(job), 202 if pending else 200)


@router.get(
    "/{job_id}/logs",
    response_model=LogsOut,
    responses=errors(401, 404, 422),
    openapi_extra=AUTHED,
)
async def job_logs(
    request: Request,
    job_id: str,
    session: Authed,
    attempt: Annotated[int | None, Query(ge=0, le=1000)] = None,
    offset: Annotated[int, Query(ge=0, le=2**53)] = 0,
    limit: Annotated[int, Query(ge=1, le=4 * 1024 * 1024)] = 1024 * 1024,
    rank: Annotated[int, Query(ge=0, le=4095)] = 0,
) -> Response:
    """A byte range of one attempt's log (default: the current attempt) of one rank (default
    0, the first pod). Poll with `offset=next_offset` to follow a running job; `complete` says
    the log will not grow."""
    refuse_unknown_query(request, {"attempt", "offset", "limit", "rank"})
    job, retry, chunk = await run_in_threadpool(
        lambda: service.read_logs(
            session.context,
            session.caller,
            job_id,
            attempt=attempt,
            offset=offset,
            limit=limit,
            rank=rank,
        )
    )
    next_offset = chunk.offset + len(chunk.data)
    finished = job.state.terminal or retry < job.retries
    return json_response(
        LogsOut(
            job=job.id,
            attempt=f"{job.id}:{retry}",
            offset=chunk.offset,
            next_offset=next_offset,
            size=chunk.size,
            data=chunk.data.decode("utf-8", errors="replace"),
            complete=finished and next_offset >= chunk.size,
        )
    )


@router.post(
    "/{job_id}/progress",
    response_model=ProgressOut,
    responses=errors(401, 404, 422),
    openapi_extra=AUTHED,
)
async def report_progress(job_id: str, report: ProgressIn, request: Request) -> ProgressOut:
    """An elastic attempt's progress: the first report ends its restore; `samples_per_s`
    replaces the scheduler's estimate for its current size. A stale attempt's report is
    answered with `accepted: false`. Authenticated by the attempt's progress token (set in
    the job's environment), or by the job owner's own token."""
    owner, _ = parse_attempt_id(report.attempt)
    if owner != job_id:
        raise RequestValidationError(
            f"attempt {report.attempt} is not an attempt of job {job_id}", field="attempt"
        )
    context: ApiContext = request.app.state.firepool
    token = bearer(request)
    if not (token and context.progress.progress_token_ok(report.attempt, token)):
        session = await authenticate(request)
        job = await run_in_threadpool(context.store.get, job_id)
        if job is None or job.caller != session.caller:
            raise NotFoundError(f"no job {job_id}", field="job_id")
        if job.spec.kind is not JobKind.ELASTIC:
            raise RequestValidationError(
                f"job {job_id} is not elastic: only elastic jobs report progress",
                field="job_id",
            )
    accepted = context.progress.progress(
        job_id, report.attempt, samples_per_s=report.samples_per_s, fraction=report.fraction
    )
    return ProgressOut(job=job_id, attempt=report.attempt, accepted=accepted)
