"""The self-audit's tables (migration 0025): what was owed, what was found, what is fixed.

``callback_intents``: one row per callback a step decided and each endpoint subscribed to
its type (enabled or not) when the step committed, written in that step's transaction: the
record the delivery check compares the deliveries with (``inbox.store.write.intents``).
``invariant_violations``: each violation found, open until a check no longer finds it.
``invariant_watermarks``: per invariant, where the next incremental pass starts.
``invariant_repairs``: a repair proposed for a violation, and its second operator's review.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
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
from sqlalchemy.dialects.postgresql import JSONB

from inbox.domain.invariants import Invariant, RepairKind, RepairStatus
from inbox.store.schema.metadata import metadata, now_column, one_of

callback_intents = Table(
    "callback_intents",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    # The webhook-id the delivery for this endpoint carries (callbacks.delivery_id).
    Column("public_id", Text, nullable=False, unique=True),
    Column("tenant_id", BigInteger, nullable=False),
    Column("endpoint_id", BigInteger, nullable=False),
    # The event whose step decided it (no foreign key: partitioned, and pruned by day).
    Column("event_id", BigInteger),
    Column("step", Text, nullable=False),
    Column("event_type", Text, nullable=False),
    # What the delivery is written from when it is missing (the repair "write a missing
    # delivery as held", migration 0029): its envelope, sealed under the event's data key
    # (``key_id``; NULL: in clear, as the event's payload is), and the delivery's replay
    # number and trace context. NULL ``body``: recorded before intents kept it.
    Column("body", LargeBinary),
    Column("key_id", BigInteger),
    Column("replay", Integer, nullable=False, server_default=text("0")),
    Column("trace_context", Text),
    now_column(),
)

invariant_violations = Table(
    "invariant_violations",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("invariant", Text, nullable=False),
    Column("subject", Text, nullable=False),
    Column("rows", JSONB, nullable=False, server_default=text("'[]'::jsonb")),
    Column("trace_id", Text),
    Column("first_seen_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("last_seen_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("resolved_at", DateTime(timezone=True)),
    CheckConstraint(one_of("invariant", tuple(i.value for i in Invariant)), name="invariant"),
    Index(
        "uq_invariant_violations_open",
        "invariant",
        "subject",
        unique=True,
        postgresql_where=text("resolved_at IS NULL"),
    ),
)

invariant_watermarks = Table(
    "invariant_watermarks",
    metadata,
    Column("invariant", Text, primary_key=True),
    # The lowest ledger id the next incremental pass reads from (new rows since then).
    Column("since_id", BigInteger, nullable=False, server_default=text("0")),
    # The highest id the last pass saw, plus one (``inbox.store.write.audit.next_since``
    # starts the next pass a sixth of an interval before it).
    Column("next_id", BigInteger, nullable=False, server_default=text("0")),
    Column("checked_at", DateTime(timezone=True)),
    Column("full_at", DateTime(timezone=True)),
    # Beat's full pass walks the table a slice (a day) at a time: where it goes on (NULL:
    # no walk under way) and when the walk under way began (what it did not find again
    # since then is resolved at its end).
    Column("full_next", BigInteger),
    Column("full_started_at", DateTime(timezone=True)),
)

invariant_repairs = Table(
    "invariant_repairs",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("public_id", Text, nullable=False, unique=True),
    Column("violation_id", BigInteger, ForeignKey("invariant_violations.id"), nullable=False),
    Column("kind", Text, nullable=False),
    # What the repair will do, as shown to both operators before it is approved.
    Column("preview", JSONB, nullable=False),
    Column("proposed_by", Text, nullable=False),
    Column("status", Text, nullable=False, server_default=text("'awaiting_approval'")),
    Column("reviewer", Text),
    Column("reviewed_at", DateTime(timezone=True)),
    # What it did, and whether the invariant held when checked again right after.
    Column("result", JSONB),
    now_column(),
    CheckConstraint(one_of("kind", tuple(k.value for k in RepairKind)), name="kind"),
    CheckConstraint(one_of("status", tuple(s.value for s in RepairStatus)), name="status"),
)
