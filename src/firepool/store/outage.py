"""Which database errors mean "the store cannot take this now", as one typed error.

A store outage (the server stopped or restarting, the connection cut, SQLite locked by another
writer past the busy timeout, the disk full) is not a bug in the request: callers must see
`StoreUnavailableError` (HTTP 503 with `Retry-After`) and may try again, and the broker keeps
what it could not write until the store is back. Everything else (a constraint violated, a
syntax error, a deadlock the committer replays) keeps its own exception: mapping every
`OperationalError` would hide real bugs behind "try again later".

The mapping is an engine `handle_error` hook, so every statement and every connect of the
store, its reads, its group commits and its migrations, raise the same typed error, with the
driver's exception as its `__cause__`.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine

from firepool.model import StoreUnavailableError

#: What SQLite reports (Python 3.11's `sqlite_errorname`) for a lock held too long, a full
#: disk, a file it cannot open or write: each transient, each leaves the database as it was.
_SQLITE = {
    "SQLITE_BUSY": "the SQLite database is locked by another writer",
    "SQLITE_LOCKED": "the SQLite database is locked by another writer",
    "SQLITE_FULL": "the disk holding the SQLite database is full",
    "SQLITE_CANTOPEN": "the SQLite database file cannot be opened",
    "SQLITE_READONLY": "the SQLite database cannot be written",
}
#: PostgreSQL SQLSTATE classes: 08 connection exception, 53 insufficient resources (disk
#: full, out of memory, too many connections), 57P operator intervention (shutdown, restart).
_PG_STATES = ("08", "53", "57P")
#: MySQL/MariaDB error numbers: too many connections, shutdown in progress, disk full, and the
#: client's cannot connect / server gone away / lost connection.
_MYSQL_ERRORS = {1040, 1053, 1021, 1114, 2002, 2003, 2006, 2013, 2055}


def install(engine: Engine) -> None:
    """Raise `StoreUnavailableError` from this engine wherever the store is unavailable."""
    event.listen(engine, "handle_error", _on_error)


def _on_error(context: Any) -> None:
    reason = classify(context.original_exception, disconnect=context.is_disconnect)
    if reason is not None:
        raise StoreUnavailableError(reason) from context.sqlalchemy_exception


def classify(error: BaseException, *, disconnect: bool = False) -> str | None:
    """Why `error` (a DBAPI exception) means the store is unavailable, or None if it does not."""
    name = getattr(error, "sqlite_errorname", None)
    if isinstance(name, str):
        for prefix, reason in _SQLITE.items():
            if name.startswith(prefix):
                return reason
        if name.startswith("SQLITE_IOERR"):
            return f"the SQLite database file could not be read or written ({name})"
        return None
    if disconnect:
        return f"the connection to the database was lost: {_first_line(error)}"
    state = getattr(error, "sqlstate", None)
    if isinstance(state, str) and state.startswith(_PG_STATES):
        return f"the database is unavailable: {_first_line(error)}"
    psycopg = type(error).__module__.startswith("psycopg")
    if psycopg and state is None and type(error).__name__ == "OperationalError":
        # A connect that failed has no SQLSTATE (refused, the server shutting down).
        return f"cannot connect to the database: {_first_line(error)}"
    args = getattr(error, "args", ())
    if type(error).__module__.startswith("pymysql") and args and args[0] in _MYSQL_ERRORS:
        return f"the database is unavailable: {_first_line(error)}"
    return None


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__
