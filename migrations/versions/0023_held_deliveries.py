"""held deliveries: nothing is dropped while an endpoint is paused or disabled

Revision ID: 0023_held_deliveries
Revises: 0022_decided_notify
Create Date: 2026-12-06

Every callback intent becomes a delivery row whatever its endpoint's state; a paused or
disabled endpoint's deliveries are ``held`` (never attempted, never expired by retention)
until it is enabled again (released in their original order) or an operator discards them
(``held_discards``: with a reason, two operators above ``INBOX_HELD_DISCARD_APPROVAL_MIN``).
``endpoints.paused`` is the operator's pause. The state's CHECK and the transition guard
follow inbox.domain.states. ``endpoints.circuit`` and its companions hold each endpoint's
circuit breaker (inbox.domain.circuit), shared by every courier process;
``endpoints.rate_per_second`` its rate limit, with a token bucket on the row.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023_held_deliveries"
down_revision = "0022_decided_notify"
branch_labels = None
depends_on = None

_GUARD = """
CREATE OR REPLACE FUNCTION inbox_guard_delivery_state() RETURNS trigger AS $$
BEGIN
    IF NEW.state IS DISTINCT FROM OLD.state AND (OLD.state, NEW.state) NOT IN (
        ('pending', 'sending'), ('sending', 'delivered'), ('sending', 'pending'),
        ('sending', 'failed'), ('failed', 'pending')
        {extra}
    ) THEN
        RAISE EXCEPTION 'delivery %: % -> % is not allowed', OLD.id, OLD.state, NEW.state
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$ LANGUAGE plpgsql;
"""
_HELD_MOVES = ", ('pending', 'held'), ('sending', 'held'), ('held', 'pending'), ('held', 'failed')"
_STATES = "'pending', 'sending', 'delivered', 'failed'"


def _check(states: str) -> None:
    op.execute("ALTER TABLE deliveries DROP CONSTRAINT ck_deliveries_state")
    op.execute(
        f"ALTER TABLE deliveries ADD CONSTRAINT ck_deliveries_state CHECK (state IN ({states}))"
    )


def upgrade() -> None:
    _check(_STATES + ", 'held'")
    op.execute(_GUARD.format(extra=_HELD_MOVES))
    op.create_index(
        "ix_deliveries_held",
        "deliveries",
        ["endpoint_id", "id"],
        postgresql_where=sa.text("state = 'held'"),
    )
    op.add_column(
        "endpoints",
        sa.Column("paused", sa.Boolean(), server_default=sa.text("false"), nullable=False),
    )
    # The circuit breaker (inbox.domain.circuit): one per endpoint, for every courier.
    op.add_column(
        "endpoints",
        sa.Column("circuit", sa.Text(), server_default=sa.text("'closed'"), nullable=False),
    )
    op.add_column(
        "endpoints",
        sa.Column("circuit_failures", sa.Integer(), server_default=sa.text("0"), nullable=False),
    )
    op.add_column(
        "endpoints",
        sa.Column("probe_backoff", sa.Float(), server_default=sa.text("0"), nullable=False),
    )
    op.add_column("endpoints", sa.Column("probe_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column(
        "endpoints", sa.Column("circuit_changed_at", sa.DateTime(timezone=True), nullable=True)
    )
    op.create_check_constraint(
        op.f("ck_endpoints_circuit"), "endpoints", "circuit IN ('closed', 'open', 'half_open')"
    )
    # Its rate (messages a second, NULL: unlimited) and its token bucket, for every courier.
    op.add_column("endpoints", sa.Column("rate_per_second", sa.Float(), nullable=True))
    op.add_column(
        "endpoints",
        sa.Column("rate_tokens", sa.Float(), server_default=sa.text("0"), nullable=False),
    )
    op.add_column("endpoints", sa.Column("rate_at", sa.DateTime(timezone=True), nullable=True))
    op.create_table(
        "held_discards",
        sa.Column("id", sa.BigInteger(), sa.Identity(), nullable=False),
        sa.Column("public_id", sa.Text(), nullable=False),
        sa.Column("endpoint_id", sa.BigInteger(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("requested_by", sa.Text(), nullable=False),
        # The held deliveries it covers: those up to this id when it was asked for.
        sa.Column("upto_id", sa.BigInteger(), nullable=False),
        sa.Column("held", sa.Integer(), nullable=False),
        sa.Column("status", sa.Text(), server_default=sa.text("'awaiting'"), nullable=False),
        sa.Column("decided_by", sa.Text(), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "status IN ('awaiting', 'discarded', 'withdrawn')",
            name=op.f("ck_held_discards_status"),
        ),
        sa.ForeignKeyConstraint(
            ["endpoint_id"], ["endpoints.id"], name=op.f("fk_held_discards_endpoint_id_endpoints")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_held_discards")),
        sa.UniqueConstraint("public_id", name=op.f("uq_held_discards_public_id")),
    )
    op.create_index(
        "ix_held_discards_awaiting",
        "held_discards",
        ["endpoint_id"],
        unique=True,
        postgresql_where=sa.text("status = 'awaiting'"),
    )


def downgrade() -> None:
    op.drop_index("ix_held_discards_awaiting", table_name="held_discards")
    op.drop_table("held_discards")
    op.drop_constraint(op.f("ck_endpoints_circuit"), "endpoints", type_="check")
    for name in (
        "rate_at",
        "rate_tokens",
        "rate_per_second",
        "circuit_changed_at",
        "probe_at",
        "probe_backoff",
        "circuit_failures",
        "circuit",
    ):
        op.drop_column("endpoints", name)
    op.drop_column("endpoints", "paused")
    # A held delivery goes back as pending: the older code attempts it when it may.
    op.execute("ALTER TABLE deliveries DISABLE TRIGGER USER")
    op.execute("UPDATE deliveries SET state = 'pending' WHERE state = 'held'")
    op.execute("ALTER TABLE deliveries ENABLE TRIGGER USER")
    op.drop_index(
        "ix_deliveries_held", table_name="deliveries", postgresql_where=sa.text("state = 'held'")
    )
    op.execute(_GUARD.format(extra=""))
    _check(_STATES)
