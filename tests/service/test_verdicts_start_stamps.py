"""A verdict's record carries its attempt's start stamps even when the job exits before they
are stored (`Running.record_with_start`), on real processes: the stamps' write is held back
here, as a busy committer holds it under load, so a short job's exit comes first.

The waiting submission then answers with the verdict's record as it is, with no read of the
job, and that record is the stored row."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from firepool.service.catalog import Catalog
from firepool.store import JobRecord
from firepool.store.sql import SqlJobStore
from firepool.testing.control import cpu_pool
from firepool.testing.service import BrokerThread, running_broker

POOL = cpu_pool(min_count=1, max_count=1, memory_mib_per_pod=512, step=1)
#: Longer than the job's whole run from launch to exit (`python -c pass`, warm).
STAMPS_HELD_S = 1.0


@pytest.fixture
def broker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[BrokerThread]:
    real = SqlJobStore.record_timings_async

    async def held(self: SqlJobStore, job: JobRecord, stamps: Mapping[str, float]) -> None:
        if "started" in stamps:
            await asyncio.sleep(STAMPS_HELD_S)
        await real(self, job, stamps)

    monkeypatch.setattr(SqlJobStore, "record_timings_async", held)
    with running_broker(tmp_path / "b", catalog=Catalog((POOL,), {"cpu": 2})) as handle:
        yield handle


def test_a_job_that_exits_before_its_start_is_stored_is_answered_unread(
    broker: BrokerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = {"pool": "cpu", "command": [sys.executable, "-c", "pass"]}
    with broker.client() as c:
        warm = c.post("/v1/jobs", json=body, params={"wait_s": 60}, timeout=90).json()
        assert warm["state"] == "SUCCEEDED"  # the pod is up and warm from here on
        reads: list[str] = []
        real_get = SqlJobStore.get

        def counted(self: SqlJobStore, job_id: str) -> JobRecord | None:
            reads.append(job_id)
            return real_get(self, job_id)

        monkeypatch.setattr(SqlJobStore, "get", counted)
        answer = c.post("/v1/jobs", json=body, params={"wait_s": 60}, timeout=90).json()
        monkeypatch.undo()
        stored = c.get(f"/v1/jobs/{answer['id']}").json()
    assert answer["state"] == "SUCCEEDED"
    assert answer["id"] not in reads  # neither the API nor the verdict read the job back
    assert answer["timings"]["started"] is not None
    assert answer == stored  # the stored row, all of it
