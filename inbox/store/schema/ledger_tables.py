"""The ledger: dedup keys apart, and the append-only tables partitioned by day.

``event_keys`` is small and not partitioned: one row per live dedup key, pruned by
expiry. Its primary key decides every race (the claim inserts the key ON CONFLICT DO
NOTHING and the event only when the key went in), and a duplicate is answered from it
alone: one HOT update of its counters, no index touched, ``events`` not read.

``events``, ``steps``, ``event_attempts``, ``deliveries`` and ``delivery_attempts`` are
partitioned by RANGE on an id that carries its UTC day (``inbox.domain.ledger``): events
and deliveries by ``id``, the others by their parent's id, so a day's children sit in
partitions with the same bounds as their parent and retention drops a whole day
(``inbox.store.schema.partitions``). An id is made in SQL (``inbox_ledger_id``, the migration
0012) from the statement's clock, so ``received_at`` and the id's day agree.

A unique index of a partitioned table must include the partition key, so ``public_id``
is indexed, not unique: an event's public id carries its day and 64 random bits, a
delivery's is derived from its event, step and endpoint (and written once per step).
A child's foreign key into its parent is kept day by day, not on the table: each day's
partition of ``steps`` and ``event_attempts`` references that day's ``events`` partition,
``delivery_attempts`` that day's ``deliveries`` (``inbox_link_partition``, migration 0014;
the DEFAULT partitions each other). A key into the whole partitioned table is checked by
a generic plan that locks every day's partition for each row it checks. The keys that
would cross days (``deliveries.event_id``, ``effects``, ``idempotency_conflicts``) are
gone: a day of events may be dropped while a later day's delivery or a business effect
that outlives it still names it.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    Numeric,
    Table,
    Text,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB

from inbox.domain.states import DELIVERY_STATES, STATES
from inbox.store.schema.metadata import metadata, now_column, one_of

# The partitioned tables, each with the column that carries its day; parents first.
PARTITIONED: dict[str, str] = {
    "events": "id",
    "steps": "event_id",
    "event_attempts": "event_id",
    "deliveries": "id",
    "delivery_attempts": "delivery_id",
}
# Children before their parents: the order a day's partitions are dropped in.
DROP_ORDER = ("steps", "event_attempts", "events", "delivery_attempts", "deliveries")


def _ledger_id(sequence: str) -> Column[int]:
    return Column(
        "id",
        BigInteger,
        primary_key=True,
        server_default=text(f"inbox_ledger_id('{sequence}'::regclass)"),
    )


def _serial_id(sequence: str) -> Column[int]:
    return Column(
        "id",
        BigInteger,
        primary_key=True,
        server_default=text(f"nextval('{sequence}'::regclass)"),
    )


# fillfactor 75 (set by the migration; SQLAlchemy does not model it): a duplicate's
# counter update finds room on the same page, so it is a HOT update.
event_keys = Table(
    "event_keys",
    metadata,
    Column("tenant_id", BigInteger, primary_key=True),
    Column("source_id", BigInteger, primary_key=True),
    # SHA-256 over (tenant, source, key), never the key itself.
    Column("key_digest", LargeBinary, primary_key=True),
    Column("event_id", BigInteger, nullable=False),
    Column("public_id", Text, nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
    # What a copy is answered with, and the hash that tells a copy from a conflict: the
    # body's match digest (its SHA-256, unless the scheme leaves out fields the provider
    # restamps between retries; events.body_sha256 keeps the raw bytes' SHA-256).
    Column("body_sha256", LargeBinary, nullable=False),
    Column("response_status", Integer, nullable=False),
    Column("response_body", LargeBinary, nullable=False),
    Column("sync", Boolean, nullable=False, server_default=text("false")),
    # Copies counted while the key lives; folded into the event row when it is pruned.
    Column("duplicate_count", Integer, nullable=False, server_default=text("0")),
    Column("first_duplicate_at", DateTime(timezone=True)),
    Column("last_duplicate_at", DateTime(timezone=True)),
    Index("ix_event_keys_expires_at", "expires_at"),
)

events = Table(
    "events",
    metadata,
    _ledger_id("events_id_seq"),
    Column("public_id", Text, nullable=False),
    # No foreign keys to tenants and sources: checked per claimed row, they were a sixth of
    # PostgreSQL's CPU per event; neither table's rows are ever deleted (migration 0016).
    Column("tenant_id", BigInteger, nullable=False),
    Column("source_id", BigInteger, nullable=False),
    # The key's digest while its event_keys row lives (the reads join on it); NULL after.
    Column("key_digest", LargeBinary),
    Column("event_type", Text),
    Column("business_key_digest", LargeBinary),
    # Set (to the business key) when the source processes one business key at a time.
    Column("ordering_key", LargeBinary),
    # Its place in its lane before its id (migration 0031): 0 in receipt order; the
    # provider's occurred_at (epoch seconds) or version where the source names one.
    Column("lane_position", Numeric, nullable=False, server_default=text("0")),
    Column("content_type", Text, nullable=False),
    # The raw body after per-source redaction; NULL once past the source's retention.
    Column("body", LargeBinary),
    # SHA-256 of the body exactly as received (before redaction).
    Column("body_sha256", LargeBinary, nullable=False),
    Column("headers", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    # The data key ``body`` and ``headers_sealed`` are sealed under (inbox.infra.envelope,
    # migration 0026); NULL: stored in clear, ``headers_sealed`` NULL and ``headers`` as is.
    Column("key_id", BigInteger),
    Column("headers_sealed", LargeBinary),
    # How the request was authenticated (inbox.domain.evidence.verdict); NULL before 0019.
    Column("verification", JSONB),
    # The exact answer given to the first delivery (also on the key, for duplicates).
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
    # Copies counted on event_keys while the key lives, added here when it is pruned:
    # readers add the two (inbox.store.reads.ledger_reads).
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
    # The ingest's trace (inbox.infra.tracing), NULL while tracing is off: its id, for
    # search, and the W3C traceparent of the claim's span, which the worker continues.
    Column("trace_id", Text),
    Column("trace_context", Text),
    # Why a received event is not due: its source's playbook is not registered (migration
    # 0018). The sweep of a process that has the playbook clears it (inbox.store.write.queue).
    Column("held_reason", Text),
    # Why the source's filter kept a ``filtered`` event from running (migration 0021);
    # kept after a replay, as the record of what the filter said.
    Column("filter_reason", Text),
    CheckConstraint(one_of("state", STATES), name="state"),
    # A public id carries its day: the lookup names the partition (ledger_reads).
    Index("ix_events_public_id", "public_id"),
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
        "lane_position",
        "id",
        postgresql_where=text("ordering_key IS NOT NULL AND state IN ('received', 'processing')"),
    ),
    Index("ix_events_listing", "tenant_id", "source_id", "state", "id"),
    Index("ix_events_received_at", "received_at"),
    # A tenant's dead letters, newest first: partial, so it costs nothing until an event
    # is quarantined, and a finished day's entries are only its dead letters.
    Index(
        "ix_events_dead_letters",
        "tenant_id",
        "id",
        postgresql_where=text("state = 'quarantined'"),
    ),
    # Search by trace id: partial, so it costs nothing while tracing is off.
    Index("ix_events_trace_id", "trace_id", postgresql_where=text("trace_id IS NOT NULL")),
    # An erasure's events: those sealed under its keys (holds, unfinished ones, the count).
    Index("ix_events_key_id", "key_id", postgresql_where=text("key_id IS NOT NULL")),
    # Held events: empty unless a source's playbook is missing.
    Index(
        "ix_events_held",
        "source_id",
        "id",
        postgresql_where=text("held_reason IS NOT NULL"),
    ),
    postgresql_partition_by="RANGE (id)",
)

# The workers' claim names events with ``id >= floor``, so PostgreSQL plans it over the
# days that can hold unfinished events, not over a year of partitions. One row: at most
# the lowest id of an unfinished event. A replay (the only way a finished event becomes
# unfinished) lowers it in its own statement; the sweep raises it (inbox.store.write.queue).
ledger_floor = Table(
    "ledger_floor",
    metadata,
    Column("singleton", Boolean, primary_key=True, server_default=text("true")),
    Column("floor", BigInteger, nullable=False),
    CheckConstraint("singleton", name="singleton"),
)

idempotency_conflicts = Table(
    "idempotency_conflicts",
    metadata,
    Column("event_id", BigInteger, primary_key=True),
    Column("other_body_sha256", LargeBinary, primary_key=True),
    Column("count", Integer, nullable=False, server_default=text("1")),
    Column("first_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("last_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
)

steps = Table(
    "steps",
    metadata,
    Column("event_id", BigInteger, primary_key=True),  # its day's events (see the top)
    Column("name", Text, primary_key=True),
    Column("result", JSONB),
    # Set: ``result`` is a JSON string, the base64 of the result sealed under this data key
    # (its event's, inbox.store.db.sealing); NULL: stored in clear.
    Column("key_id", BigInteger),
    Column("attempt", Integer, nullable=False),
    # The event's replay number when the step ran (0: the original processing).
    Column("replay", Integer, nullable=False, server_default=text("0")),
    Column("completed_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    postgresql_partition_by="RANGE (event_id)",
)

# Every failed run of an event (retried or quarantined), kept across replays: the
# events row holds only the latest error. The traceback is a redacted excerpt
# (inbox.domain.failures), never locals or source text.
event_attempts = Table(
    "event_attempts",
    metadata,
    Column("event_id", BigInteger, primary_key=True),  # its day's events (see the top)
    _serial_id("event_attempts_id_seq"),
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
    postgresql_partition_by="RANGE (event_id)",
)

# Business-level effects declared "once per business key": the first event wins. The
# record outlives its event's day: a later event with the same business key must still
# find the effect done.
effects = Table(
    "effects",
    metadata,
    Column("tenant_id", BigInteger, ForeignKey("tenants.id"), primary_key=True),
    Column("name", Text, primary_key=True),
    Column("business_key_digest", LargeBinary, primary_key=True),
    Column("event_id", BigInteger, nullable=False),
    now_column(),
)


# Ordered lanes (truth 15): an event of a lane (``events.ordering_key``) that is quarantined
# blocks the lane's later events until an operator replays it (the row goes, in the same
# transaction: the trigger of migration 0024) or skips it (``skipped_at``, audited). One row
# per blocking event, written by that trigger on every path into quarantine, so the
# claim's check is one primary-key probe (``inbox.store.write.queue._DUE``). Not
# partitioned, small (one row per dead letter of an ordered source), and it outlives the
# blocker's day: the lane's position is the event id (its receipt order), so
# ``event_id`` and the lane say which events were held behind it.
lane_blocks = Table(
    "lane_blocks",
    metadata,
    Column("tenant_id", BigInteger, primary_key=True),
    Column("lane", LargeBinary, primary_key=True),
    Column("event_id", BigInteger, primary_key=True),
    Column("since", DateTime(timezone=True), nullable=False, server_default=func.now()),
    # A skip asked for by one operator, awaiting a second (more events waited behind it
    # than INBOX_LANE_SKIP_APPROVAL_ABOVE), then the skip itself.
    Column("skip_requested_by", Text),
    Column("skip_requested_at", DateTime(timezone=True)),
    Column("skip_reason", Text),
    Column("skipped_by", Text),
    Column("skipped_at", DateTime(timezone=True)),
    Index("ix_lane_blocks_event_id", "event_id"),
)


deliveries = Table(
    "deliveries",
    metadata,
    _ledger_id("deliveries_id_seq"),
    # The webhook-id: the same on every attempt and replay.
    Column("public_id", Text, nullable=False),
    Column("tenant_id", BigInteger, ForeignKey("tenants.id"), nullable=False),
    Column("endpoint_id", BigInteger, ForeignKey("endpoints.id"), nullable=False),
    # No foreign key: a delivery is made on its own day, maybe after its event's.
    Column("event_id", BigInteger),
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
    now_column(),
    Column("finished_at", DateTime(timezone=True)),
    # The W3C traceparent of the step that made it: each attempt is a span of that trace.
    Column("trace_context", Text),
    CheckConstraint(one_of("state", DELIVERY_STATES), name="state"),
    Index("ix_deliveries_public_id", "public_id"),
    Index("ix_deliveries_event_id", "event_id"),
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
    # An ordered endpoint's unfinished deliveries by id: its claim takes the head
    # (inbox.store.write.ordered; migration 0027).
    Index(
        "ix_deliveries_unfinished",
        "endpoint_id",
        "id",
        postgresql_where=text("state IN ('pending', 'sending')"),
    ),
    # A paused or disabled endpoint's deliveries, released in order (migration 0023).
    Index(
        "ix_deliveries_held",
        "endpoint_id",
        "id",
        postgresql_where=text("state = 'held'"),
    ),
    postgresql_partition_by="RANGE (id)",
)

delivery_attempts = Table(
    "delivery_attempts",
    metadata,
    Column("delivery_id", BigInteger, primary_key=True),  # its day's deliveries (see the top)
    _serial_id("delivery_attempts_id_seq"),
    Column("at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("status", Integer),
    Column("error_class", Text),
    Column("latency_ms", Integer, nullable=False),
    # A short excerpt of the answer, redacted of anything that looks like a credential.
    Column("excerpt", Text),
    postgresql_partition_by="RANGE (delivery_id)",
)
