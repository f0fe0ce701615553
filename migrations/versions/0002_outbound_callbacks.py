"""outbound callbacks

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "endpoints",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("public_id", sa.Text(), nullable=False),
        sa.Column("tenant_id", sa.BigInteger(), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("event_types", postgresql.ARRAY(sa.Text()), nullable=True),
        sa.Column("enabled", sa.Boolean(), server_default=sa.text("true"), nullable=False),
        sa.Column("disabled_reason", sa.Text(), nullable=True),
        sa.Column("max_attempts", sa.Integer(), server_default=sa.text("4"), nullable=False),
        sa.Column(
            "retry_schedule",
            postgresql.ARRAY(sa.Integer()),
            server_default=sa.text("'{5,30,120}'"),
            nullable=False,
        ),
        sa.Column("timeout_ms", sa.Integer(), server_default=sa.text("5000"), nullable=False),
        sa.Column("max_in_flight", sa.Integer(), server_default=sa.text("4"), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_endpoints_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_endpoints")),
        sa.UniqueConstraint("public_id", name=op.f("uq_endpoints_public_id")),
    )
    op.create_table(
        "endpoint_secrets",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("endpoint_id", sa.BigInteger(), nullable=False),
        sa.Column("secret", sa.Text(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["endpoint_id"],
            ["endpoints.id"],
            name=op.f("fk_endpoint_secrets_endpoint_id_endpoints"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_endpoint_secrets")),
    )
    op.create_index(
        op.f("ix_endpoint_secrets_endpoint_id"), "endpoint_secrets", ["endpoint_id"], unique=False
    )
    op.create_table(
        "deliveries",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("public_id", sa.Text(), nullable=False),
        sa.Column("tenant_id", sa.BigInteger(), nullable=False),
        sa.Column("endpoint_id", sa.BigInteger(), nullable=False),
        sa.Column("event_id", sa.BigInteger(), nullable=True),
        sa.Column("event_type", sa.Text(), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=False),
        sa.Column("state", sa.Text(), server_default=sa.text("'pending'"), nullable=False),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column(
            "available_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("lease_owner", sa.Text(), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("fence", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("last_status", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "state IN ('pending', 'sending', 'delivered', 'failed')",
            name=op.f("ck_deliveries_state"),
        ),
        sa.ForeignKeyConstraint(
            ["endpoint_id"], ["endpoints.id"], name=op.f("fk_deliveries_endpoint_id_endpoints")
        ),
        sa.ForeignKeyConstraint(
            ["event_id"],
            ["events.id"],
            name=op.f("fk_deliveries_event_id_events"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_deliveries_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_deliveries")),
        sa.UniqueConstraint("public_id", name=op.f("uq_deliveries_public_id")),
    )
    op.create_index(
        "ix_deliveries_due",
        "deliveries",
        ["endpoint_id", "available_at", "id"],
        unique=False,
        postgresql_where=sa.text("state = 'pending'"),
    )
    op.create_index(
        "ix_deliveries_listing", "deliveries", ["tenant_id", "state", "id"], unique=False
    )
    op.create_index(
        "ix_deliveries_sending",
        "deliveries",
        ["endpoint_id", "lease_expires_at"],
        unique=False,
        postgresql_where=sa.text("state = 'sending'"),
    )
    op.create_table(
        "delivery_attempts",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("delivery_id", sa.BigInteger(), nullable=False),
        sa.Column(
            "at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.Column("status", sa.Integer(), nullable=True),
        sa.Column("error_class", sa.Text(), nullable=True),
        sa.Column("latency_ms", sa.Integer(), nullable=False),
        sa.Column("excerpt", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["delivery_id"],
            ["deliveries.id"],
            name=op.f("fk_delivery_attempts_delivery_id_deliveries"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_delivery_attempts")),
    )
    op.create_index(
        op.f("ix_delivery_attempts_delivery_id"), "delivery_attempts", ["delivery_id"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_delivery_attempts_delivery_id"), table_name="delivery_attempts")
    op.drop_table("delivery_attempts")
    op.drop_index(
        "ix_deliveries_sending",
        table_name="deliveries",
        postgresql_where=sa.text("state = 'sending'"),
    )
    op.drop_index("ix_deliveries_listing", table_name="deliveries")
    op.drop_index(
        "ix_deliveries_due", table_name="deliveries", postgresql_where=sa.text("state = 'pending'")
    )
    op.drop_table("deliveries")
    op.drop_index(op.f("ix_endpoint_secrets_endpoint_id"), table_name="endpoint_secrets")
    op.drop_table("endpoint_secrets")
    op.drop_table("endpoints")
