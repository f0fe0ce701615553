"""delivery state guard

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

# The database enforces the same transition table as inbox.domain.states.DELIVERY_ALLOWED
# (tests/integration/test_state_guards.py drives both), as events_state_guard does for events.
# Written out here rather than generated: a migration keeps the rule of its day.
DELIVERY_GUARD = """
CREATE FUNCTION inbox_guard_delivery_state() RETURNS trigger AS $$
BEGIN
    IF NEW.state IS DISTINCT FROM OLD.state AND (OLD.state, NEW.state) NOT IN (
        ('pending', 'sending'), ('sending', 'delivered'), ('sending', 'pending'),
        ('sending', 'failed'), ('failed', 'pending')
    ) THEN
        RAISE EXCEPTION 'delivery %: % -> % is not allowed', OLD.id, OLD.state, NEW.state
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$ LANGUAGE plpgsql;

CREATE TRIGGER deliveries_state_guard BEFORE UPDATE OF state ON deliveries
    FOR EACH ROW EXECUTE FUNCTION inbox_guard_delivery_state();
"""


def upgrade() -> None:
    op.execute(DELIVERY_GUARD)


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS deliveries_state_guard ON deliveries")
    op.execute("DROP FUNCTION IF EXISTS inbox_guard_delivery_state()")
