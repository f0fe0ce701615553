"""tokens and bulk replays

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("token_digest", sa.LargeBinary(), nullable=False),
        sa.Column("role", sa.Text(), nullable=False),
        sa.Column("tenant_id", sa.BigInteger(), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("role IN ('viewer', 'operator')", name=op.f("ck_api_tokens_role")),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_api_tokens_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_tokens")),
        sa.UniqueConstraint("name", name=op.f("uq_api_tokens_name")),
        sa.UniqueConstraint("token_digest", name=op.f("uq_api_tokens_token_digest")),
    )
    op.create_table(
        "bulk_replays",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("public_id", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("tenant_id", sa.BigInteger(), nullable=True),
        sa.Column(
            "filter",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("rate", sa.Integer(), nullable=False),
        sa.Column("actor", sa.Text(), nullable=False),
        sa.Column("idempotency_digest", sa.LargeBinary(), nullable=True),
        sa.Column("request_sha256", sa.LargeBinary(), nullable=False),
        sa.Column("status", sa.Text(), server_default=sa.text("'queued'"), nullable=False),
        sa.Column("total", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("done", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("moved", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("skipped", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("lease_owner", sa.Text(), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("kind IN ('events', 'deliveries')", name=op.f("ck_bulk_replays_kind")),
        sa.CheckConstraint(
            "status IN ('queued', 'running', 'completed', 'cancelled')",
            name=op.f("ck_bulk_replays_status"),
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_bulk_replays_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_bulk_replays")),
        sa.UniqueConstraint("public_id", name=op.f("uq_bulk_replays_public_id")),
    )
    op.create_index(
        "ix_bulk_replays_live",
        "bulk_replays",
        ["lease_expires_at"],
        unique=False,
        postgresql_where=sa.text("status IN ('queued', 'running')"),
    )
    op.create_index(
        "uq_bulk_replays_idempotency",
        "bulk_replays",
        ["idempotency_digest"],
        unique=True,
        postgresql_where=sa.text("idempotency_digest IS NOT NULL"),
    )
    op.create_table(
        "bulk_replay_items",
        sa.Column("job_id", sa.BigInteger(), nullable=False),
        sa.Column("subject_id", sa.BigInteger(), nullable=False),
        sa.Column("public_id", sa.Text(), nullable=False),
        sa.Column("outcome", sa.Text(), nullable=True),
        sa.Column("done_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "outcome IN ('moved', 'skipped')", name=op.f("ck_bulk_replay_items_outcome")
        ),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["bulk_replays.id"],
            name=op.f("fk_bulk_replay_items_job_id_bulk_replays"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("job_id", "subject_id", name=op.f("pk_bulk_replay_items")),
    )
    op.create_index(
        "ix_bulk_replay_items_pending",
        "bulk_replay_items",
        ["job_id", "subject_id"],
        unique=False,
        postgresql_where=sa.text("outcome IS NULL"),
    )


def downgrade() -> None:
    op.drop_index(
        "ix_bulk_replay_items_pending",
        table_name="bulk_replay_items",
        postgresql_where=sa.text("outcome IS NULL"),
    )
    op.drop_table("bulk_replay_items")
    op.drop_index(
        "uq_bulk_replays_idempotency",
        table_name="bulk_replays",
        postgresql_where=sa.text("idempotency_digest IS NOT NULL"),
    )
    op.drop_index(
        "ix_bulk_replays_live",
        table_name="bulk_replays",
        postgresql_where=sa.text("status IN ('queued', 'running')"),
    )
    op.drop_table("bulk_replays")
    op.drop_table("api_tokens")
