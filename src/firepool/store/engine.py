"""Engines for the three supported databases, each tuned for durable, concurrent commits.

SQLite is the embedded default: one file in the data directory, WAL so readers never block
the writer, `synchronous=FULL` so a commit is on disk when it returns (in WAL mode NORMAL
would only survive a process crash, not a power cut), and `BEGIN IMMEDIATE` for writes so
two writers queue on the lock instead of deadlocking on an upgrade. PostgreSQL uses psycopg 3
and MySQL/MariaDB PyMySQL; plain `postgresql://` and `mysql://` URLs get those drivers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL, Engine, make_url

from firepool.model import ConfigError
from firepool.store import outage

DB_FILE = "firepool.db"

_DRIVERS = {
    "postgresql": "postgresql+psycopg",
    "postgres": "postgresql+psycopg",
    "mysql": "mysql+pymysql",
    "mariadb": "mysql+pymysql",
}


def default_url(data_dir: Path) -> str:
    return f"sqlite:///{(data_dir / DB_FILE).resolve()}"


def normalize_url(url: str) -> URL:
    """Parse a database URL and pin the driver this project supports for its dialect."""
    try:
        parsed = make_url(url)
    except sa.exc.ArgumentError as err:
        raise ConfigError(f"bad database URL: {err}", field="database_url") from None
    if parsed.drivername in _DRIVERS:
        parsed = parsed.set(drivername=_DRIVERS[parsed.drivername])
    if parsed.get_backend_name() not in {"sqlite", "postgresql", "mysql", "mariadb"}:
        raise ConfigError(
            f"unsupported database {parsed.get_backend_name()!r}: use sqlite, postgresql or mysql",
            field="database_url",
        )
    return parsed


def create_engine(
    url: str, *, pool_size: int = 16, sqlite_busy_s: float = 30.0, **kwargs: Any
) -> Engine:
    """An engine for `url`; `kwargs` pass through (tests use them to pin a schema).

    Every engine raises `StoreUnavailableError` for an outage (`store.outage`). A SQLite
    writer waits `sqlite_busy_s` for another process's lock before it reports one."""
    engine = _engine(url, pool_size, sqlite_busy_s, **kwargs)
    outage.install(engine)
    return engine


def _engine(url: str, pool_size: int, sqlite_busy_s: float, **kwargs: Any) -> Engine:
    parsed = normalize_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        return _sqlite_engine(parsed, pool_size, sqlite_busy_s, **kwargs)
    options: dict[str, Any] = {
        "pool_size": pool_size,
        "max_overflow": pool_size,
        "pool_pre_ping": False,
        "pool_recycle": 3600,
    }
    if backend in {"mysql", "mariadb"}:
        # READ COMMITTED: the store's writes are all conditional on a version column, so the
        # gap locks REPEATABLE READ would take buy nothing and only add lock waits.
        options["isolation_level"] = "READ COMMITTED"
        options.setdefault("connect_args", {})["charset"] = "utf8mb4"
    options.update(kwargs)
    return sa.create_engine(parsed, **options)


def _sqlite_engine(parsed: URL, pool_size: int, busy_s: float, **kwargs: Any) -> Engine:
    database = parsed.database or ""
    if database in {"", ":memory:"}:
        raise ConfigError(
            "SQLite needs a file (WAL does not apply to memory)", field="database_url"
        )
    Path(database).parent.mkdir(parents=True, exist_ok=True)
    options: dict[str, Any] = {
        "pool_size": pool_size,
        "max_overflow": pool_size,
        "connect_args": {"check_same_thread": False, "timeout": busy_s},
    }
    options.update(kwargs)
    engine = sa.create_engine(parsed, **options)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Take transaction control away from the legacy sqlite3 module so that BEGIN,
        # SAVEPOINT and transactional DDL mean what they say (SQLAlchemy's documented recipe).
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.execute(f"PRAGMA busy_timeout={int(busy_s * 1000)}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: sa.Connection) -> None:
        options = conn.get_execution_options()
        if options.get("firepool_autocommit_read"):
            return  # one SELECT: SQLite's implicit per-statement snapshot is enough
        mode = "IMMEDIATE" if options.get("firepool_write") else "DEFERRED"
        conn.exec_driver_sql(f"BEGIN {mode}")

    return engine
