"""Store fixtures: every store test runs on SQLite, PostgreSQL and MariaDB.

Each test gets its own scratch schema or database on the real server. A server that does not
answer skips its variant locally and fails it when CI=true, so CI can never pass by silently
testing SQLite alone. Server URLs can be overridden with FIREPOOL_TEST_PG_URL and
FIREPOOL_TEST_MYSQL_URL.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from firepool.store import SqlJobStore, open_store
from firepool.store.scratch import DEFAULT_SERVERS, Scratch, reachable, scratch

SERVERS = {
    "postgresql": os.environ.get("FIREPOOL_TEST_PG_URL", DEFAULT_SERVERS["postgresql"]),
    "mysql": os.environ.get("FIREPOOL_TEST_MYSQL_URL", DEFAULT_SERVERS["mysql"]),
}
_reachability: dict[str, str | None] = {}


def _require(kind: str) -> str | None:
    if kind == "sqlite":
        return None
    if kind not in _reachability:
        _reachability[kind] = reachable(SERVERS[kind])
    problem = _reachability[kind]
    if problem is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and {problem}")
        pytest.skip(problem)
    return SERVERS[kind]


@pytest.fixture(params=["sqlite", "postgresql", "mysql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Scratch]:
    """A fresh, empty, not yet migrated database of each kind."""
    kind: str = request.param
    server = _require(kind)
    with scratch(kind, server_url=server, data_dir=tmp_path) as where:
        yield where


@pytest.fixture
def store(db: Scratch) -> Iterator[SqlJobStore]:
    opened = open_store(db.url, **db.engine_options)
    try:
        yield opened
    finally:
        opened.close()
