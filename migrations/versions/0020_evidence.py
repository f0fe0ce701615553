"""events keep their verification verdict, for evidence bundles

Revision ID: 0020_evidence
Revises: 0019_legal_holds
Create Date: 2026-12-03

How a request was authenticated (scheme, which secret by id, time of the check and
tolerance, the key's digest, the SHA-256 of the raw body, the provider's signature
headers) is written with the event in the claiming INSERT, so an exported bundle can show
it and an auditor can re-verify the provider's signature (inbox.domain.evidence).
Nullable: events received before this revision have no verdict, and the bundle says so.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0020_evidence"
down_revision = "0019_legal_holds"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("events", sa.Column("verification", JSONB, nullable=True))


def downgrade() -> None:
    op.drop_column("events", "verification")
