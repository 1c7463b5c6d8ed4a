"""The real database servers the test suites run against.

A server that does not answer skips its variant locally and fails it when CI=true, so CI can
never pass by silently testing SQLite alone. URLs can be overridden with FIREPOOL_TEST_PG_URL
and FIREPOOL_TEST_MYSQL_URL.
"""

from __future__ import annotations

import os

import pytest

from firepool.store.scratch import DEFAULT_SERVERS, reachable
from firepool.testing.private_db import PrivateServer, ServerError, start_private

KINDS = ("sqlite", "postgresql", "mysql")
SERVERS = {
    "postgresql": os.environ.get("FIREPOOL_TEST_PG_URL", DEFAULT_SERVERS["postgresql"]),
    "mysql": os.environ.get("FIREPOOL_TEST_MYSQL_URL", DEFAULT_SERVERS["mysql"]),
}
_problems: dict[str, str | None] = {}


def require_server(kind: str, servers: dict[str, str] = SERVERS) -> str | None:
    """The server URL for `kind` (None for SQLite), or skip / fail the calling test."""
    if kind == "sqlite":
        return None
    url = servers[kind]
    if url not in _problems:
        _problems[url] = reachable(url)
    problem = _problems[url]
    if problem is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and {problem}")
        pytest.skip(problem)
    return url


def start_private_server(kind: str) -> PrivateServer:
    """A private server of `kind` that the calling test may stop and start (never the shared
    one); skips locally, and fails when CI=true, if it cannot be started here."""
    try:
        return start_private(kind)
    except ServerError as err:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and a private {kind} server cannot start: {err}")
        pytest.skip(f"a private {kind} server cannot start: {err}")
