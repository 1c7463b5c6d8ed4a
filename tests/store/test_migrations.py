from __future__ import annotations

import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from firepool.store import open_store
from firepool.store.engine import create_engine
from firepool.store.migrate import current, head, upgrade
from firepool.store.schema import metadata
from firepool.store.scratch import Scratch


def test_migrations_build_exactly_the_declared_schema(db: Scratch) -> None:
    engine = create_engine(db.url, **db.engine_options)
    try:
        assert current(engine) is None
        upgrade(engine)
        assert current(engine) == head()
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": False})
            diff = compare_metadata(context, metadata)
        assert diff == []
    finally:
        engine.dispose()


def test_opening_twice_is_a_no_op_upgrade(db: Scratch) -> None:
    open_store(db.url, **db.engine_options).close()
    store = open_store(db.url, **db.engine_options)
    try:
        with store.engine.connect() as conn:
            tables = set(sa.inspect(conn).get_table_names())
        assert {"jobs", "attempts", "pod_bindings", "packages", "callers", "tokens"} <= tables
    finally:
        store.close()
