"""Job operations on behalf of an authenticated caller.

Ownership is checked here, once: a job of another caller is reported exactly like a job that
does not exist (NotFound), so job ids cannot be probed across callers.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Collection

from starlette.concurrency import run_in_threadpool

from firepool.api.context import ApiContext
from firepool.control.gang_network import check_gang_network
from firepool.control.images import check_image
from firepool.model import (
    JobSpec,
    JobState,
    NotFoundError,
    RequestValidationError,
    UnknownPoolError,
)
from firepool.store import JobRecord, Submitted
from firepool.store.logs import LogChunk


async def submit(context: ApiContext, caller: str, spec: JobSpec) -> Submitted:
    pool = context.pool(spec.pool)
    if pool is None:
        known = ", ".join(sorted(p.name for p in context.pools())) or "none configured"
        raise UnknownPoolError(f"unknown pool {spec.pool!r} (known: {known})", field="pool")
    check_image(pool, spec.image)
    if spec.pods > pool.max_count:
        raise RequestValidationError(
            f"pods: {spec.pods} exceeds pool {pool.name}'s ceiling of {pool.max_count}",
            field="pods",
        )
    check_gang_network(pool, spec)
    if spec.package is not None and context.packages.path(spec.package) is None:
        raise RequestValidationError(
            f"package {spec.package} has not been uploaded (POST /v1/packages first)",
            field="package",
        )
    if context.submit_async is not None:
        submitted = await context.submit_async(caller, spec, now=context.clock())
    else:
        submitted = await run_in_threadpool(context.store.submit, caller, spec, now=context.clock())
    if submitted.created:
        context.metrics.jobs_submitted.inc()
        context.signals.job_submitted(submitted.job)
    else:
        context.metrics.submit_replays.inc()
    return submitted


def get_own(context: ApiContext, caller: str, job_id: str) -> JobRecord:
    job = context.store.get(job_id)
    if job is None or job.caller != caller:
        raise NotFoundError(f"job {job_id} not found", field="id")
    return job


def list_own(
    context: ApiContext,
    caller: str,
    *,
    states: Collection[JobState],
    pool: str | None,
    queue: str | None,
    limit: int,
    after: str | None,
) -> list[JobRecord]:
    return context.store.list_jobs(
        caller=caller, states=states, pool=pool, queue=queue, limit=limit, after=after
    )


def cancel(context: ApiContext, caller: str, job_id: str) -> JobRecord:
    before = get_own(context, caller, job_id)
    after = context.store.cancel(before.id, now=context.clock())
    running_stop = after.state == JobState.RUNNING and after.cancel_requested
    cancelled_now = after.state == JobState.CANCELLED and before.state != JobState.CANCELLED
    if (running_stop and not before.cancel_requested) or cancelled_now:
        context.signals.cancel_requested(after)
    if cancelled_now:
        context.signals.job_finished(after)  # long polls on it answer now
    return after


async def get_own_waiting(
    context: ApiContext, caller: str, job_id: str, wait_s: float
) -> JobRecord:
    """The job once it is terminal, or as it stands after `wait_s` seconds. The waiter is
    registered before the read, so a verdict committed in between is not missed."""
    with context.waiters.watch(job_id) as finished:
        job = await run_in_threadpool(get_own, context, caller, job_id)
        return await _until_terminal(context, job, finished, wait_s)


async def wait_for_created(context: ApiContext, job: JobRecord, wait_s: float) -> JobRecord:
    """`get_own_waiting` for the job this very request has just created, without its first
    read (a store read and a thread hop per waiting submission). Nothing is missed: the
    submission's commit returned, the dispatcher was signalled and the waiter is registered
    in one run of the event loop, with no await in between, while the job's end needs many
    later ones (its dispatch commit, its launch, its exit, its verdict's commit). A replayed
    submission (`request_id` known) names an older job that may end at any time: it goes
    through `get_own_waiting`."""
    with context.waiters.watch(job.id) as finished:
        return await _until_terminal(context, job, finished, wait_s)


async def _until_terminal(
    context: ApiContext, job: JobRecord, finished: asyncio.Future[JobRecord], wait_s: float
) -> JobRecord:
    """`job` if it is terminal already (or nobody waits), else the stored record once its
    waiter is released or `wait_s` is up. The answer must be the stored record. The record a
    waiter is released with is the verdict write's; it is the stored row when it carries its
    attempt's start (the broker adds the stamps to the attempt's record only once they are
    stored, and the verdict's record is built from that). Without them the stamps may land
    after the verdict (they are written off the critical path), so the store is read: a
    thread hop and a SELECT that the common case no longer pays."""
    if job.state.terminal or wait_s <= 0:
        return job
    with contextlib.suppress(TimeoutError):
        released = await asyncio.wait_for(finished, wait_s)
        if released.timings.get("started") is not None:
            return released
    return await run_in_threadpool(get_own, context, job.caller, job.id)


def read_logs(
    context: ApiContext,
    caller: str,
    job_id: str,
    *,
    attempt: int | None,
    offset: int,
    limit: int,
    rank: int = 0,
) -> tuple[JobRecord, int, LogChunk]:
    job = get_own(context, caller, job_id)
    retry = job.retries if attempt is None else attempt
    if retry > job.retries:
        raise NotFoundError(f"job {job_id} has no attempt {retry}", field="attempt")
    if rank == 0:
        return job, retry, context.logs.read(job.id, retry, offset=offset, limit=limit)
    if retry == job.retries and job.pods and rank >= len(job.pods):
        raise NotFoundError(
            f"attempt {retry} of job {job_id} ran on {len(job.pods)} pod(s): no rank {rank}",
            field="rank",
        )
    read_rank = getattr(context.logs, "read_rank", None)
    if read_rank is None:
        raise NotFoundError("this broker keeps the output of rank 0 only", field="rank")
    chunk: LogChunk = read_rank(job.id, retry, rank, offset=offset, limit=limit)
    return job, retry, chunk
