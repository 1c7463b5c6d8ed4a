"""SQLite faults: locked by another writer, disk full. Each is a typed `StoreUnavailableError`
and nothing of the refused write is in the database afterwards. (Server restarts under a
running broker: tests/service/test_outage_store_restart.py.)"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest
import sqlalchemy as sa

from firepool.model import JobSpec, StoreUnavailableError
from firepool.store import open_store
from firepool.store.engine import DB_FILE
from firepool.store.outage import classify
from firepool.testing.disk import fill, small_disk


def spec(command: str = "true") -> JobSpec:
    return JobSpec(pool="cpu", command=[command])


def test_sqlite_locked_by_another_writer_is_typed_and_writes_nothing(tmp_path: Path) -> None:
    store = open_store(data_dir=tmp_path, sqlite_busy_s=0.2)
    try:
        first = store.submit("alice", spec(), now=1.0).job
        other = sqlite3.connect(tmp_path / DB_FILE, isolation_level=None)
        other.execute("BEGIN EXCLUSIVE")
        try:
            refused: list[StoreUnavailableError] = []

            def submit(n: int) -> None:
                try:
                    store.submit("alice", spec(f"job-{n}"), now=2.0)
                except StoreUnavailableError as err:
                    refused.append(err)

            # A batch of writers at once: every one refused, none committed by a later retry.
            writers = [threading.Thread(target=submit, args=(n,)) for n in range(4)]
            for w in writers:
                w.start()
            for w in writers:
                w.join(timeout=30)
            assert len(refused) == 4  # any other error would have ended its thread loudly
            assert all("locked" in err.message and err.retry_after_s > 0 for err in refused)
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert [j.id for j in store.list_jobs()] == [first.id]
        assert store.submit("alice", spec(), now=3.0).created  # the store is usable again
    finally:
        store.close()


def test_sqlite_disk_full_is_typed_and_leaves_the_database_whole() -> None:
    with small_disk(1024) as disk:
        store = open_store(data_dir=disk)
        try:
            kept = store.submit("alice", spec(), now=1.0).job
            filler = fill(disk)
            with pytest.raises(StoreUnavailableError, match="full"):
                for _ in range(50):  # a few may still fit in pages SQLite already holds
                    store.submit("alice", spec("x" * 20_000), now=2.0)
            stored = {j.id for j in store.list_jobs()}
            filler.unlink()
            assert kept.id in stored and {j.id for j in store.list_jobs()} == stored
            with store.engine.connect() as conn:
                assert conn.execute(sa.text("PRAGMA integrity_check")).scalar() == "ok"
            assert store.submit("alice", spec("x" * 20_000), now=3.0).created
        finally:
            store.close()


def test_only_outages_are_unavailable() -> None:
    """A constraint violated or a bad statement is a bug, not an outage: it keeps its own
    exception (found by asking SQLite itself for each error)."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY)")
    conn.execute("INSERT INTO t VALUES (1)")
    for statement in ("INSERT INTO t VALUES (1)", "SELECT nope FROM t"):
        with pytest.raises(sqlite3.Error) as caught:
            conn.execute(statement)
        assert classify(caught.value) is None
