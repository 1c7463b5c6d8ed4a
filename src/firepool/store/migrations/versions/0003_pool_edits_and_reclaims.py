"""Applied pool edits survive a restart; reclaimed attempts are counted on the job.

`pool_edits` keeps the spec of each pool an admin changed through the API. `jobs.reclaims`
counts the job's attempts that ended `Reclaimed`, backfilled from the attempts already stored,
so a restarted broker counts failure retries exactly as the one before it did.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from firepool.store.schema import BigText

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pool_edits",
        sa.Column("name", sa.String(63), primary_key=True),
        sa.Column("spec", BigText, nullable=False),
        sa.Column("template_version", sa.Integer, nullable=False),
        sa.Column("applied_at", sa.Double, nullable=False),
    )
    op.add_column(
        "jobs", sa.Column("reclaims", sa.Integer, nullable=False, server_default="0")
    )
    op.execute(
        "UPDATE jobs SET reclaims = (SELECT COUNT(*) FROM attempts "
        "WHERE attempts.job_id = jobs.id AND attempts.error_class = 'Reclaimed')"
    )


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("reclaims")
    op.drop_table("pool_edits")
