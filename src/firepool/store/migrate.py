"""Apply the packaged Alembic migrations; the broker calls this on every start.

The migration scripts ship inside the package (`firepool/store/migrations`), so an installed
broker can upgrade its own database with no alembic.ini and no checkout.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Engine

MIGRATIONS = Path(__file__).with_name("migrations")


def _config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


def head() -> str:
    revision = ScriptDirectory.from_config(_config()).get_current_head()
    assert revision is not None
    return revision


def current(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine: Engine, revision: str = "head") -> None:
    config = _config()
    with engine.connect().execution_options(firepool_write=True) as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, revision)
        conn.commit()
