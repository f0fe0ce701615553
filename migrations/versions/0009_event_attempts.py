"""event attempts: every failed run of an event, kept across replays

Revision ID: 0009_event_attempts
Revises: 0008
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_event_attempts"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "event_attempts",
        sa.Column("id", sa.BigInteger(), sa.Identity(), nullable=False),
        sa.Column("event_id", sa.BigInteger(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("step", sa.Text()),
        sa.Column("error_class", sa.Text(), nullable=False),
        sa.Column("error_message", sa.Text()),
        sa.Column("traceback", sa.Text()),
        sa.Column("outcome", sa.Text(), nullable=False),
        sa.CheckConstraint(
            "outcome IN ('retry', 'quarantined')", name=op.f("ck_event_attempts_outcome")
        ),
        sa.ForeignKeyConstraint(
            ["event_id"],
            ["events.id"],
            name=op.f("fk_event_attempts_event_id_events"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_event_attempts")),
    )
    op.create_index(
        op.f("ix_event_attempts_event_id"), "event_attempts", ["event_id"], unique=False
    )
    op.create_index("ix_event_attempts_at", "event_attempts", ["at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_event_attempts_at", table_name="event_attempts")
    op.drop_index(op.f("ix_event_attempts_event_id"), table_name="event_attempts")
    op.drop_table("event_attempts")
