"""Alembic environment: migrations always run on a connection the store hands over.

The broker applies migrations on start (`firepool.store.migrate.upgrade`), so there is no
alembic.ini and no offline mode: the connection, and with it the dialect and the schema search
path of a test, comes in through `config.attributes["connection"]`.
"""

from __future__ import annotations

from alembic import context

from firepool.store.schema import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
