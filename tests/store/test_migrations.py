from __future__ import annotations

import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from firepool.model import TokenRole
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


def test_tokens_minted_before_roles_become_callers(db: Scratch) -> None:
    engine = create_engine(db.url, **db.engine_options)
    try:
        upgrade(engine, "0001")
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO tokens (token_hash, caller, created_at, revoked) "
                    "VALUES ('old', 'alice', 1.0, :no)"
                ),
                {"no": False},
            )
        upgrade(engine)
        with engine.connect() as conn:
            role = conn.execute(sa.text("SELECT role FROM tokens WHERE token_hash = 'old'"))
            assert role.scalar_one() == TokenRole.CALLER.value
    finally:
        engine.dispose()
