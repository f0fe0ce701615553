"""events and deliveries carry their trace: the id, and the context to continue it

Revision ID: 0017_trace_context
Revises: 0016_events_without_parent_keys
Create Date: 2026-12-03

One trace follows an event across the web, the worker and the courier (inbox.infra.tracing).
The claim writes the ingest span's W3C traceparent (and its trace id, for search) in the
claiming statement itself; the step that writes a delivery stores its own. All NULL while
tracing is off; the trace-id index is partial, so it costs nothing then.
"""

from __future__ import annotations

from alembic import op

revision = "0017_trace_context"
down_revision = "0016_events_without_parent_keys"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Partitioned tables: the columns and the index go to every partition.
    op.execute("ALTER TABLE events ADD COLUMN trace_id text, ADD COLUMN trace_context text")
    op.execute("ALTER TABLE deliveries ADD COLUMN trace_context text")
    op.execute("CREATE INDEX ix_events_trace_id ON events (trace_id) WHERE trace_id IS NOT NULL")


def downgrade() -> None:
    op.execute("DROP INDEX ix_events_trace_id")
    op.execute("ALTER TABLE deliveries DROP COLUMN trace_context")
    op.execute("ALTER TABLE events DROP COLUMN trace_id, DROP COLUMN trace_context")
