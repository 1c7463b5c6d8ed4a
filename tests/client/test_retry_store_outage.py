"""The SDK waits out a store that cannot take writes (503 `StoreUnavailable`, `Retry-After`):
both clients, the same code path; a submission retried through its idempotency key lands
once. The database here is SQLite locked by another writer (real servers stopped and
restarted: tests/service/test_outage_store_restart.py)."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from firepool.api.server import ServedApp
from firepool.client import AsyncClient, Client
from firepool.client.retry import MAX_PAUSE_S, Retrying
from firepool.model import StoreUnavailableError
from firepool.store.engine import DB_FILE
from firepool.testing.broker import AppSwitch, LiveBroker, live_broker


@pytest.fixture
def touchy(tmp_path: Path, served: tuple[ServedApp, AppSwitch]) -> Iterator[LiveBroker]:
    """A broker whose SQLite store gives up on a lock after 0.2 s."""
    server, switch = served
    with live_broker(switch, server.url, tmp_path, sqlite_busy_s=0.2) as live:
        yield live


class Locked:
    """Another process's writer holding the database's write lock."""

    def __init__(self, data_dir: Path) -> None:
        self._conn = sqlite3.connect(data_dir / DB_FILE, isolation_level=None)
        self._conn.execute("BEGIN EXCLUSIVE")

    def release(self) -> None:
        self._conn.execute("ROLLBACK")
        self._conn.close()


def test_submissions_wait_out_a_locked_store_and_land_once(touchy: LiveBroker) -> None:
    token = touchy.tokens["alice"]
    landed: dict[str, Any] = {}

    def blocking() -> None:
        with Client(touchy.url, token, retry_s=60.0) as sdk:
            landed["blocking"] = sdk.submit("cpu", ["true"])

    def asynchronous() -> None:
        async def submit() -> Any:
            async with AsyncClient(touchy.url, token, retry_s=60.0) as sdk:
                return await sdk.submit("cpu", ["true"])

        landed["async"] = asyncio.run(submit())

    lock = Locked(touchy.data_dir)
    try:
        with httpx.Client(base_url=touchy.url, headers={"Authorization": f"Bearer {token}"}) as raw:
            refused = raw.post("/v1/jobs", json={"pool": "cpu", "command": ["true"]})
        assert refused.status_code == 503
        assert refused.json()["error"] == "StoreUnavailable" and "locked" in refused.text
        assert int(refused.headers["Retry-After"]) >= 1
        threads = [threading.Thread(target=blocking), threading.Thread(target=asynchronous)]
        for thread in threads:
            thread.start()
        time.sleep(1.0)  # both have been refused at least once
        assert not landed
    finally:
        lock.release()
    for thread in threads:
        thread.join(timeout=60)
    assert set(landed) == {"blocking", "async"}
    stored = touchy.store.list_jobs()
    assert sorted(j.id for j in stored) == sorted(j.id for j in landed.values())
    assert all(j.spec.request_id for j in stored)  # each carried its idempotency key


def test_an_impatient_client_gets_the_typed_error(touchy: LiveBroker) -> None:
    lock = Locked(touchy.data_dir)
    try:
        with (
            Client(touchy.url, touchy.tokens["alice"], retry_s=0.0) as sdk,
            pytest.raises(StoreUnavailableError, match="locked"),
        ):
            sdk.submit("cpu", ["true"])
    finally:
        lock.release()
    assert touchy.store.list_jobs() == []


def response(status: int, retry_after: str | None = None) -> httpx.Response:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    return httpx.Response(status, headers=headers)


def test_retry_pauses_honour_retry_after_grow_and_stop() -> None:
    retrying = Retrying(budget_s=30.0)
    assert retrying.pause(response(500), 0.0) is None  # only a 503 is waited out
    assert retrying.pause(response(503, "3"), 0.0) == 3.0
    assert retrying.pause(response(503, "600"), 0.0) == MAX_PAUSE_S  # capped
    pauses = [retrying.pause(response(503), 0.0) for _ in range(8)]
    assert all(p is not None and 0 < p <= MAX_PAUSE_S for p in pauses)
    assert pauses[-1] is not None and pauses[-1] >= MAX_PAUSE_S / 2  # grew to the cap
    assert retrying.pause(response(503, "5"), 26.0) is None  # past the budget: give up
