"""console sessions on the server, failed authentications per client

Revision ID: 0010_console_sessions
Revises: 0010_encrypt_secrets
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0011_console_sessions"
down_revision = "0010_encrypt_secrets"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "console_sessions",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("sid_digest", sa.LargeBinary(), nullable=False),
        sa.Column("token_id", sa.BigInteger(), nullable=False),
        sa.Column(
            "data",
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
        sa.Column(
            "last_seen_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["token_id"],
            ["api_tokens.id"],
            name=op.f("fk_console_sessions_token_id_api_tokens"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_console_sessions")),
        sa.UniqueConstraint("sid_digest", name=op.f("uq_console_sessions_sid_digest")),
    )
    op.create_index(
        op.f("ix_console_sessions_token_id"), "console_sessions", ["token_id"], unique=False
    )
    op.create_table(
        "auth_failures",
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("client", sa.Text(), nullable=False),
        sa.Column("window_started", sa.DateTime(timezone=True), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("kind", "client", name=op.f("pk_auth_failures")),
    )


def downgrade() -> None:
    op.drop_table("auth_failures")
    op.drop_index(op.f("ix_console_sessions_token_id"), table_name="console_sessions")
    op.drop_table("console_sessions")
