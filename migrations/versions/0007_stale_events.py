"""stale events: the provider's event time or version, and the newer event

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("events", sa.Column("occurred_at", sa.DateTime(timezone=True)))
    op.add_column("events", sa.Column("version", sa.Numeric()))
    op.add_column("events", sa.Column("newer_event_id", sa.BigInteger()))


def downgrade() -> None:
    op.drop_column("events", "newer_event_id")
    op.drop_column("events", "version")
    op.drop_column("events", "occurred_at")
