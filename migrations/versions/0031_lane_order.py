"""lane order: waiting events of a lane are parked; tenants get an in-flight cap and weight

Revision ID: 0031_lane_order
Revises: 0030_key_store
Create Date: 2026-12-07

Parking needs no schema: an ordered lane's event that arrives behind an unfinished event of
its lane (or its unskipped blocker) is stored received with ``available_at`` far off
(``inbox.domain.lanes.PARKED_UNTIL``), so the claim, which reads due events, reads each
lane's head alone; the transaction that finishes its predecessor makes it due
(``inbox.store.write.queue.advance``). Events stored before this revision are due as they
were: the claim's lane checks hold them, as before.

``events.lane_position``: where an event stands in its lane before its id. 0 for a lane in
receipt order; the provider's ``occurred_at`` (epoch seconds) or version where the ordered
source names ``occurred_at_path`` or ``version_path`` (the stale guard's position). The
lane index becomes (tenant, lane, position, id): rebuilt here, on every day's partition.

``tenants.max_in_flight`` (NULL: no cap) bounds how many of a tenant's events run at once;
``tenants.weight`` (1 to 100, default 1) is its share of each claim against the others'
(``inbox.store.write.queue``).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0031_lane_order"
down_revision = "0030_key_store"
branch_labels = None
depends_on = None

PARKED_UNTIL = "9998-01-01 00:00:00+00"


def upgrade() -> None:
    op.add_column(
        "events",
        sa.Column("lane_position", sa.Numeric(), server_default=sa.text("0"), nullable=False),
    )
    op.drop_index("ix_events_ordering", table_name="events")
    op.create_index(
        "ix_events_ordering",
        "events",
        ["tenant_id", "ordering_key", "lane_position", "id"],
        unique=False,
        postgresql_where=sa.text(
            "ordering_key IS NOT NULL AND state IN ('received', 'processing')"
        ),
    )
    op.add_column("tenants", sa.Column("max_in_flight", sa.Integer(), nullable=True))
    op.add_column(
        "tenants", sa.Column("weight", sa.Integer(), server_default=sa.text("1"), nullable=False)
    )
    op.create_check_constraint(
        op.f("ck_tenants_max_in_flight"), "tenants", "max_in_flight IS NULL OR max_in_flight > 0"
    )
    op.create_check_constraint(op.f("ck_tenants_weight"), "tenants", "weight BETWEEN 1 AND 100")


def downgrade() -> None:
    # Parked events become due: the claim's lane checks hold them in order, as before.
    op.execute(
        f"UPDATE events SET available_at = now()"
        f" WHERE state = 'received' AND available_at = '{PARKED_UNTIL}'"
    )
    op.drop_constraint(op.f("ck_tenants_weight"), "tenants", type_="check")
    op.drop_constraint(op.f("ck_tenants_max_in_flight"), "tenants", type_="check")
    op.drop_column("tenants", "weight")
    op.drop_column("tenants", "max_in_flight")
    op.drop_index("ix_events_ordering", table_name="events")
    op.create_index(
        "ix_events_ordering",
        "events",
        ["tenant_id", "ordering_key", "id"],
        unique=False,
        postgresql_where=sa.text(
            "ordering_key IS NOT NULL AND state IN ('received', 'processing')"
        ),
    )
    op.drop_column("events", "lane_position")
