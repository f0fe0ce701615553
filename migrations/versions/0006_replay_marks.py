"""replay marks: which replay of an event a step ran in and a callback came from

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_TABLES = ("events", "steps", "deliveries")


def upgrade() -> None:
    for table in _TABLES:
        op.add_column(
            table,
            sa.Column("replay", sa.Integer(), server_default=sa.text("0"), nullable=False),
        )


def downgrade() -> None:
    for table in reversed(_TABLES):
        op.drop_column(table, "replay")
