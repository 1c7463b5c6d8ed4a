"""Store fixtures: every store test runs on SQLite, PostgreSQL and MariaDB, each test in a
scratch schema or database of its own on the real server (see `firepool.testing.databases`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from firepool.store import SqlJobStore, open_store
from firepool.store.scratch import Scratch, scratch
from firepool.testing.databases import require_server as require


@pytest.fixture(params=["sqlite", "postgresql", "mysql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Scratch]:
    """A fresh, empty, not yet migrated database of each kind."""
    kind: str = request.param
    server = require(kind)
    with scratch(kind, server_url=server, data_dir=tmp_path) as where:
        yield where


@pytest.fixture
def store(db: Scratch) -> Iterator[SqlJobStore]:
    opened = open_store(db.url, **db.engine_options)
    try:
        yield opened
    finally:
        opened.close()
