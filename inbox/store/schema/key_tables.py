"""Payload keys: the data keys that seal payloads at rest, erasures, and the sealing job.

``data_keys``: one live key per tenant (``subject_digest`` empty) and per subject a
source names (its digest), wrapped by ``INBOX_KEK`` (``inbox.infra.envelope``). Erasure
destroys a key: ``wrapped`` becomes NULL and the row stays, saying when, by whom and by
which erasure; a later payload of that subject gets a new key (the unique index covers
live keys only). ``events.key_id`` names the key a payload is sealed under (NULL: stored
in clear, before sealing was turned on or the sealing job reached it).

``erasures``: each request, with the second operator of a tenant-wide one.
``sealing_progress``: where the background job that seals rows stored in clear is.
``retention_reports``: what each prune (with its day drops) and each erasure removed, by
which rule or request, and what holds kept; the report's exact bytes, and its manifest and
signature by the evidence key where the writing process had it (``inbox.services.reports``).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    ForeignKey,
    Identity,
    Index,
    Integer,
    LargeBinary,
    Table,
    Text,
    func,
    text,
)

from inbox.store.schema.metadata import metadata, now_column

ERASURE_STATUSES = ("awaiting_approval", "done", "rejected")

data_keys = Table(
    "data_keys",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("tenant_id", BigInteger, ForeignKey("tenants.id"), nullable=False),
    # Empty: the tenant's own key; else the subject's digest (never the subject in clear).
    Column("subject_digest", LargeBinary, nullable=False, server_default=text("''::bytea")),
    # The data key wrapped by the KEK (``fernet:...``); NULL once destroyed.
    Column("wrapped", Text),
    now_column(),
    Column("destroyed_at", DateTime(timezone=True)),
    Column("destroyed_by", Text),
    Column("erasure_id", BigInteger),
    CheckConstraint("(wrapped IS NULL) = (destroyed_at IS NOT NULL)", name="destroyed"),
    Index(
        "ix_data_keys_live",
        "tenant_id",
        "subject_digest",
        unique=True,
        postgresql_where=text("destroyed_at IS NULL"),
    ),
)

erasures = Table(
    "erasures",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("public_id", Text, nullable=False, unique=True),
    Column("tenant_id", BigInteger, ForeignKey("tenants.id"), nullable=False),
    Column("scope", Text, nullable=False),
    Column("subject_digest", LargeBinary),
    Column("reason", Text, nullable=False),
    Column("status", Text, nullable=False),
    Column("requested_by", Text, nullable=False),
    Column("requested_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("approved_by", Text),
    Column("done_at", DateTime(timezone=True)),
    Column("keys_destroyed", Integer, nullable=False, server_default=text("0")),
    Column("events", BigInteger, nullable=False, server_default=text("0")),
    CheckConstraint(
        "(scope = 'tenant' AND subject_digest IS NULL)"
        " OR (scope = 'subject' AND subject_digest IS NOT NULL)",
        name="scope",
    ),
    CheckConstraint(
        "status IN ('awaiting_approval', 'done', 'rejected')",
        name="status",
    ),
)

sealing_progress = Table(
    "sealing_progress",
    metadata,
    Column("singleton", Boolean, primary_key=True, server_default=text("true")),
    # Every events row with a lower id has been looked at (sealed, or had nothing to seal).
    Column("next_id", BigInteger, nullable=False, server_default=text("0")),
    Column("sealed", BigInteger, nullable=False, server_default=text("0")),
    Column("started_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("finished_at", DateTime(timezone=True)),
    CheckConstraint("singleton", name="singleton"),
)

retention_reports = Table(
    "retention_reports",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("public_id", Text, nullable=False, unique=True),
    Column("kind", Text, nullable=False),
    now_column(),
    Column("report", LargeBinary, nullable=False),  # report.json, exactly as signed
    Column("manifest", LargeBinary),  # NULL: signed when exported
    Column("signature", LargeBinary),
    CheckConstraint("kind IN ('prune', 'erasure')", name="kind"),
)
