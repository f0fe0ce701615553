"""the self-audit: callback intents, invariant violations, watermarks and repairs

Revision ID: 0025_invariants
Revises: 0024_lane_blocks
Create Date: 2026-12-06

The inbox checks its own invariants (inbox.domain.invariants). ``callback_intents`` records,
in the step's own transaction, each callback a step decided for each endpoint subscribed to
its type, so a delivery that was never written is found (the deliveries alone cannot say
what is missing). ``invariant_violations`` keeps what the checks find, open until no longer
found; ``invariant_watermarks`` where each incremental pass starts; ``invariant_repairs`` the
repairs proposed and their second operator's review.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0025_invariants"
down_revision = "0024_lane_blocks"
branch_labels = None
depends_on = None

INVARIANTS = (
    "event_state",
    "lease_reclaimed",
    "step_once",
    "delivery_per_endpoint",
    "webhook_id_one_body",
    "lane_order",
    "partitions_ahead",
    "held_not_pruned",
    "operator_audited",
)


def _one_of(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def _now(name: str) -> sa.Column[object]:
    return sa.Column(name, sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False)


def upgrade() -> None:
    op.create_table(
        "callback_intents",
        sa.Column("id", sa.BigInteger(), sa.Identity(), nullable=False),
        sa.Column("public_id", sa.Text(), nullable=False),
        sa.Column("tenant_id", sa.BigInteger(), nullable=False),
        sa.Column("endpoint_id", sa.BigInteger(), nullable=False),
        sa.Column("event_id", sa.BigInteger(), nullable=True),
        sa.Column("step", sa.Text(), nullable=False),
        sa.Column("event_type", sa.Text(), nullable=False),
        _now("created_at"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_callback_intents")),
        sa.UniqueConstraint("public_id", name=op.f("uq_callback_intents_public_id")),
    )
    op.create_table(
        "invariant_violations",
        sa.Column("id", sa.BigInteger(), sa.Identity(), nullable=False),
        sa.Column("invariant", sa.Text(), nullable=False),
        sa.Column("subject", sa.Text(), nullable=False),
        sa.Column("rows", JSONB, server_default=sa.text("'[]'::jsonb"), nullable=False),
        sa.Column("trace_id", sa.Text(), nullable=True),
        _now("first_seen_at"),
        _now("last_seen_at"),
        sa.Column("resolved_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            _one_of("invariant", INVARIANTS), name=op.f("ck_invariant_violations_invariant")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_invariant_violations")),
    )
    op.create_index(
        "uq_invariant_violations_open",
        "invariant_violations",
        ["invariant", "subject"],
        unique=True,
        postgresql_where=sa.text("resolved_at IS NULL"),
    )
    op.create_table(
        "invariant_watermarks",
        sa.Column("invariant", sa.Text(), nullable=False),
        sa.Column("since_id", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("next_id", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("checked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("full_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("invariant", name=op.f("pk_invariant_watermarks")),
    )
    op.create_table(
        "invariant_repairs",
        sa.Column("id", sa.BigInteger(), sa.Identity(), nullable=False),
        sa.Column("public_id", sa.Text(), nullable=False),
        sa.Column("violation_id", sa.BigInteger(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("preview", JSONB, nullable=False),
        sa.Column("proposed_by", sa.Text(), nullable=False),
        sa.Column(
            "status", sa.Text(), server_default=sa.text("'awaiting_approval'"), nullable=False
        ),
        sa.Column("reviewer", sa.Text(), nullable=True),
        sa.Column("reviewed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("result", JSONB, nullable=True),
        _now("created_at"),
        sa.CheckConstraint(
            _one_of("kind", ("reclaim_leases", "write_held_delivery", "release_lane")),
            name=op.f("ck_invariant_repairs_kind"),
        ),
        sa.CheckConstraint(
            _one_of("status", ("awaiting_approval", "applied", "rejected")),
            name=op.f("ck_invariant_repairs_status"),
        ),
        sa.ForeignKeyConstraint(
            ["violation_id"],
            ["invariant_violations.id"],
            name=op.f("fk_invariant_repairs_violation_id_invariant_violations"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_invariant_repairs")),
        sa.UniqueConstraint("public_id", name=op.f("uq_invariant_repairs_public_id")),
    )


def downgrade() -> None:
    op.drop_table("invariant_repairs")
    op.drop_table("invariant_watermarks")
    op.drop_index("uq_invariant_violations_open", table_name="invariant_violations")
    op.drop_table("invariant_violations")
    op.drop_table("callback_intents")
