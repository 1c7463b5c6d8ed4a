"""Token roles: every token is a `caller` or an `admin`; existing tokens become callers.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "tokens", sa.Column("role", sa.String(16), nullable=False, server_default="caller")
    )


def downgrade() -> None:
    with op.batch_alter_table("tokens") as batch:
        batch.drop_column("role")
