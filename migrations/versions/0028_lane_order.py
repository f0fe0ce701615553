"""lane order: waiting events of a lane are parked; tenants get an in-flight cap and weight

Revision ID: 0028_lane_order
Revises: 0026_payload_keys
Create Date: 2026-12-07

An ordered lane's events that arrive behind an unfinished event of their lane (or behind
its quarantined, unskipped blocker) are stored *parked*: received, with ``available_at``
far off (``inbox.store.write.queue.PARKED_UNTIL``), so the claim, which reads due events
by ``ix_events_due``, never sees them: it reads each lane's head alone, however deep the
lane. ``inbox_lane_unpark(tenant, lane)`` makes the lane's head due now when it is parked
(and no blocker stands before it); this trigger calls it in the transaction that finishes
an event of the lane (completed, filtered, anything but quarantined), so the next event is
due from that commit on. The skip of a blocker calls it too (``inbox.store.write.lanes``).

Parking is only the claim's shortcut: the claim keeps its own lane checks, so an event
that was not parked (it arrived while its predecessor's row was being written) is still
held by them. A parked event is never left behind: the intake parks an event only while it
holds a share lock on the unfinished predecessor (or the blocker) it parks behind, so the
transaction that finishes that predecessor commits after the park and its trigger sees it.

``tenants.max_in_flight`` (NULL: no cap) bounds how many of a tenant's events run at once;
``tenants.weight`` (default 1) is its share of each claim (``inbox.store.write.queue``).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0028_lane_order"
down_revision = "0026_payload_keys"
branch_labels = None
depends_on = None

PARKED_UNTIL = "9998-01-01 00:00:00+00"


def upgrade() -> None:
    op.add_column("tenants", sa.Column("max_in_flight", sa.Integer(), nullable=True))
    op.add_column(
        "tenants", sa.Column("weight", sa.Integer(), server_default=sa.text("1"), nullable=False)
    )
    op.create_check_constraint(
        op.f("ck_tenants_max_in_flight"), "tenants", "max_in_flight IS NULL OR max_in_flight > 0"
    )
    op.create_check_constraint(
        op.f("ck_tenants_weight"), "tenants", "weight BETWEEN 1 AND 100"
    )
    # The day bounds are written into the statement as constants (EXECUTE), so each run is
    # planned over the open days alone (see inbox.store.db.days), not every daily partition.
    # The lane's head is read by the lane's index alone (the row comparison: see
    # inbox.store.db.lane_sql), never by walking the primary key from the day's first id.
    op.execute(
        f"""
        CREATE FUNCTION inbox_lane_unpark(t bigint, lane bytea) RETURNS integer AS $$
        DECLARE
            lo bigint;
            hi bigint;
            n integer;
        BEGIN
            SELECT coalesce(max(floor), 0) INTO lo FROM ledger_floor;
            hi := (floor(extract(epoch FROM now()) / 86400)::bigint + 2) << 40;
            EXECUTE format($q$
                UPDATE events ev SET available_at = now()
                 WHERE ev.id >= %1$s AND ev.id < %2$s
                   AND ev.state = 'received' AND ev.available_at = %3$L
                   AND ev.id = (SELECT h.id FROM events h
                                 WHERE h.tenant_id = $1 AND h.ordering_key = $2
                                   AND h.id >= %1$s AND h.id < %2$s
                                   AND (h.tenant_id, h.ordering_key, h.id) >= ($1, $2, %1$s)
                                   AND h.state IN ('received', 'processing')
                                 ORDER BY h.tenant_id, h.ordering_key, h.id LIMIT 1)
                   AND NOT EXISTS (SELECT 1 FROM lane_blocks b
                                    WHERE b.tenant_id = $1 AND b.lane = $2
                                      AND b.event_id < ev.id AND b.skipped_at IS NULL)
            $q$, lo, hi, '{PARKED_UNTIL}'::timestamptz) USING t, lane;
            GET DIAGNOSTICS n = ROW_COUNT;
            RETURN n;
        END $$ LANGUAGE plpgsql
        """
    )
    op.execute(
        """
        CREATE FUNCTION inbox_lane_advance() RETURNS trigger AS $$
        BEGIN
            PERFORM inbox_lane_unpark(NEW.tenant_id, NEW.ordering_key);
            RETURN NULL;
        END $$ LANGUAGE plpgsql
        """
    )
    op.execute(
        """
        CREATE TRIGGER events_lane_advance AFTER UPDATE OF state ON events
            FOR EACH ROW
            WHEN (NEW.ordering_key IS NOT NULL
                  AND OLD.state IN ('received', 'processing')
                  AND NEW.state NOT IN ('received', 'processing', 'quarantined'))
            EXECUTE FUNCTION inbox_lane_advance()
        """
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS events_lane_advance ON events")
    op.execute("DROP FUNCTION IF EXISTS inbox_lane_advance()")
    op.execute("DROP FUNCTION IF EXISTS inbox_lane_unpark(bigint, bytea)")
    op.execute(
        f"UPDATE events SET available_at = now()"
        f" WHERE state = 'received' AND available_at = '{PARKED_UNTIL}'"
    )
    op.drop_constraint(op.f("ck_tenants_weight"), "tenants", type_="check")
    op.drop_constraint(op.f("ck_tenants_max_in_flight"), "tenants", type_="check")
    op.drop_column("tenants", "weight")
    op.drop_column("tenants", "max_in_flight")
