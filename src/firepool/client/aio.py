"""`firepool.AsyncClient`: the asyncio SDK, method for method the same as `Client`.

    async with firepool.AsyncClient() as client:
        async with client.session():  # one lease tag for this agent's calls
            job = await client.run("cpu", ["python", "tool.py"], package="./tools")

Requests, answers and polling decisions come from the same `calls` and `polling` modules as
the blocking client; zipping a package runs on a worker thread so the loop stays responsive.
"""

from __future__ import annotations

import asyncio
import builtins
import os
import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar, Unpack

import httpx
from pydantic import BaseModel

from firepool.api.schemas import JobOut, PodView, PoolListOut, PoolOut, ProgressIn, ProgressOut
from firepool.client import calls
from firepool.client.base import DEFAULT_RETRY_S, DEFAULT_TIMEOUT, ClientBase, is_digest
from firepool.client.errors import WaitTimeoutError, unreachable
from firepool.client.packaging import load_package
from firepool.client.polling import LogCursor, Step, Waiting, first_wait
from firepool.client.retry import Retrying
from firepool.client.session import AsyncClientSession
from firepool.model import JobSpec, JobState, PoolSpec

ModelT = TypeVar("ModelT", bound=BaseModel)


class AsyncClient(ClientBase):
    """`Client` for asyncio code; share one per process (it pools connections)."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        data_dir: str | os.PathLike[str] | None = None,
        retry_s: float = DEFAULT_RETRY_S,
    ) -> None:
        super().__init__(url, token, timeout=timeout, data_dir=data_dir, retry_s=retry_s)
        base, socket_path = self._endpoint()
        self._http = httpx.AsyncClient(
            base_url=base,
            headers=self._headers(),
            timeout=timeout,
            transport=httpx.AsyncHTTPTransport(uds=socket_path) if socket_path else None,
        )

    # ------------------------------------------------------------------ plumbing
    async def _send(self, call: calls.Call[ModelT]) -> ModelT:
        """Send `call`; a 503 to a call safe to repeat is waited out (`client.retry`)."""
        retrying = Retrying(self.retry_s) if call.retry else None
        began = time.monotonic()
        while True:
            try:
                response = await self._http.request(
                    call.method,
                    call.path,
                    params=call.params or None,
                    json=call.json,
                    content=call.content,
                    headers=call.headers or None,
                    timeout=self.timeout + call.hold_s if call.hold_s else httpx.USE_CLIENT_DEFAULT,
                )
            except httpx.TransportError as err:
                raise unreachable(self.url, err) from err
            pause = None if retrying is None else retrying.pause(response, time.monotonic() - began)
            if pause is None:
                return call.parse(response)
            await asyncio.sleep(pause)

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def session(
        self, lease_tag: str | None = None, *, queue: str | None = None
    ) -> AsyncClientSession:
        """A reuse session: submissions inside `with` (or `async with`) carry this lease tag
        (a fresh random one when none is given) and, if given, this queue; the session's own
        `submit` and `run` carry them too, entered or not."""
        return AsyncClientSession(self, lease_tag, queue)

    # ------------------------------------------------------------------ jobs
    async def submit(
        self, pool: str, command: Sequence[str], **options: Unpack[calls.SubmitOptions]
    ) -> JobOut:
        """Submit a job and return its record (QUEUED). See `SubmitOptions` for the fields."""
        return await self._submit(pool, command, options, wait_s=None)

    async def _submit(
        self,
        pool: str,
        command: Sequence[str],
        options: calls.SubmitOptions,
        *,
        wait_s: float | None,
    ) -> JobOut:
        package = options.get("package")
        digest = None if package is None else await self.upload_package(package)
        return await self._send(self._submission(pool, command, options, digest, wait_s))

    async def submit_spec(self, spec: JobSpec | Mapping[str, Any]) -> JobOut:
        """Submit a prepared spec as it is (no session defaults, no package upload)."""
        return await self._send(calls.submit(spec))

    async def get(self, job_id: str) -> JobOut:
        return await self._send(calls.get(job_id))

    async def list(
        self,
        *,
        state: JobState | str | Iterable[JobState | str] | None = None,
        pool: str | None = None,
        queue: str | None = None,
        limit: int | None = None,
        after: str | None = None,
    ) -> builtins.list[JobOut]:
        """This caller's jobs, oldest first, one page (the broker's default limit is 100);
        pass the last id of a full page as `after` for the next one."""
        call = calls.list_jobs(state=state, pool=pool, queue=queue, limit=limit, after=after)
        return (await self._send(call)).jobs

    async def cancel(self, job_id: str) -> JobOut:
        """Cancel: a queued job ends at once; a running one comes back RUNNING with
        `cancel_requested` and is stopped by the broker (use `wait` to see it end)."""
        return await self._send(calls.cancel(job_id))

    async def progress(
        self,
        job_id: str,
        attempt: str,
        *,
        step: int | None = None,
        samples_per_s: float | None = None,
        fraction: float | None = None,
    ) -> ProgressOut:
        """Report an elastic attempt's progress: the first report ends its restore, the
        throughput replaces the scheduler's estimate for its size. Inside a job, prefer
        `firepool.client.report_progress`, which reads the attempt and its token from the
        environment the broker set."""
        report = ProgressIn(
            attempt=attempt, step=step, samples_per_s=samples_per_s, fraction=fraction
        )
        return await self._send(calls.progress(job_id, report))

    async def wait(self, job_id: str, timeout: float | None = None) -> JobOut:
        """Wait until the job is terminal and return it; `WaitTimeoutError` after `timeout`
        seconds (the job keeps running). Long polls (`wait_s`): about one request per job;
        against a broker without them, polls with a growing pause."""
        waiting = Waiting(job_id, timeout, time.monotonic())
        while True:
            call = waiting.request(time.monotonic())
            sent = time.monotonic()
            job = await self._send(call)
            if job.state.terminal:
                return job
            now = time.monotonic()
            pause = waiting.pause(call.hold_s, now - sent, now)
            if pause is None:
                raise WaitTimeoutError(job_id, timeout or 0.0, job.state.value)
            if pause > 0:
                await asyncio.sleep(pause)

    async def run(
        self,
        pool: str,
        command: Sequence[str],
        *,
        wait_timeout: float | None = None,
        **options: Unpack[calls.SubmitOptions],
    ) -> JobOut:
        """Submit and wait: the finished job, with its exit code and acquisition paths. The
        submission itself waits (`wait_s`), so a short job costs one request."""
        started = time.monotonic()
        job = await self._submit(pool, command, options, wait_s=first_wait(wait_timeout))
        if job.state.terminal:
            return job
        left = None if wait_timeout is None else wait_timeout - (time.monotonic() - started)
        return await self.wait(job.id, timeout=left)

    async def logs(
        self, job_id: str, *, follow: bool = False, attempt: int | None = None, rank: int = 0
    ) -> AsyncIterator[str]:
        """The job's output as text chunks: every attempt in order (or only `attempt`), of
        rank `rank` (0: the first pod). With `follow`, keeps reading until the job is terminal."""
        cursor = LogCursor(
            job_id, follow, attempt=attempt or 0, only_attempt=attempt is not None, rank=rank
        )
        step = Step.READ
        while step is not Step.STOP:
            if step is Step.CHECK_JOB:
                step = cursor.job_seen(await self.get(job_id))
                continue
            if step is Step.WAIT:
                await asyncio.sleep(cursor.backoff.delay())
            page = await self._send(cursor.request())
            step = cursor.feed(page)
            if page.data:
                yield page.data

    # ------------------------------------------------------------------ packages
    async def upload_package(self, source: str | os.PathLike[str]) -> str:
        """Upload a directory (zipped deterministically) or a zip file, once per digest per
        client; returns the digest to name it in `submit(package=...)`. A digest passes
        through untouched."""
        if is_digest(source):
            return str(source)
        package = await asyncio.to_thread(load_package, source)
        if package.digest not in self._uploaded:
            stored = await self._send(calls.upload_package(package.data))
            self._uploaded.add(stored.digest)
        return package.digest

    # ------------------------------------------------------------------ capacity
    async def pools(self) -> builtins.list[PoolSpec]:
        return (await self._send(calls.pools())).pools

    async def pool_status(self) -> PoolListOut:
        """The pools and each one's template rollout progress."""
        return await self._send(calls.pools())

    async def apply_pool(self, spec: PoolSpec) -> PoolOut:
        """Change a pool (admin tokens only); a changed template rolls its pods over."""
        return await self._send(calls.apply_pool(spec))

    async def pods(self) -> builtins.list[PodView]:
        return (await self._send(calls.pods())).pods
