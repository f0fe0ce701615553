"""intent bodies: a callback intent keeps what its delivery is written from; resumable full passes

Revision ID: 0029_intent_bodies
Revises: 0027_endpoint_lifecycle
Create Date: 2026-12-07

The repair "write a missing delivery as held" (inbox.services.audit) writes the delivery a
committed callback intent is owed from the intent alone: ``callback_intents`` gains the
envelope (``body``, sealed under the event's data key when the event's payload is:
``key_id``), the delivery's ``replay`` number and its ``trace_context``. Every existing
intent keeps NULL there (recorded before intents kept bodies): its repair is refused.

Beat's full pass walks each table a day at a time in short transactions, and goes on where
it stopped: ``invariant_watermarks`` gains ``full_next`` and ``full_started_at``.
All new columns are nullable or have a constant default: no table is rewritten.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0029_intent_bodies"
down_revision = "0027_endpoint_lifecycle"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("callback_intents", sa.Column("body", sa.LargeBinary(), nullable=True))
    op.add_column("callback_intents", sa.Column("key_id", sa.BigInteger(), nullable=True))
    op.add_column(
        "callback_intents",
        sa.Column("replay", sa.Integer(), server_default=sa.text("0"), nullable=False),
    )
    op.add_column("callback_intents", sa.Column("trace_context", sa.Text(), nullable=True))
    op.add_column("invariant_watermarks", sa.Column("full_next", sa.BigInteger(), nullable=True))
    op.add_column(
        "invariant_watermarks",
        sa.Column("full_started_at", sa.DateTime(timezone=True), nullable=True),
    )


def downgrade() -> None:
    op.drop_column("invariant_watermarks", "full_started_at")
    op.drop_column("invariant_watermarks", "full_next")
    op.drop_column("callback_intents", "trace_context")
    op.drop_column("callback_intents", "replay")
    op.drop_column("callback_intents", "key_id")
    op.drop_column("callback_intents", "body")
