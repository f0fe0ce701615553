"""events.held_reason: an event held while its source's playbook is not registered

Revision ID: 0018_held_events
Revises: 0017_trace_context
Create Date: 2026-12-03

A source that names a playbook no loaded module registers is a deployment fault, not a
fault of the event: the event is held (state ``received``, not due, with this reason)
instead of spending its attempts into quarantine, and the sweep of a process that has
the playbook releases it. The partial index finds held events without reading the
ledger: it is empty unless something is held.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018_held_events"
down_revision = "0017_trace_context"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("events", sa.Column("held_reason", sa.Text()))
    op.create_index(
        "ix_events_held",
        "events",
        ["source_id", "id"],
        postgresql_where=sa.text("held_reason IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_events_held", table_name="events")
    op.drop_column("events", "held_reason")
