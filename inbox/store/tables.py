"""The schema, as SQLAlchemy Core tables. Migrations create exactly this; a test checks it."""

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
    MetaData,
    Numeric,
    Table,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB

from inbox.domain.states import DeliveryState, EventState

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)


def _one_of(column: str, values: tuple[str, ...]) -> str:
    """A CHECK that ``column`` holds one of ``values`` (the states, spelled in states.py)."""
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def _now() -> Column[object]:
    return Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now())


tenants = Table(
    "tenants",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("name", Text, nullable=False, unique=True),
    Column("disabled", Boolean, nullable=False, server_default=text("false")),
    _now(),
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
    _now(),
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
    _now(),
    Column("revoked_at", DateTime(timezone=True)),
    CheckConstraint("secret LIKE 'fernet:%'", name="encrypted"),
)

STATES = tuple(s.value for s in EventState)

events = Table(
    "events",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("public_id", Text, nullable=False, unique=True),
    Column("tenant_id", BigInteger, ForeignKey("tenants.id"), nullable=False),
    Column("source_id", BigInteger, ForeignKey("sources.id"), nullable=False),
    # SHA-256 over (tenant, source, key); NULL once the key's window has passed.
    Column("key_digest", LargeBinary),
    Column("key_expires_at", DateTime(timezone=True)),
    Column("event_type", Text),
    Column("business_key_digest", LargeBinary),
    # Set (to the business key) when the source processes one business key at a time.
    Column("ordering_key", LargeBinary),
    Column("content_type", Text, nullable=False),
    # The raw body after per-source redaction; NULL once past the source's retention.
    Column("body", LargeBinary),
    # SHA-256 of the body exactly as received (before redaction).
    Column("body_sha256", LargeBinary, nullable=False),
    Column("headers", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    # The exact answer given to the first delivery, replayed to duplicates.
    Column("response_status", Integer, nullable=False),
    Column("response_body", LargeBinary, nullable=False),
    Column("sync", Boolean, nullable=False, server_default=text("false")),
    Column("state", Text, nullable=False, server_default=text("'received'")),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    Column("max_attempts", Integer, nullable=False, server_default=text("5")),
    # 0 for the original; each operator replay adds one (attempts restart, history stays).
    Column("replay", Integer, nullable=False, server_default=text("0")),
    Column("available_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("lease_owner", Text),
    Column("lease_expires_at", DateTime(timezone=True)),
    # Fencing token: bumped by every claim; every write that advances the event checks it.
    Column("fence", BigInteger, nullable=False, server_default=text("0")),
    Column("received_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("finished_at", DateTime(timezone=True)),
    Column("last_error_class", Text),
    Column("last_error_message", Text),
    Column("duplicate_count", Integer, nullable=False, server_default=text("0")),
    Column("first_duplicate_at", DateTime(timezone=True)),
    Column("last_duplicate_at", DateTime(timezone=True)),
    Column("outcome", Text),
    Column("decision", JSONB),
    Column("duplicate_of", BigInteger),
    # Stale events (inbox.domain.ordering): the provider's time or version of the event,
    # written when a worker judges it, and the newer completed event it yielded to.
    Column("occurred_at", DateTime(timezone=True)),
    Column("version", Numeric),
    Column("newer_event_id", BigInteger),
    CheckConstraint(_one_of("state", STATES), name="state"),
    # Every uniqueness key includes the tenant.
    Index(
        "uq_events_dedup",
        "tenant_id",
        "source_id",
        "key_digest",
        unique=True,
        postgresql_where=text("key_digest IS NOT NULL"),
    ),
    # Draining: due events per tenant, oldest first.
    Index(
        "ix_events_due",
        "tenant_id",
        "available_at",
        "id",
        postgresql_where=text("state = 'received'"),
    ),
    Index(
        "ix_events_leases",
        "lease_expires_at",
        postgresql_where=text("state = 'processing'"),
    ),
    Index("ix_events_business_key", "tenant_id", "business_key_digest", "id"),
    Index(
        "ix_events_ordering",
        "tenant_id",
        "ordering_key",
        "id",
        postgresql_where=text("ordering_key IS NOT NULL AND state IN ('received', 'processing')"),
    ),
    Index("ix_events_listing", "tenant_id", "source_id", "state", "id"),
    Index("ix_events_received_at", "received_at"),
)

idempotency_conflicts = Table(
    "idempotency_conflicts",
    metadata,
    Column("event_id", BigInteger, ForeignKey("events.id", ondelete="CASCADE"), primary_key=True),
    Column("other_body_sha256", LargeBinary, primary_key=True),
    Column("count", Integer, nullable=False, server_default=text("1")),
    Column("first_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("last_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
)

steps = Table(
    "steps",
    metadata,
    Column("event_id", BigInteger, ForeignKey("events.id", ondelete="CASCADE"), primary_key=True),
    Column("name", Text, primary_key=True),
    Column("result", JSONB),
    Column("attempt", Integer, nullable=False),
    # The event's replay number when the step ran (0: the original processing).
    Column("replay", Integer, nullable=False, server_default=text("0")),
    Column("completed_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
)

# Every failed run of an event (retried or quarantined), kept across replays: the
# events row holds only the latest error. The traceback is a redacted excerpt
# (inbox.domain.failures), never locals or source text.
event_attempts = Table(
    "event_attempts",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column(
        "event_id",
        BigInteger,
        ForeignKey("events.id", ondelete="CASCADE"),
        nullable=False,
        index=True,
    ),
    Column("at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("attempt", Integer, nullable=False),
    # The playbook step that raised; NULL when it failed before any step ran.
    Column("step", Text),
    Column("error_class", Text, nullable=False),
    Column("error_message", Text),
    Column("traceback", Text),
    Column("outcome", Text, nullable=False),
    CheckConstraint("outcome IN ('retry', 'quarantined')", name="outcome"),
    # The console's per-source failure counts read the last day's rows.
    Index("ix_event_attempts_at", "at"),
)

# Business-level effects declared "once per business key": the first event wins.
effects = Table(
    "effects",
    metadata,
    Column("tenant_id", BigInteger, ForeignKey("tenants.id"), primary_key=True),
    Column("name", Text, primary_key=True),
    Column("business_key_digest", LargeBinary, primary_key=True),
    Column("event_id", BigInteger, ForeignKey("events.id", ondelete="CASCADE"), nullable=False),
    _now(),
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
    Column("enabled", Boolean, nullable=False, server_default=text("true")),
    Column("disabled_reason", Text),
    Column("max_attempts", Integer, nullable=False, server_default=text("4")),
    # Seconds before each retry; the last value repeats. Jitter is added.
    Column("retry_schedule", ARRAY(Integer), nullable=False, server_default=text("'{5,30,120}'")),
    Column("timeout_ms", Integer, nullable=False, server_default=text("5000")),
    Column("max_in_flight", Integer, nullable=False, server_default=text("4")),
    # Unreachable at its last attempt: one courier at a time until it answers again.
    Column("failing", Boolean, nullable=False, server_default=text("false")),
    _now(),
)

endpoint_secrets = Table(
    "endpoint_secrets",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("endpoint_id", BigInteger, ForeignKey("endpoints.id"), nullable=False, index=True),
    Column("secret", Text, nullable=False),  # encrypted, as source_secrets.secret
    _now(),
    Column("revoked_at", DateTime(timezone=True)),
    CheckConstraint("secret LIKE 'fernet:%'", name="encrypted"),
)

DELIVERY_STATES = tuple(s.value for s in DeliveryState)

deliveries = Table(
    "deliveries",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    # The webhook-id: the same on every attempt and replay.
    Column("public_id", Text, nullable=False, unique=True),
    Column("tenant_id", BigInteger, ForeignKey("tenants.id"), nullable=False),
    Column("endpoint_id", BigInteger, ForeignKey("endpoints.id"), nullable=False),
    Column("event_id", BigInteger, ForeignKey("events.id", ondelete="CASCADE")),
    Column("event_type", Text, nullable=False),
    # The envelope, fixed when the delivery is created (created_at included).
    Column("body", LargeBinary, nullable=False),
    Column("state", Text, nullable=False, server_default=text("'pending'")),
    # The event's replay number when the step that made it ran: sent as webhook-replay.
    Column("replay", Integer, nullable=False, server_default=text("0")),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    Column("available_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("lease_owner", Text),
    Column("lease_expires_at", DateTime(timezone=True)),
    Column("fence", BigInteger, nullable=False, server_default=text("0")),
    Column("last_status", Integer),
    Column("last_error", Text),
    _now(),
    Column("finished_at", DateTime(timezone=True)),
    CheckConstraint(_one_of("state", DELIVERY_STATES), name="state"),
    Index(
        "ix_deliveries_due",
        "endpoint_id",
        "available_at",
        "id",
        postgresql_where=text("state = 'pending'"),
    ),
    Index(
        "ix_deliveries_sending",
        "endpoint_id",
        "lease_expires_at",
        postgresql_where=text("state = 'sending'"),
    ),
    Index("ix_deliveries_listing", "tenant_id", "state", "id"),
)

delivery_attempts = Table(
    "delivery_attempts",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column(
        "delivery_id",
        BigInteger,
        ForeignKey("deliveries.id", ondelete="CASCADE"),
        nullable=False,
        index=True,
    ),
    Column("at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("status", Integer),
    Column("error_class", Text),
    Column("latency_ms", Integer, nullable=False),
    # A short excerpt of the answer, redacted of anything that looks like a credential.
    Column("excerpt", Text),
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
    _now(),
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
    _now(),
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
    _now(),
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
