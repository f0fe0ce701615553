"""endpoint lifecycle: soft delete, ordered delivery, a failure-rate window

Revision ID: 0027_endpoint_lifecycle
Revises: 0026_payload_keys
Create Date: 2026-12-07

``endpoints.deleted_at``/``deleted_by``: an operator's delete keeps the row (deliveries,
audit and evidence keep their references); a deleted endpoint gets no new deliveries and
leaves the listings. ``held_discards.delete_endpoint``: a discard asked for by a delete
that waits for a second operator deletes the endpoint when approved. ``endpoints.ordered``:
at most one delivery in flight, the next only after the previous is delivered or dead;
``ix_deliveries_unfinished`` gives its claim the head of its unfinished deliveries.
``endpoints.circuit_window``: the breaker's failure-rate window (inbox.domain.circuit).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0027_endpoint_lifecycle"
down_revision = "0026_payload_keys"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("endpoints", sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("endpoints", sa.Column("deleted_by", sa.Text(), nullable=True))
    op.add_column(
        "endpoints",
        sa.Column("ordered", sa.Boolean(), server_default=sa.text("false"), nullable=False),
    )
    op.add_column(
        "endpoints",
        sa.Column(
            "circuit_window",
            postgresql.JSONB(),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
    )
    op.create_index(
        "ix_deliveries_unfinished",
        "deliveries",
        ["endpoint_id", "id"],
        postgresql_where=sa.text("state IN ('pending', 'sending')"),
    )
    op.add_column(
        "held_discards",
        sa.Column("delete_endpoint", sa.Boolean(), server_default=sa.text("false"), nullable=False),
    )


def downgrade() -> None:
    op.drop_index("ix_deliveries_unfinished", table_name="deliveries")
    op.drop_column("held_discards", "delete_endpoint")
    op.drop_column("endpoints", "circuit_window")
    op.drop_column("endpoints", "ordered")
    op.drop_column("endpoints", "deleted_by")
    op.drop_column("endpoints", "deleted_at")
