"""filters: the ``filtered`` event state, its reason, and endpoints' filters

Revision ID: 0021_filters
Revises: 0020_evidence
Create Date: 2026-12-03

A source's CEL filter (inbox.domain.filters) stores the events it is not true for as
``filtered`` (never run; an operator's replay moves one to ``received``), with the
reason in ``events.filter_reason``. The state's CHECK and the transition guard follow
inbox.domain.states. ``endpoints.filter`` holds an endpoint's expression.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021_filters"
down_revision = "0020_evidence"
branch_labels = None
depends_on = None

_GUARD = """
CREATE OR REPLACE FUNCTION inbox_guard_event_state() RETURNS trigger AS $$
BEGIN
    IF NEW.state IS DISTINCT FROM OLD.state AND (OLD.state, NEW.state) NOT IN (
        ('processing', 'completed'), ('processing', 'quarantined'), ('processing', 'received'),
        ('quarantined', 'received'), ('received', 'processing'), ('received', 'quarantined')
        {extra}
    ) THEN
        RAISE EXCEPTION 'event %: % -> % is not allowed', OLD.id, OLD.state, NEW.state
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$ LANGUAGE plpgsql;
"""
_STATES = "'received', 'processing', 'completed', 'quarantined'"


def _check(states: str) -> None:
    op.execute("ALTER TABLE events DROP CONSTRAINT ck_events_state")
    op.execute(f"ALTER TABLE events ADD CONSTRAINT ck_events_state CHECK (state IN ({states}))")


def upgrade() -> None:
    op.add_column("events", sa.Column("filter_reason", sa.Text()))
    op.add_column("endpoints", sa.Column("filter", sa.Text()))
    _check(_STATES + ", 'filtered'")
    op.execute(_GUARD.format(extra=", ('filtered', 'received')"))


def downgrade() -> None:
    # A filtered event goes back as quarantined (a dead letter an operator may replay).
    op.execute("ALTER TABLE events DISABLE TRIGGER USER")
    op.execute("UPDATE events SET state = 'quarantined' WHERE state = 'filtered'")
    op.execute("ALTER TABLE events ENABLE TRIGGER USER")
    op.execute(_GUARD.format(extra=""))
    _check(_STATES)
    op.drop_column("endpoints", "filter")
    op.drop_column("events", "filter_reason")
