"""payload keys: payloads sealed at rest under data keys wrapped by INBOX_KEK

Revision ID: 0026_payload_keys
Revises: 0025_invariants
Create Date: 2026-12-06

Envelope encryption (inbox.infra.envelope, inbox.store.schema.key_tables): ``data_keys``
(one live key per tenant and per named subject, wrapped), ``erasures`` (each request to
destroy keys), ``sealing_progress`` (the background job that seals rows stored in clear),
``retention_reports`` (what each prune and erasure removed and what holds kept, signed).
``events`` gains ``key_id`` and ``headers_sealed``, ``steps`` a ``key_id`` (its result sealed
under its event's key): all NULL on every existing row, which
reads as stored in clear, so nothing is rewritten here; the job (``inbox payloads seal``)
seals them later, resumably, while everything keeps reading.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0026_payload_keys"
down_revision = "0025_invariants"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "data_keys",
        sa.Column("id", sa.BigInteger(), sa.Identity(), nullable=False),
        sa.Column("tenant_id", sa.BigInteger(), nullable=False),
        sa.Column(
            "subject_digest",
            sa.LargeBinary(),
            server_default=sa.text("''::bytea"),
            nullable=False,
        ),
        sa.Column("wrapped", sa.Text(), nullable=True),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.Column("destroyed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("destroyed_by", sa.Text(), nullable=True),
        sa.Column("erasure_id", sa.BigInteger(), nullable=True),
        sa.CheckConstraint(
            "(wrapped IS NULL) = (destroyed_at IS NOT NULL)",
            name=op.f("ck_data_keys_destroyed"),
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_data_keys_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_data_keys")),
    )
    op.create_index(
        "ix_data_keys_live",
        "data_keys",
        ["tenant_id", "subject_digest"],
        unique=True,
        postgresql_where=sa.text("destroyed_at IS NULL"),
    )
    op.create_table(
        "erasures",
        sa.Column("id", sa.BigInteger(), sa.Identity(), nullable=False),
        sa.Column("public_id", sa.Text(), nullable=False),
        sa.Column("tenant_id", sa.BigInteger(), nullable=False),
        sa.Column("scope", sa.Text(), nullable=False),
        sa.Column("subject_digest", sa.LargeBinary(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("requested_by", sa.Text(), nullable=False),
        sa.Column(
            "requested_at",
            sa.DateTime(timezone=True),
            server_default=sa.func.now(),
            nullable=False,
        ),
        sa.Column("approved_by", sa.Text(), nullable=True),
        sa.Column("done_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("keys_destroyed", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("events", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.CheckConstraint(
            "(scope = 'tenant' AND subject_digest IS NULL)"
            " OR (scope = 'subject' AND subject_digest IS NOT NULL)",
            name=op.f("ck_erasures_scope"),
        ),
        sa.CheckConstraint(
            "status IN ('awaiting_approval', 'done', 'rejected')",
            name=op.f("ck_erasures_status"),
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_erasures_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_erasures")),
        sa.UniqueConstraint("public_id", name=op.f("uq_erasures_public_id")),
    )
    op.create_table(
        "sealing_progress",
        sa.Column("singleton", sa.Boolean(), server_default=sa.text("true"), nullable=False),
        sa.Column("next_id", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("sealed", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column(
            "started_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.Column(
            "updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("singleton", name=op.f("ck_sealing_progress_singleton")),
        sa.PrimaryKeyConstraint("singleton", name=op.f("pk_sealing_progress")),
    )
    op.create_table(
        "retention_reports",
        sa.Column("id", sa.BigInteger(), sa.Identity(), nullable=False),
        sa.Column("public_id", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.Column("report", sa.LargeBinary(), nullable=False),
        sa.Column("manifest", sa.LargeBinary(), nullable=True),
        sa.Column("signature", sa.LargeBinary(), nullable=True),
        sa.CheckConstraint("kind IN ('prune', 'erasure')", name=op.f("ck_retention_reports_kind")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_retention_reports")),
        sa.UniqueConstraint("public_id", name=op.f("uq_retention_reports_public_id")),
    )
    op.add_column("events", sa.Column("key_id", sa.BigInteger(), nullable=True))
    op.add_column("events", sa.Column("headers_sealed", sa.LargeBinary(), nullable=True))
    op.add_column("steps", sa.Column("key_id", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    op.drop_column("steps", "key_id")
    op.drop_column("events", "headers_sealed")
    op.drop_column("events", "key_id")
    op.drop_table("retention_reports")
    op.drop_table("sealing_progress")
    op.drop_table("erasures")
    op.drop_index("ix_data_keys_live", table_name="data_keys")
    op.drop_table("data_keys")
