"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

# The database enforces the same transition table as inbox.states.ALLOWED
# (a test compares the two), so no code path can move an event illegally.
STATE_GUARD = """
CREATE FUNCTION inbox_guard_event_state() RETURNS trigger AS $$
BEGIN
    IF NEW.state IS DISTINCT FROM OLD.state AND (OLD.state, NEW.state) NOT IN (
        ('processing', 'completed'), ('processing', 'quarantined'), ('processing', 'received'),
        ('quarantined', 'received'), ('received', 'processing'), ('received', 'quarantined')
    ) THEN
        RAISE EXCEPTION 'event %: % -> % is not allowed', OLD.id, OLD.state, NEW.state
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$ LANGUAGE plpgsql;

CREATE TRIGGER events_state_guard BEFORE UPDATE OF state ON events
    FOR EACH ROW EXECUTE FUNCTION inbox_guard_event_state();
"""
revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "audit_log",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column(
            "at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.Column("actor", sa.Text(), nullable=False),
        sa.Column("action", sa.Text(), nullable=False),
        sa.Column("subject_kind", sa.Text(), nullable=False),
        sa.Column("subject_id", sa.BigInteger(), nullable=True),
        sa.Column(
            "detail",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_log")),
    )
    op.create_index(
        "ix_audit_log_subject", "audit_log", ["subject_kind", "subject_id"], unique=False
    )
    op.create_table(
        "tenants",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("disabled", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tenants")),
        sa.UniqueConstraint("name", name=op.f("uq_tenants_name")),
    )
    op.create_table(
        "sources",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("tenant_id", sa.BigInteger(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("scheme", sa.Text(), nullable=False),
        sa.Column("enabled", sa.Boolean(), server_default=sa.text("true"), nullable=False),
        sa.Column(
            "options",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_sources_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sources")),
        sa.UniqueConstraint("tenant_id", "name", name=op.f("uq_sources_tenant_id_name")),
    )
    op.create_table(
        "events",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("public_id", sa.Text(), nullable=False),
        sa.Column("tenant_id", sa.BigInteger(), nullable=False),
        sa.Column("source_id", sa.BigInteger(), nullable=False),
        sa.Column("key_digest", sa.LargeBinary(), nullable=True),
        sa.Column("key_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("event_type", sa.Text(), nullable=True),
        sa.Column("business_key_digest", sa.LargeBinary(), nullable=True),
        sa.Column("ordering_key", sa.LargeBinary(), nullable=True),
        sa.Column("content_type", sa.Text(), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=True),
        sa.Column("body_sha256", sa.LargeBinary(), nullable=False),
        sa.Column(
            "headers",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("response_status", sa.Integer(), nullable=False),
        sa.Column("response_body", sa.LargeBinary(), nullable=False),
        sa.Column("sync", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("state", sa.Text(), server_default=sa.text("'received'"), nullable=False),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("max_attempts", sa.Integer(), server_default=sa.text("5"), nullable=False),
        sa.Column(
            "available_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("lease_owner", sa.Text(), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("fence", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column(
            "received_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error_class", sa.Text(), nullable=True),
        sa.Column("last_error_message", sa.Text(), nullable=True),
        sa.Column("duplicate_count", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("first_duplicate_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_duplicate_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("outcome", sa.Text(), nullable=True),
        sa.Column("decision", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("duplicate_of", sa.BigInteger(), nullable=True),
        sa.CheckConstraint(
            "state IN ('received', 'processing', 'completed', 'quarantined')",
            name=op.f("ck_events_state"),
        ),
        sa.ForeignKeyConstraint(
            ["source_id"], ["sources.id"], name=op.f("fk_events_source_id_sources")
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_events_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_events")),
        sa.UniqueConstraint("public_id", name=op.f("uq_events_public_id")),
    )
    op.create_index(
        "ix_events_ordering",
        "events",
        ["tenant_id", "ordering_key", "id"],
        unique=False,
        postgresql_where=sa.text(
            "ordering_key IS NOT NULL AND state IN ('received', 'processing')"
        ),
    )
    op.create_index(
        "ix_events_business_key", "events", ["tenant_id", "business_key_digest", "id"], unique=False
    )
    op.create_index(
        "ix_events_due",
        "events",
        ["tenant_id", "available_at", "id"],
        unique=False,
        postgresql_where=sa.text("state = 'received'"),
    )
    op.create_index(
        "ix_events_leases",
        "events",
        ["lease_expires_at"],
        unique=False,
        postgresql_where=sa.text("state = 'processing'"),
    )
    op.create_index(
        "ix_events_listing", "events", ["tenant_id", "source_id", "state", "id"], unique=False
    )
    op.create_index("ix_events_received_at", "events", ["received_at"], unique=False)
    op.create_index(
        "uq_events_dedup",
        "events",
        ["tenant_id", "source_id", "key_digest"],
        unique=True,
        postgresql_where=sa.text("key_digest IS NOT NULL"),
    )
    op.create_table(
        "source_secrets",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("source_id", sa.BigInteger(), nullable=False),
        sa.Column("secret", sa.Text(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["source_id"], ["sources.id"], name=op.f("fk_source_secrets_source_id_sources")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_source_secrets")),
    )
    op.create_index(
        op.f("ix_source_secrets_source_id"), "source_secrets", ["source_id"], unique=False
    )
    op.create_table(
        "effects",
        sa.Column("tenant_id", sa.BigInteger(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("business_key_digest", sa.LargeBinary(), nullable=False),
        sa.Column("event_id", sa.BigInteger(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["event_id"], ["events.id"], name=op.f("fk_effects_event_id_events"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_effects_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint(
            "tenant_id", "name", "business_key_digest", name=op.f("pk_effects")
        ),
    )
    op.create_table(
        "idempotency_conflicts",
        sa.Column("event_id", sa.BigInteger(), nullable=False),
        sa.Column("other_body_sha256", sa.LargeBinary(), nullable=False),
        sa.Column("count", sa.Integer(), server_default=sa.text("1"), nullable=False),
        sa.Column(
            "first_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.Column(
            "last_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.ForeignKeyConstraint(
            ["event_id"],
            ["events.id"],
            name=op.f("fk_idempotency_conflicts_event_id_events"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "event_id", "other_body_sha256", name=op.f("pk_idempotency_conflicts")
        ),
    )
    op.create_table(
        "steps",
        sa.Column("event_id", sa.BigInteger(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("result", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column(
            "completed_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["event_id"], ["events.id"], name=op.f("fk_steps_event_id_events"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("event_id", "name", name=op.f("pk_steps")),
    )
    op.execute(STATE_GUARD)


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS events_state_guard ON events")
    op.execute("DROP FUNCTION IF EXISTS inbox_guard_event_state()")
    op.drop_table("steps")
    op.drop_table("idempotency_conflicts")
    op.drop_table("effects")
    op.drop_index(op.f("ix_source_secrets_source_id"), table_name="source_secrets")
    op.drop_table("source_secrets")
    op.drop_index(
        "uq_events_dedup", table_name="events", postgresql_where=sa.text("key_digest IS NOT NULL")
    )
    op.drop_index("ix_events_received_at", table_name="events")
    op.drop_index("ix_events_listing", table_name="events")
    op.drop_index(
        "ix_events_leases", table_name="events", postgresql_where=sa.text("state = 'processing'")
    )
    op.drop_index(
        "ix_events_due", table_name="events", postgresql_where=sa.text("state = 'received'")
    )
    op.drop_index("ix_events_business_key", table_name="events")
    op.drop_index("ix_events_ordering", table_name="events")
    op.drop_table("events")
    op.drop_table("sources")
    op.drop_table("tenants")
    op.drop_index("ix_audit_log_subject", table_name="audit_log")
    op.drop_table("audit_log")
