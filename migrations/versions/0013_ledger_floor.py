"""the workers' claim plans over the days that can hold unfinished events; dead letters

Revision ID: 0013_ledger_floor
Revises: 0012_partitioned_ledger
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013_ledger_floor"
down_revision = "0012_partitioned_ledger"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ledger_floor",
        sa.Column("singleton", sa.Boolean(), server_default=sa.text("true"), nullable=False),
        sa.Column("floor", sa.BigInteger(), nullable=False),
        sa.CheckConstraint("singleton", name="ck_ledger_floor_singleton"),
        sa.PrimaryKeyConstraint("singleton", name="pk_ledger_floor"),
    )
    # At most the lowest unfinished id; with none, the start of the day an hour ago
    # (inbox.store.write.queue.raise_floor says why the hour).
    op.execute(
        """
        INSERT INTO ledger_floor (singleton, floor)
        SELECT true, least(
            coalesce((SELECT min(id) FROM events WHERE state IN ('received', 'processing')),
                     9223372036854775807),
            floor(extract(epoch FROM now() - interval '1 hour') / 86400)::bigint << 40)
        """
    )
    op.execute(
        "CREATE INDEX ix_events_dead_letters ON events (tenant_id, id) WHERE state = 'quarantined'"
    )


def downgrade() -> None:
    op.execute("DROP INDEX ix_events_dead_letters")
    op.drop_table("ledger_floor")
