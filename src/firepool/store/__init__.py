"""The durable job store: SQLite by default, PostgreSQL or MySQL/MariaDB for clusters.

`open_store` is the one way in: it builds the engine, applies the packaged migrations and
returns a `SqlJobStore`, which satisfies the `JobStore` protocol the service and the simulator
program against.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from firepool.store.engine import create_engine, default_url
from firepool.store.migrate import upgrade
from firepool.store.protocol import AsyncSubmit, AsyncWrites, JobStore
from firepool.store.records import (
    TIMING_NAMES,
    AttemptRecord,
    JobRecord,
    PackageRecord,
    PodBinding,
    PoolEdit,
    Submitted,
)
from firepool.store.sql import SqlJobStore

__all__ = [
    "TIMING_NAMES",
    "AsyncSubmit",
    "AsyncWrites",
    "AttemptRecord",
    "JobRecord",
    "JobStore",
    "PackageRecord",
    "PodBinding",
    "PoolEdit",
    "SqlJobStore",
    "Submitted",
    "open_store",
]


def open_store(
    url: str | None = None,
    *,
    data_dir: Path | None = None,
    migrate: bool = True,
    writers: int | None = None,
    **engine_options: Any,
) -> SqlJobStore:
    """Open (and by default migrate) the store at `url`, or the SQLite file in `data_dir`."""
    if url is None:
        if data_dir is None:
            raise ValueError("open_store needs a database URL or a data directory")
        url = default_url(Path(data_dir))
    engine = create_engine(url, **engine_options)
    if migrate:
        upgrade(engine)
    return SqlJobStore(engine, writers=writers)
