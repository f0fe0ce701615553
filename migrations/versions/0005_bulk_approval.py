"""bulk replay approval: the two-person rule's states and who reviewed

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_OLD = "status IN ('queued', 'running', 'completed', 'cancelled')"
_NEW = "status IN ('awaiting_approval', 'queued', 'running', 'completed', 'cancelled', 'rejected')"


def upgrade() -> None:
    op.add_column("bulk_replays", sa.Column("reviewer", sa.Text()))
    op.add_column("bulk_replays", sa.Column("reviewed_at", sa.DateTime(timezone=True)))
    op.add_column("bulk_replays", sa.Column("review_note", sa.Text()))
    op.drop_constraint(op.f("ck_bulk_replays_status"), "bulk_replays", type_="check")
    op.create_check_constraint(op.f("ck_bulk_replays_status"), "bulk_replays", _NEW)


def downgrade() -> None:
    # Jobs in the new states cannot be kept under the old CHECK: a waiting job was never
    # started and a rejected one never ran, so both become cancelled.
    op.execute(
        "UPDATE bulk_replays SET status = 'cancelled', finished_at = coalesce(finished_at, now())"
        " WHERE status IN ('awaiting_approval', 'rejected')"
    )
    op.drop_constraint(op.f("ck_bulk_replays_status"), "bulk_replays", type_="check")
    op.create_check_constraint(op.f("ck_bulk_replays_status"), "bulk_replays", _OLD)
    op.drop_column("bulk_replays", "review_note")
    op.drop_column("bulk_replays", "reviewed_at")
    op.drop_column("bulk_replays", "reviewer")
