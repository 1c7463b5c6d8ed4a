"""The API test harness: a served app, its parts, and one client per caller."""

from __future__ import annotations

from dataclasses import dataclass, field

import httpx
import sqlalchemy as sa
from fastapi import FastAPI

from firepool.api.context import ApiContext
from firepool.api.hooks import FinishedListener, NoHooks
from firepool.packages import DiskPackageStore
from firepool.store import JobRecord, SqlJobStore
from firepool.store.logs import RankLogStorage
from firepool.store.schema import jobs
from firepool.testing.control import cpu_pool, gpu_pool

POOLS = [
    cpu_pool(max_count=4, allowed_images=("registry.local/team",)),
    gpu_pool(accelerator="fake"),
]


@dataclass
class RecordingHooks(NoHooks):
    """No broker behind the API: records the signals it would have sent."""

    submitted: list[str] = field(default_factory=list)
    cancels: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    listeners: list[FinishedListener] = field(default_factory=list)

    def job_submitted(self, job: JobRecord) -> None:
        self.submitted.append(job.id)

    def cancel_requested(self, job: JobRecord) -> None:
        self.cancels.append(job.id)

    def job_finished(self, job: JobRecord) -> None:
        """What the service does after committing a verdict: tell the API's listeners."""
        self.finished.append(job.id)
        for listener in self.listeners:
            listener(job)

    def subscribe_finished(self, listener: FinishedListener) -> None:
        self.listeners.append(listener)


@dataclass
class Api:
    url: str
    store: SqlJobStore
    packages: DiskPackageStore
    logs: RankLogStorage
    hooks: RecordingHooks
    alice: httpx.Client
    bob: httpx.Client
    anonymous: httpx.Client
    #: The app's context (its long-poll waiters, for tests that must see a request parked).
    context: ApiContext
    #: The served app itself (for tests that mount a route of their own on it).
    app: FastAPI | None = None

    def job_count(self) -> int:
        with self.store.engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(jobs)).scalar_one())
