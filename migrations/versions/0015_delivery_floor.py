"""the ledger floor bounds the couriers' claim too: at most the lowest unfinished delivery

Revision ID: 0015_delivery_floor
Revises: 0014_day_foreign_keys
Create Date: 2026-12-01

The couriers' claim now looks no lower than ``ledger_floor`` (inbox.store.write.deliveries), as
the workers' does; the sweep keeps the floor at most the lowest id of an unfinished event
or delivery. Until the first sweep after this upgrade the floor must cover the deliveries
already waiting, or one due for a retry since an earlier day would wait for that sweep.
"""

from __future__ import annotations

from alembic import op

revision = "0015_delivery_floor"
down_revision = "0014_day_foreign_keys"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "UPDATE ledger_floor SET floor = least(floor,"
        " (SELECT min(id) FROM deliveries WHERE state IN ('pending', 'sending')))"
    )


def downgrade() -> None:
    pass  # a lower floor is always safe
