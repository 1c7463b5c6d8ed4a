"""The API test harness: a served app, its parts, and one client per caller."""

from __future__ import annotations

from dataclasses import dataclass, field

import httpx
import sqlalchemy as sa

from firepool.api.hooks import NoHooks
from firepool.model import PoolSpec
from firepool.packages import DiskPackageStore
from firepool.store import JobRecord, SqlJobStore
from firepool.store.logs import RankLogStorage
from firepool.store.schema import jobs

POOLS = [
    PoolSpec(name="cpu", max_count=4),
    PoolSpec(name="gpu", accelerator="fake", accelerators_per_pod=1),
]


@dataclass
class RecordingHooks(NoHooks):
    """No broker behind the API: records the signals it would have sent."""

    submitted: list[str] = field(default_factory=list)
    cancels: list[str] = field(default_factory=list)

    def job_submitted(self, job: JobRecord) -> None:
        self.submitted.append(job.id)

    def cancel_requested(self, job: JobRecord) -> None:
        self.cancels.append(job.id)


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

    def job_count(self) -> int:
        with self.store.engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(jobs)).scalar_one())
