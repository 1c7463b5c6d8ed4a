"""The durable schema, as SQLAlchemy Core tables (the Alembic migrations create the same).

Conventions that keep one schema portable across SQLite, PostgreSQL and MySQL/MariaDB:
times are epoch seconds in DOUBLE columns (the simulator passes virtual `now` through the same
code), identifiers are bounded VARCHARs (MySQL indexes need lengths), large text is LONGTEXT
on MySQL (its TEXT stops at 64 KiB), and every enum is stored as its string value.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

metadata = sa.MetaData()

#: Text that may exceed MySQL's 64 KiB TEXT (a job spec carries a requirements file).
BigText = sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")
#: An auto-increment key that is a true ROWID alias on SQLite.
SeqKey = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

ID = 64
NAME = 255

jobs = sa.Table(
    "jobs",
    metadata,
    sa.Column("seq", SeqKey, primary_key=True, autoincrement=True),
    sa.Column("id", sa.String(ID), nullable=False, unique=True),
    sa.Column("caller", sa.String(NAME), nullable=False),
    sa.Column("request_id", sa.String(NAME), nullable=True),
    sa.Column("spec_hash", sa.String(64), nullable=False),
    sa.Column("pool", sa.String(63), nullable=False),
    sa.Column("queue", sa.String(128), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("priority", sa.Integer, nullable=False),
    sa.Column("retries", sa.Integer, nullable=False),
    # Attempts that ended `Reclaimed` (borrowed capacity taken back): they raised `retries`
    # but are no failures, so `retries - reclaims` is what counts against `max_retries`.
    sa.Column("reclaims", sa.Integer, nullable=False, server_default="0"),
    sa.Column("exit_code", sa.Integer, nullable=True),
    sa.Column("error_class", sa.String(64), nullable=True),
    sa.Column("message", sa.Text, nullable=True),
    sa.Column("cancel_requested", sa.Boolean, nullable=False),
    sa.Column("spec", BigText, nullable=False),
    sa.Column("submitted_at", sa.Double, nullable=False),
    sa.Column("assigned_at", sa.Double, nullable=True),
    sa.Column("started_at", sa.Double, nullable=True),
    sa.Column("first_instruction_at", sa.Double, nullable=True),
    sa.Column("finished_at", sa.Double, nullable=True),
    sa.UniqueConstraint("caller", "request_id", name="uq_jobs_caller_request"),
    sa.Index("ix_jobs_caller_state", "caller", "state"),
    sa.Index("ix_jobs_state_pool", "state", "pool"),
)

attempts = sa.Table(
    "attempts",
    metadata,
    sa.Column("id", sa.String(ID + 12), primary_key=True),  # <job-id>:<retry>
    sa.Column("job_id", sa.String(ID), nullable=False, index=True),
    sa.Column("retry", sa.Integer, nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("started_at", sa.Double, nullable=False),
    sa.Column("finished_at", sa.Double, nullable=True),
    sa.Column("exit_code", sa.Integer, nullable=True),
    sa.Column("error_class", sa.String(64), nullable=True),
)

pod_bindings = sa.Table(
    "pod_bindings",
    metadata,
    sa.Column("attempt_id", sa.String(ID + 12), primary_key=True),
    sa.Column("rank", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("job_id", sa.String(ID), nullable=False, index=True),
    sa.Column("pod", sa.String(NAME), nullable=False),
    sa.Column("pool", sa.String(63), nullable=False),
    sa.Column("acquisition", sa.String(32), nullable=False),
    sa.Column("reason", sa.String(64), nullable=False),
)

packages = sa.Table(
    "packages",
    metadata,
    sa.Column("digest", sa.String(71), primary_key=True),  # sha256:<64 hex>
    sa.Column("size", sa.BigInteger, nullable=False),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Column("uploaded_by", sa.String(NAME), nullable=False),
)

callers = sa.Table(
    "callers",
    metadata,
    sa.Column("name", sa.String(NAME), primary_key=True),
    sa.Column("created_at", sa.Double, nullable=False),
)

tokens = sa.Table(
    "tokens",
    metadata,
    sa.Column("token_hash", sa.String(64), primary_key=True),
    sa.Column("caller", sa.String(NAME), nullable=False, index=True),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Column("revoked", sa.Boolean, nullable=False),
    # `caller` or `admin` (TokenRole); tokens minted before roles existed are callers.
    sa.Column("role", sa.String(16), nullable=False, server_default="caller"),
)

pool_edits = sa.Table(
    "pool_edits",
    metadata,
    # The spec an admin applied (`PUT /v1/pools/{name}`), as the broker ran it: a restarted
    # broker applies it on top of its catalog file, so the edit survives the process.
    sa.Column("name", sa.String(63), primary_key=True),
    sa.Column("spec", BigText, nullable=False),
    sa.Column("template_version", sa.Integer, nullable=False),
    sa.Column("applied_at", sa.Double, nullable=False),
)
