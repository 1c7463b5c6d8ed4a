"""Initial schema: jobs, attempts, pod bindings, packages, callers and tokens.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from firepool.store.schema import ID, NAME, BigText, SeqKey

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "jobs",
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
    )
    op.create_index("ix_jobs_caller_state", "jobs", ["caller", "state"])
    op.create_index("ix_jobs_state_pool", "jobs", ["state", "pool"])
    op.create_table(
        "attempts",
        sa.Column("id", sa.String(ID + 12), primary_key=True),
        sa.Column("job_id", sa.String(ID), nullable=False),
        sa.Column("retry", sa.Integer, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("started_at", sa.Double, nullable=False),
        sa.Column("finished_at", sa.Double, nullable=True),
        sa.Column("exit_code", sa.Integer, nullable=True),
        sa.Column("error_class", sa.String(64), nullable=True),
    )
    op.create_index("ix_attempts_job_id", "attempts", ["job_id"])
    op.create_table(
        "pod_bindings",
        sa.Column("attempt_id", sa.String(ID + 12), primary_key=True),
        sa.Column("rank", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("job_id", sa.String(ID), nullable=False),
        sa.Column("pod", sa.String(NAME), nullable=False),
        sa.Column("pool", sa.String(63), nullable=False),
        sa.Column("acquisition", sa.String(32), nullable=False),
        sa.Column("reason", sa.String(64), nullable=False),
    )
    op.create_index("ix_pod_bindings_job_id", "pod_bindings", ["job_id"])
    op.create_table(
        "packages",
        sa.Column("digest", sa.String(71), primary_key=True),
        sa.Column("size", sa.BigInteger, nullable=False),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.Column("uploaded_by", sa.String(NAME), nullable=False),
    )
    op.create_table(
        "callers",
        sa.Column("name", sa.String(NAME), primary_key=True),
        sa.Column("created_at", sa.Double, nullable=False),
    )
    op.create_table(
        "tokens",
        sa.Column("token_hash", sa.String(64), primary_key=True),
        sa.Column("caller", sa.String(NAME), nullable=False),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.Column("revoked", sa.Boolean, nullable=False),
    )
    op.create_index("ix_tokens_caller", "tokens", ["caller"])


def downgrade() -> None:
    for table in ("tokens", "callers", "packages", "pod_bindings", "attempts", "jobs"):
        op.drop_table(table)
