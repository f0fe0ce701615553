"""Payload keys: the data keys that seal payloads at rest, erasures, and the sealing job.

``data_keys``: the registry of the data keys, one live key per tenant (``subject_digest``
empty) and per subject a source names (its digest). No key material: the keys themselves,
wrapped by ``INBOX_KEK``, live in the key store, a database of their own
(``inbox.store.db.keystore``), under the same id. Erasure destroys a key: the registry row
is marked (when, by whom, by which erasure) and stays, and the key store's row is deleted;
a later payload of that subject gets a new key (the unique index covers live keys only).
``events.key_id`` names the key a payload is sealed under (NULL: stored in clear, before
sealing was turned on or the sealing job reached it).

``erasures``: each request, with the second operator of a tenant-wide one; ``destroying``
between the registry's commit and the key store's delete (``inbox.services.erasure``
resumes one found there).
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

ERASURE_STATUSES = ("awaiting_approval", "destroying", "done", "rejected")

data_keys = Table(
    "data_keys",
    metadata,
    # The key store's id for the key (it makes the key, then this row is written).
    Column("id", BigInteger, primary_key=True, autoincrement=False),
    Column("tenant_id", BigInteger, ForeignKey("tenants.id"), nullable=False),
    # Empty: the tenant's own key; else the subject's digest (never the subject in clear).
    Column("subject_digest", LargeBinary, nullable=False, server_default=text("''::bytea")),
    now_column(),
    Column("destroyed_at", DateTime(timezone=True)),
    Column("destroyed_by", Text),
    Column("erasure_id", BigInteger),
    Index("ix_data_keys_erasure_id", "erasure_id", postgresql_where=text("erasure_id IS NOT NULL")),
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
        "status IN ('awaiting_approval', 'destroying', 'done', 'rejected')",
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
