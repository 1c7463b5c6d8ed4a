"""A real broker API for SDK and CLI tests: SQLite store, disk packages, file logs, served by
uvicorn on a real socket, and helpers that move jobs through the store's own API the way the
dispatcher would (start, log, finish), so clients can be tested end to end without pods.

One uvicorn serves a whole test session through `AppSwitch`; each test installs a fresh app
over its own temporary directory. `firepool.testing.service.running_broker` is the whole broker
instead (dispatcher and real local pods), for the few tests that must see a job really run.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from starlette.types import ASGIApp, Receive, Scope, Send

from firepool.api import create_app, issue_token
from firepool.api.hooks import NoHooks
from firepool.model import (
    AcquisitionPath,
    JobErrorClass,
    JobState,
    NetworkAccess,
    PoolSpec,
)
from firepool.packages import DiskPackageStore
from firepool.store import JobRecord, PodBinding, SqlJobStore, open_store
from firepool.store.logs import RankLogStorage

POOLS = (
    # network host: a gang's pods must reach each other (control/gang_network.py)
    PoolSpec(name="cpu", max_count=4, allowed_images=("registry.local/team",),
              network=NetworkAccess.HOST),
    PoolSpec(name="gpu", accelerator="fake", accelerators_per_pod=1),
)


class AppSwitch:
    """An ASGI app that forwards to whichever app the current test installed."""

    def __init__(self) -> None:
        self.app: ASGIApp | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert self.app is not None, "no app installed for this test"
        await self.app(scope, receive, send)


@dataclass
class LiveBroker:
    url: str
    data_dir: Path
    store: SqlJobStore
    packages: DiskPackageStore
    logs: RankLogStorage
    tokens: dict[str, str]
    #: The API's hooks: `finish` tells them, as the dispatcher does, so long polls answer.
    hooks: NoHooks

    def write_local_defaults(self, caller: str = "alice") -> None:
        """What `firepool serve --data-dir` leaves for local clients."""
        (self.data_dir / "url").write_text(self.url + "\n")
        (self.data_dir / "token").write_text(self.tokens[caller] + "\n")

    def job(self, job_id: str) -> JobRecord:
        job = self.store.get(job_id)
        assert job is not None, job_id
        return job

    def start(self, job_id: str, pod: str = "cpu-0") -> JobRecord:
        binding = PodBinding(0, pod, AcquisitionPath.WARM, "no_own_pod")
        return self.store.start(self.job(job_id), [binding], now=time.time())

    def log(self, job_id: str, text: str, retry: int = 0) -> None:
        self.logs.append(job_id, retry, text.encode())

    def retry(self, job_id: str) -> JobRecord:
        return self.store.requeue(
            self.job(job_id), now=time.time(), error_class=JobErrorClass.POD_LOST
        )

    def finish(
        self,
        job_id: str,
        state: JobState = JobState.SUCCEEDED,
        *,
        exit_code: int | None = 0,
        error_class: JobErrorClass | None = None,
        message: str | None = None,
    ) -> JobRecord:
        job = self.job(job_id)
        if job.state == JobState.QUEUED:
            job = self.start(job_id)
        finished = self.store.finish(
            job,
            state,
            now=time.time(),
            exit_code=exit_code,
            error_class=error_class,
            message=message,
        )
        self.hooks.job_finished(finished)
        return finished


@contextmanager
def live_broker(
    switch: AppSwitch,
    url: str,
    data_dir: Path,
    *,
    pools: Sequence[PoolSpec] = POOLS,
    callers: Sequence[str] = ("alice", "bob"),
    sqlite_busy_s: float = 30.0,
) -> Iterator[LiveBroker]:
    """Install a fresh app over `data_dir` behind `switch` (already served at `url`); a short
    `sqlite_busy_s` makes a locked database answer 503 at once (store fault tests)."""
    store = open_store(data_dir=data_dir, sqlite_busy_s=sqlite_busy_s)
    packages = DiskPackageStore(data_dir / "packages")
    logs = RankLogStorage(data_dir / "logs")
    hooks = NoHooks()
    switch.app = create_app(store, packages, list(pools), hooks=hooks, logs=logs)
    tokens = {name: issue_token(store, name) for name in callers}
    try:
        yield LiveBroker(url, data_dir, store, packages, logs, tokens, hooks)
    finally:
        switch.app = None
        store.close()
