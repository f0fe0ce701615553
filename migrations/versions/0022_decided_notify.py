"""decided notify: a synchronous event's decision is announced on ``inbox_decided``

Revision ID: 0022_decided_notify
Revises: 0021_filters
Create Date: 2026-12-03

A request sent with ``Prefer: wait`` waits for its event's decision. The web process
listens on one connection (inbox.store.db.listener) instead of reading the event again
and again: when a synchronous event (``events.sync``) becomes completed or quarantined,
this trigger sends ``NOTIFY inbox_decided`` with the event's public id (random, so never
mistaken for another event's, unlike a row id a sequence may give again), inside the transaction
that finished it, so PostgreSQL delivers it only once that transaction commits (and
never if it rolls back). Every path that finishes an event (a worker's completion, a
batch completion, a failure out of attempts, the sweeper) goes through it. An AFTER
trigger with a WHEN clause: a row that is not a synchronous event's decision queues
nothing.
"""

from __future__ import annotations

from alembic import op

revision = "0022_decided_notify"
down_revision = "0021_filters"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE FUNCTION inbox_notify_decided() RETURNS trigger AS $$
        BEGIN
            PERFORM pg_notify('inbox_decided', NEW.public_id);
            RETURN NULL;
        END $$ LANGUAGE plpgsql
        """
    )
    op.execute(
        """
        CREATE TRIGGER events_decided_notify AFTER UPDATE OF state ON events
            FOR EACH ROW
            WHEN (NEW.sync AND NEW.state IN ('completed', 'quarantined')
                  AND OLD.state IS DISTINCT FROM NEW.state)
            EXECUTE FUNCTION inbox_notify_decided()
        """
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS events_decided_notify ON events")
    op.execute("DROP FUNCTION IF EXISTS inbox_notify_decided()")
