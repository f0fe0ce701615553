"""legal holds: events a hold covers are kept by retention while it stands

Revision ID: 0019_legal_holds
Revises: 0018_held_events
Create Date: 2026-12-03

One small table (inbox.domain.holds). Retention reads the active holds (a partial index)
before it removes a body or drops a day.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019_legal_holds"
down_revision = "0018_held_events"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "legal_holds",
        sa.Column("id", sa.BigInteger(), sa.Identity(), nullable=False),
        sa.Column("public_id", sa.Text(), nullable=False),
        sa.Column("tenant_id", sa.BigInteger(), nullable=False),
        sa.Column("scope", sa.Text(), nullable=False),
        sa.Column("source_id", sa.BigInteger(), nullable=True),
        sa.Column("business_key_digest", sa.LargeBinary(), nullable=True),
        sa.Column("event_id", sa.BigInteger(), nullable=True),
        sa.Column("event_public_id", sa.Text(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("placed_by", sa.Text(), nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.Column("release_requested_by", sa.Text(), nullable=True),
        sa.Column("release_requested_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("released_by", sa.Text(), nullable=True),
        sa.Column("released_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "(scope = 'tenant' AND num_nonnulls(source_id, business_key_digest, event_id) = 0)"
            " OR (scope = 'source' AND source_id IS NOT NULL"
            " AND num_nonnulls(business_key_digest, event_id) = 0)"
            " OR (scope = 'business_key' AND business_key_digest IS NOT NULL"
            " AND num_nonnulls(source_id, event_id) = 0)"
            " OR (scope = 'event' AND event_id IS NOT NULL"
            " AND num_nonnulls(source_id, business_key_digest) = 0)",
            name=op.f("ck_legal_holds_scope"),
        ),
        sa.ForeignKeyConstraint(
            ["source_id"], ["sources.id"], name=op.f("fk_legal_holds_source_id_sources")
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_legal_holds_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_legal_holds")),
        sa.UniqueConstraint("public_id", name=op.f("uq_legal_holds_public_id")),
    )
    op.create_index(
        "ix_legal_holds_active",
        "legal_holds",
        ["tenant_id"],
        unique=False,
        postgresql_where=sa.text("released_at IS NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_legal_holds_active", table_name="legal_holds")
    op.drop_table("legal_holds")
