"""The configuration tables: tenants, sources, endpoints, tokens, sessions, audit, bulk
replays. Small, never partitioned; the ledger is in ``inbox.store.schema.ledger_tables``."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Identity,
    Index,
    Integer,
    LargeBinary,
    Table,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB

from inbox.domain.circuit import CIRCUIT_STATES
from inbox.store.schema.metadata import metadata, now_column, one_of

tenants = Table(
    "tenants",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("name", Text, nullable=False, unique=True),
    Column("disabled", Boolean, nullable=False, server_default=text("false")),
    now_column(),
    # Fairness (migration 0031, inbox.store.write.queue): at most this many of the tenant's
    # events run at once (NULL: no cap); its share of each claim, relative to the others'.
    Column("max_in_flight", Integer),
    Column("weight", Integer, nullable=False, server_default=text("1")),
    CheckConstraint("max_in_flight IS NULL OR max_in_flight > 0", name="max_in_flight"),
    CheckConstraint("weight BETWEEN 1 AND 100", name="weight"),
)

sources = Table(
    "sources",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("tenant_id", BigInteger, ForeignKey("tenants.id"), nullable=False),
    Column("name", Text, nullable=False),
    Column("scheme", Text, nullable=False),
    Column("enabled", Boolean, nullable=False, server_default=text("true")),
    # Per-source options (see inbox.sources.SourceOptions): tolerance, limits, paths, ...
    Column("options", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    now_column(),
    UniqueConstraint("tenant_id", "name"),
)

source_secrets = Table(
    "source_secrets",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("source_id", BigInteger, ForeignKey("sources.id"), nullable=False, index=True),
    # Verifying an HMAC needs the secret itself, so it is kept encrypted (Fernet under
    # INBOX_KEK, inbox/infra/keyring.py), never in clear: the CHECK refuses a clear value.
    Column("secret", Text, nullable=False),
    now_column(),
    Column("revoked_at", DateTime(timezone=True)),
    CheckConstraint("secret LIKE 'fernet:%'", name="encrypted"),
)

audit_log = Table(
    "audit_log",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("actor", Text, nullable=False),
    Column("action", Text, nullable=False),
    Column("subject_kind", Text, nullable=False),
    Column("subject_id", BigInteger),
    Column("detail", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
)
Index("ix_audit_log_subject", audit_log.c.subject_kind, audit_log.c.subject_id)

# Outbound callbacks: a tenant's endpoints, and deliveries written in the same
# transaction as the step that decides them (a transactional outbox).
endpoints = Table(
    "endpoints",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("public_id", Text, nullable=False, unique=True),
    Column("tenant_id", BigInteger, ForeignKey("tenants.id"), nullable=False),
    Column("url", Text, nullable=False),
    # NULL: every event type.
    Column("event_types", ARRAY(Text)),
    # A CEL expression over type and payload (inbox.domain.filters): a callback it is not
    # true for is not written for this endpoint (migration 0021).
    Column("filter", Text),
    Column("enabled", Boolean, nullable=False, server_default=text("true")),
    Column("disabled_reason", Text),
    # An operator's pause: like disabled, its deliveries are held (migration 0023).
    Column("paused", Boolean, nullable=False, server_default=text("false")),
    Column("max_attempts", Integer, nullable=False, server_default=text("4")),
    # Seconds before each retry; the last value repeats. Jitter is added.
    Column("retry_schedule", ARRAY(Integer), nullable=False, server_default=text("'{5,30,120}'")),
    Column("timeout_ms", Integer, nullable=False, server_default=text("5000")),
    Column("max_in_flight", Integer, nullable=False, server_default=text("4")),
    # Unreachable at its last attempt: one courier at a time until it answers again.
    Column("failing", Boolean, nullable=False, server_default=text("false")),
    now_column(),
    # Its circuit breaker (inbox.domain.circuit), shared by every courier (migration 0023):
    # the state, consecutive retryable failures, the last wait between probes (seconds),
    # when the next probe may go (while half open: the probe's lease), the last change.
    Column("circuit", Text, nullable=False, server_default=text("'closed'")),
    Column("circuit_failures", Integer, nullable=False, server_default=text("0")),
    Column("probe_backoff", Float, nullable=False, server_default=text("0")),
    Column("probe_at", DateTime(timezone=True)),
    Column("circuit_changed_at", DateTime(timezone=True)),
    CheckConstraint(one_of("circuit", CIRCUIT_STATES), name="circuit"),
    # Messages a second to it, across every courier (NULL: unlimited), and the token
    # bucket that enforces it: tokens left at rate_at (migration 0023).
    Column("rate_per_second", Float),
    Column("rate_tokens", Float, nullable=False, server_default=text("0")),
    Column("rate_at", DateTime(timezone=True)),
    # The breaker's failure-rate window: attempts and failures per slice of
    # INBOX_CIRCUIT_WINDOW_SECONDS (inbox.domain.circuit.Window; migration 0027).
    Column("circuit_window", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    # At most one delivery in flight; the next after the previous is delivered or dead.
    Column("ordered", Boolean, nullable=False, server_default=text("false")),
    # An operator's delete keeps the row, so deliveries, audit and evidence keep their
    # references; a deleted endpoint is disabled, gets no new deliveries, is not listed.
    Column("deleted_at", DateTime(timezone=True)),
    Column("deleted_by", Text),
)

# An operator's discard of an endpoint's held deliveries: done at once up to
# INBOX_HELD_DISCARD_APPROVAL_MIN of them, past that awaiting a second operator. It covers
# the deliveries held up to ``upto_id`` when it was asked for (migration 0023).
held_discards = Table(
    "held_discards",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("public_id", Text, nullable=False, unique=True),
    Column("endpoint_id", BigInteger, ForeignKey("endpoints.id"), nullable=False),
    Column("reason", Text, nullable=False),
    Column("requested_by", Text, nullable=False),
    Column("upto_id", BigInteger, nullable=False),
    Column("held", Integer, nullable=False),
    Column("status", Text, nullable=False, server_default=text("'awaiting'")),
    Column("decided_by", Text),
    now_column(),
    Column("decided_at", DateTime(timezone=True)),
    # Asked by a delete: approving it deletes the endpoint too (migration 0027).
    Column("delete_endpoint", Boolean, nullable=False, server_default=text("false")),
    CheckConstraint("status IN ('awaiting', 'discarded', 'withdrawn')", name="status"),
    Index(
        "ix_held_discards_awaiting",
        "endpoint_id",
        unique=True,
        postgresql_where=text("status = 'awaiting'"),
    ),
)

endpoint_secrets = Table(
    "endpoint_secrets",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("endpoint_id", BigInteger, ForeignKey("endpoints.id"), nullable=False, index=True),
    Column("secret", Text, nullable=False),  # encrypted, as source_secrets.secret
    now_column(),
    Column("revoked_at", DateTime(timezone=True)),
    CheckConstraint("secret LIKE 'fernet:%'", name="encrypted"),
)

# The admin API: bearer tokens (stored only as SHA-256 digests) and bulk replays.
TOKEN_ROLES = ("viewer", "operator")

api_tokens = Table(
    "api_tokens",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("name", Text, nullable=False, unique=True),
    Column("token_digest", LargeBinary, nullable=False, unique=True),
    Column("role", Text, nullable=False),
    # NULL: every tenant.
    Column("tenant_id", BigInteger, ForeignKey("tenants.id")),
    now_column(),
    Column("revoked_at", DateTime(timezone=True)),
    Column("last_used_at", DateTime(timezone=True)),
    CheckConstraint("role IN ('viewer', 'operator')", name="role"),
)

# Console sessions, held on the server: the cookie carries a random id, this table its
# SHA-256 (a stolen dump cannot be replayed as a cookie). Signing out deletes the row, so
# the session ends for every web process at once; idle and absolute limits are checked
# against these times on each request.
console_sessions = Table(
    "console_sessions",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("sid_digest", LargeBinary, nullable=False, unique=True),
    Column(
        "token_id",
        BigInteger,
        ForeignKey("api_tokens.id", ondelete="CASCADE"),
        nullable=False,
        index=True,
    ),
    Column("data", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    now_column(),
    Column("last_seen_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
)

# Failed sign-ins and bearer tokens per client address, in fixed windows: in the database,
# so every web process on every host counts against the same limit.
auth_failures = Table(
    "auth_failures",
    metadata,
    Column("kind", Text, primary_key=True),
    Column("client", Text, primary_key=True),
    Column("window_started", DateTime(timezone=True), nullable=False),
    Column("failures", Integer, nullable=False),
)

# inbox.domain.approval.BulkStatus; the CHECK below lists the same states.
BULK_STATUSES = ("awaiting_approval", "queued", "running", "completed", "cancelled", "rejected")

bulk_replays = Table(
    "bulk_replays",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("public_id", Text, nullable=False, unique=True),
    Column("kind", Text, nullable=False),
    # The requesting token's tenant scope (NULL: every tenant); the filter as given.
    Column("tenant_id", BigInteger, ForeignKey("tenants.id")),
    Column("filter", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("rate", Integer, nullable=False),
    Column("actor", Text, nullable=False),
    # SHA-256 over (scope, actor, Idempotency-Key), and over the request it named.
    Column("idempotency_digest", LargeBinary),
    Column("request_sha256", LargeBinary, nullable=False),
    Column("status", Text, nullable=False, server_default=text("'queued'")),
    Column("total", Integer, nullable=False, server_default=text("0")),
    Column("done", Integer, nullable=False, server_default=text("0")),
    Column("moved", Integer, nullable=False, server_default=text("0")),
    Column("skipped", Integer, nullable=False, server_default=text("0")),
    # The two-person rule: who approved or rejected a job that needed approval, when, and why.
    Column("reviewer", Text),
    Column("reviewed_at", DateTime(timezone=True)),
    Column("review_note", Text),
    # One runner at a time: the owner renews its lease with every batch it commits.
    Column("lease_owner", Text),
    Column("lease_expires_at", DateTime(timezone=True)),
    now_column(),
    Column("started_at", DateTime(timezone=True)),
    Column("finished_at", DateTime(timezone=True)),
    CheckConstraint("kind IN ('events', 'deliveries')", name="kind"),
    CheckConstraint(
        "status IN ('awaiting_approval', 'queued', 'running', 'completed', 'cancelled',"
        " 'rejected')",
        name="status",
    ),
    Index(
        "uq_bulk_replays_idempotency",
        "idempotency_digest",
        unique=True,
        postgresql_where=text("idempotency_digest IS NOT NULL"),
    ),
    Index(
        "ix_bulk_replays_live",
        "lease_expires_at",
        postgresql_where=text("status IN ('queued', 'running')"),
    ),
)

# The ids a bulk replay matched when it was created, and what became of each.
bulk_replay_items = Table(
    "bulk_replay_items",
    metadata,
    Column(
        "job_id", BigInteger, ForeignKey("bulk_replays.id", ondelete="CASCADE"), primary_key=True
    ),
    # events.id or deliveries.id, after the job's kind.
    Column("subject_id", BigInteger, primary_key=True),
    Column("public_id", Text, nullable=False),
    # NULL until replayed: 'moved', or 'skipped' (no longer a dead letter, or replayed since).
    Column("outcome", Text),
    Column("done_at", DateTime(timezone=True)),
    CheckConstraint("outcome IN ('moved', 'skipped')", name="outcome"),
    Index(
        "ix_bulk_replay_items_pending",
        "job_id",
        "subject_id",
        postgresql_where=text("outcome IS NULL"),
    ),
)

# Legal holds (inbox.domain.holds): while released_at is NULL, retention leaves the
# events a hold covers, their bodies and their day partitions alone. Rows are never
# deleted: a released hold says who placed it, who asked for its release, who released it.
legal_holds = Table(
    "legal_holds",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("public_id", Text, nullable=False, unique=True),
    Column("tenant_id", BigInteger, ForeignKey("tenants.id"), nullable=False),
    Column("scope", Text, nullable=False),
    # What the scope names: one source, a business key's digest, or one event (by its id
    # and public id; no foreign key, the events table is partitioned).
    Column("source_id", BigInteger, ForeignKey("sources.id")),
    Column("business_key_digest", LargeBinary),
    Column("event_id", BigInteger),
    Column("event_public_id", Text),
    Column("reason", Text, nullable=False),
    Column("placed_by", Text, nullable=False),
    now_column(),
    Column("release_requested_by", Text),
    Column("release_requested_at", DateTime(timezone=True)),
    Column("released_by", Text),
    Column("released_at", DateTime(timezone=True)),
    CheckConstraint(
        "(scope = 'tenant' AND num_nonnulls(source_id, business_key_digest, event_id) = 0)"
        " OR (scope = 'source' AND source_id IS NOT NULL"
        " AND num_nonnulls(business_key_digest, event_id) = 0)"
        " OR (scope = 'business_key' AND business_key_digest IS NOT NULL"
        " AND num_nonnulls(source_id, event_id) = 0)"
        " OR (scope = 'event' AND event_id IS NOT NULL"
        " AND num_nonnulls(source_id, business_key_digest) = 0)",
        name="scope",
    ),
    Index("ix_legal_holds_active", "tenant_id", postgresql_where=text("released_at IS NULL")),
)
