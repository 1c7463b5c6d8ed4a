"""Store fixtures: every store test runs on SQLite, PostgreSQL and MariaDB, each test in a
scratch schema or database of its own on the real server (see `firepool.testing.databases`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from firepool.sim.memstore import MemStore
from firepool.store import JobStore, SqlJobStore, open_store
from firepool.store.scratch import Scratch, scratch
from firepool.testing.databases import require_server as require

SQL_KINDS = ["sqlite", "postgresql", "mysql"]


@pytest.fixture(params=SQL_KINDS)
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Scratch]:
    """A fresh, empty, not yet migrated database of each kind."""
    kind: str = request.param
    server = require(kind)
    with scratch(kind, server_url=server, data_dir=tmp_path) as where:
        yield where


def _opened(kind: str, tmp_path: Path) -> Iterator[SqlJobStore]:
    server = require(kind)
    with scratch(kind, server_url=server, data_dir=tmp_path) as where:
        opened = open_store(where.url, **where.engine_options)
        try:
            yield opened
        finally:
            opened.close()


@pytest.fixture(params=SQL_KINDS)
def sql_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SqlJobStore]:
    """A migrated store on each SQL server (for what only a database promises: concurrent
    writers)."""
    yield from _opened(request.param, tmp_path)


@pytest.fixture(params=[*SQL_KINDS, "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[JobStore]:
    """The store contract: each SQL server, and the simulator's in-memory store, which must
    keep the same promises (compare-and-set, legal transitions, typed errors)."""
    if request.param == "memory":
        yield MemStore()
    else:
        yield from _opened(request.param, tmp_path)
