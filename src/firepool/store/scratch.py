"""Throw-away databases on a real server, for tests and benchmarks.

Each scratch is a PostgreSQL schema (selected through the connection's `search_path`) or a
MySQL/MariaDB database, created with a random name and dropped afterwards, so parallel runs
against one shared server never see each other's rows. SQLite scratches are a file in a
directory the caller owns.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from firepool.store.engine import default_url

DEFAULT_SERVERS = {
    "postgresql": "postgresql+psycopg://postgres@127.0.0.1:5432/test",
    "mysql": "mysql+pymysql://root:@127.0.0.1:3306/test",
}


@dataclass(frozen=True)
class Scratch:
    """Where to open a store: a URL plus engine options (the PostgreSQL schema pin)."""

    url: str
    engine_options: dict[str, Any] = field(default_factory=dict)


def reachable(server_url: str, timeout: float = 3.0) -> str | None:
    """None if the server answers, else why not."""
    backend = sa.engine.make_url(server_url).get_backend_name()
    key = "connect_timeout"
    engine = sa.create_engine(server_url, connect_args={key: int(timeout)}, poolclass=sa.NullPool)
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
    except Exception as err:
        return f"{backend} at {server_url} unreachable: {type(err).__name__}: {err}"
    finally:
        engine.dispose()
    return None


@contextmanager
def scratch(
    kind: str, *, server_url: str | None = None, data_dir: Path | None = None
) -> Iterator[Scratch]:
    """A fresh, empty database of `kind` (sqlite, postgresql, mysql), dropped on exit."""
    name = "fp_" + secrets.token_hex(6)
    if kind == "sqlite":
        if data_dir is None:
            raise ValueError("a SQLite scratch needs a data directory")
        yield Scratch(default_url(data_dir / name))
        return
    url = server_url or DEFAULT_SERVERS[kind]
    admin = sa.create_engine(url, poolclass=sa.NullPool, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            if kind == "postgresql":
                conn.execute(sa.text(f"CREATE SCHEMA {name}"))
            else:
                conn.execute(sa.text(f"CREATE DATABASE {name} CHARACTER SET utf8mb4"))
        try:
            if kind == "postgresql":
                yield Scratch(url, {"connect_args": {"options": f"-csearch_path={name}"}})
            else:
                yield Scratch(
                    str(sa.engine.make_url(url).set(database=name).render_as_string(False))
                )
        finally:
            with admin.connect() as conn:
                if kind == "postgresql":
                    conn.execute(sa.text(f"DROP SCHEMA IF EXISTS {name} CASCADE"))
                else:
                    conn.execute(sa.text(f"DROP DATABASE IF EXISTS {name}"))
    finally:
        admin.dispose()
