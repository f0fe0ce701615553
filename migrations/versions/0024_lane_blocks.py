"""lane blocks: a quarantined event of an ordered lane holds the lane's later events

Revision ID: 0024_lane_blocks
Revises: 0023_held_deliveries
Create Date: 2026-12-06

An ordered source (``serialize_by_business_key``) gives each event a lane
(``events.ordering_key``); the lane's position is the event id (receipt order). When such
an event is quarantined, its lane's later events must not run until an operator replays
it (it runs first, then the rest) or skips it (audited). ``lane_blocks`` holds one row per
blocking event; this trigger writes it inside the transaction that quarantines the event,
on every path (a worker's failure, the sweeper's expired lease out of attempts), and
deletes it in the one that moves the event out of quarantine (a replay, one or bulk). An
AFTER trigger with a WHEN clause: an update that is not an ordered event entering or
leaving quarantine queues nothing. The claim (``inbox.store.write.queue._DUE``) checks
the table by its primary key.

Events quarantined before this revision do not block their lanes: the lanes that ran past
them are left as they are (an operator who wants one held replays its dead letter).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024_lane_blocks"
down_revision = "0023_held_deliveries"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "lane_blocks",
        sa.Column("tenant_id", sa.BigInteger(), nullable=False),
        sa.Column("lane", sa.LargeBinary(), nullable=False),
        sa.Column("event_id", sa.BigInteger(), nullable=False),
        sa.Column(
            "since", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.Column("skip_requested_by", sa.Text()),
        sa.Column("skip_requested_at", sa.DateTime(timezone=True)),
        sa.Column("skip_reason", sa.Text()),
        sa.Column("skipped_by", sa.Text()),
        sa.Column("skipped_at", sa.DateTime(timezone=True)),
        sa.PrimaryKeyConstraint("tenant_id", "lane", "event_id", name=op.f("pk_lane_blocks")),
    )
    op.create_index("ix_lane_blocks_event_id", "lane_blocks", ["event_id"])
    op.execute(
        """
        CREATE FUNCTION inbox_lane_block() RETURNS trigger AS $$
        BEGIN
            IF NEW.state = 'quarantined' THEN
                INSERT INTO lane_blocks (tenant_id, lane, event_id)
                VALUES (NEW.tenant_id, NEW.ordering_key, NEW.id)
                ON CONFLICT (tenant_id, lane, event_id) DO UPDATE
                   SET since = now(), skip_requested_by = NULL, skip_requested_at = NULL,
                       skip_reason = NULL, skipped_by = NULL, skipped_at = NULL;
            ELSE
                DELETE FROM lane_blocks
                 WHERE tenant_id = OLD.tenant_id AND lane = OLD.ordering_key
                   AND event_id = OLD.id;
            END IF;
            RETURN NULL;
        END $$ LANGUAGE plpgsql
        """
    )
    op.execute(
        """
        CREATE TRIGGER events_lane_block AFTER UPDATE OF state ON events
            FOR EACH ROW
            WHEN (NEW.ordering_key IS NOT NULL AND OLD.state IS DISTINCT FROM NEW.state
                  AND (NEW.state = 'quarantined' OR OLD.state = 'quarantined'))
            EXECUTE FUNCTION inbox_lane_block()
        """
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS events_lane_block ON events")
    op.execute("DROP FUNCTION IF EXISTS inbox_lane_block()")
    op.drop_index("ix_lane_blocks_event_id", table_name="lane_blocks")
    op.drop_table("lane_blocks")
