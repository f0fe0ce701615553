"""One event or one delivery in full: the rows the API, the console, the CLI and the
evidence bundle show (scoped by ``inbox.store.reads.listing.visible``).

Keys and secrets are not stored at all; the key's digest, the ordering and business key
digests and the stored response body stay inside. ``public()`` is a row as the API shows
it: row ids stay inside, the API speaks public ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import Connection, text

from inbox.domain.records import EventId
from inbox.domain.states import DeliveryState, EventState
from inbox.store.db import sealing
from inbox.store.reads.lanes import LaneState, lane_state
from inbox.store.reads.ledger_reads import (
    COUNTERS,
    KEYS_JOIN,
    bounds_params,
    by_public_id,
    since_event,
)

# Row ids: never shown by the API (``public()``), the CLI or a bundle.
INTERNAL = frozenset({"id", "tenant_id", "source_id", "fence"})


@dataclass(frozen=True, slots=True)
class AuditEntry:
    at: datetime
    actor: str
    action: str


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """An audit row with what it recorded (a replay's number, its attempts before...)."""

    at: datetime
    actor: str
    action: str
    detail: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class DeliveryAttempt:
    at: datetime
    status: int | None
    error_class: str | None
    latency_ms: int | None
    excerpt: str | None


@dataclass(frozen=True, slots=True)
class DeliveryDetail:
    id: int
    public_id: str  # the webhook-id
    tenant: str
    endpoint: str  # the endpoint's public id
    url: str
    event_type: str
    state: DeliveryState
    replay: int
    attempts: int
    last_status: int | None
    last_error: str | None
    created_at: datetime
    finished_at: datetime | None
    attempts_log: tuple[DeliveryAttempt, ...]
    audit: tuple[AuditEntry, ...]

    def __post_init__(self) -> None:  # the column's text, as the enum it is
        object.__setattr__(self, "state", DeliveryState(self.state))

    def public(self) -> dict[str, Any]:
        return _public(self)


@dataclass(frozen=True, slots=True)
class Step:
    name: str
    result: Any  # the step's JSON result, as the playbook returned it
    attempt: int
    replay: int
    completed_at: datetime


@dataclass(frozen=True, slots=True)
class Conflict:
    """Copies of the event's key that came with another body (answered 422)."""

    other_sha256: str
    count: int
    first_at: datetime
    last_at: datetime


@dataclass(frozen=True, slots=True)
class EventDetail:
    id: int
    public_id: str
    tenant_id: int
    source_id: int
    tenant: str
    source: str
    event_type: str | None
    content_type: str
    body: str | None  # the stored bytes as text (undecodable bytes replaced); None once removed
    body_sha256: str  # hex
    headers: dict[str, Any]
    verification: dict[str, Any] | None
    response_status: int
    sync: bool
    state: EventState
    attempts: int
    max_attempts: int
    replay: int
    available_at: datetime
    lease_owner: str | None
    lease_expires_at: datetime | None
    fence: int
    received_at: datetime
    finished_at: datetime | None
    last_error_class: str | None
    last_error_message: str | None
    duplicate_count: int
    first_duplicate_at: datetime | None
    last_duplicate_at: datetime | None
    outcome: str | None
    decision: dict[str, Any] | None
    duplicate_of: str | None  # the public id of the event this one duplicates
    occurred_at: datetime | None
    version: Decimal | None
    newer_event: str | None  # the public id of the newer event that made this one stale
    trace_id: str | None
    trace_context: str | None
    held_reason: str | None
    filter_reason: str | None
    steps: tuple[Step, ...]
    conflicts: tuple[Conflict, ...]
    audit: tuple[AuditRecord, ...]
    deliveries: tuple[DeliveryDetail, ...]
    # Its ordered lane: the quarantined event it waits behind, or how many wait behind it
    # (None: no lane, or neither).
    lane: LaneState | None = None
    # Whether the payload is sealed at rest (inbox.infra.envelope); when its key was
    # destroyed, the erasure: {"at", "by", "erasure"} (body None, headers empty).
    sealed: bool = False
    erased: dict[str, Any] | None = None

    def __post_init__(self) -> None:  # the column's text, as the enum it is
        object.__setattr__(self, "state", EventState(self.state))

    def public(self) -> dict[str, Any]:
        out = _public(self)
        if self.lane is not None:
            out["lane"] = self.lane.public()
        return out


def _public(row: EventDetail | DeliveryDetail) -> dict[str, Any]:
    out = asdict(row)
    for d in out.get("deliveries", ()):
        d.pop("id")
    return {k: v for k, v in out.items() if k not in INTERNAL}


# The event's own columns that an EventDetail carries as they are stored.
_STORED = (
    "id, public_id, tenant_id, source_id, event_type, content_type, body, body_sha256, headers,"
    " key_id, headers_sealed,"
    " verification, response_status, sync, state, attempts, max_attempts, replay, available_at,"
    " lease_owner, lease_expires_at, fence, received_at, finished_at, last_error_class,"
    " last_error_message, outcome, decision, duplicate_of, occurred_at, version,"
    " newer_event_id, trace_id, trace_context, held_reason, filter_reason"
)

# One event by its public id, pruned to its day's partitions, with its key's counters.
EVENT = f"""
SELECT {", ".join("e." + c.strip() for c in _STORED.split(","))}, {COUNTERS},
       {sealing.live("e")} AS key_live,
       t.name AS tenant, s.name AS source
  FROM events e JOIN tenants t ON t.id = e.tenant_id
  JOIN sources s ON s.id = e.source_id {KEYS_JOIN}
 WHERE {by_public_id("e")}
"""

# Another event by its row id, a bound value: one partition is planned (a correlated
# subquery planned every day's partition for one row).
EVENT_PUBLIC_ID = "SELECT public_id FROM events WHERE id = :id"

STEPS = (
    "SELECT name, result, key_id, attempt, replay, completed_at FROM steps WHERE event_id = :id"
    " ORDER BY completed_at, name"
)

CONFLICTS = (
    "SELECT encode(other_body_sha256, 'hex') AS other_sha256, count, first_at, last_at"
    " FROM idempotency_conflicts WHERE event_id = :id"
)

EVENT_AUDIT = (
    "SELECT at, actor, action, detail FROM audit_log"
    " WHERE subject_kind = 'event' AND subject_id = :id ORDER BY id"
)

# One delivery, or an event's deliveries, in full. A plain equality lookup, not the
# list's ORDER BY id DESC LIMIT: under that plan PostgreSQL reads each day's partition
# backwards by id looking for the match, where an equality probes each day's index once.
_DELIVERY = """
SELECT d.id, d.public_id, t.name AS tenant, e.public_id AS endpoint, e.url, d.event_type,
       d.state, d.replay, d.attempts, d.last_status, d.last_error, d.created_at, d.finished_at
  FROM deliveries d JOIN endpoints e ON e.id = d.endpoint_id JOIN tenants t ON t.id = d.tenant_id
 WHERE {where} AND d.id >= :lo
"""
DELIVERY = _DELIVERY.format(where="d.public_id = :p")
EVENT_DELIVERIES = _DELIVERY.format(where="d.event_id = :ev") + " ORDER BY d.id"

# delivery_id is a bound value: the attempts' one partition is chosen when planned
DELIVERY_ATTEMPTS = (
    "SELECT at, status, error_class, latency_ms, excerpt FROM delivery_attempts"
    " WHERE delivery_id = :id ORDER BY id"
)

DELIVERY_AUDIT = (
    "SELECT at, actor, action FROM audit_log WHERE subject_kind = 'delivery'"
    " AND subject_id = :id ORDER BY id"
)


def _public_id(conn: Connection, event_id: EventId | None) -> str | None:
    if event_id is None:
        return None
    found = conn.execute(text(EVENT_PUBLIC_ID), {"id": event_id}).scalar()
    return None if found is None else str(found)


def event(conn: Connection, public_id: str) -> EventDetail | None:
    """Everything that happened to one event, with the deliveries it caused (each with
    its attempts), whatever its tenant (``admin.event_detail`` scopes it)."""
    ev = conn.execute(text(EVENT), bounds_params(public_id)).first()
    if ev is None:
        return None
    m = dict(ev._mapping)
    key_id = m.pop("key_id")
    keys = sealing.for_engine(conn.engine)
    opened = keys.open(
        conn, key_id, m.pop("body"), m["headers"], m.pop("headers_sealed"), m.pop("key_live")
    )
    body, m["headers"] = opened.body, opened.headers
    m["body"] = body.decode("utf-8", "replace") if body is not None else None
    m["sealed"] = key_id is not None
    m["decision"] = None if opened.erased else keys.open_decision(conn, key_id, m["decision"])
    m["erased"] = _erased(conn, key_id) if opened.erased else None
    m["body_sha256"] = bytes(m["body_sha256"]).hex()
    m["duplicate_of"] = _public_id(conn, m["duplicate_of"])
    m["newer_event"] = _public_id(conn, m.pop("newer_event_id"))
    params = {"id": ev.id}
    m["steps"] = _steps(conn, conn.execute(text(STEPS), params).all(), opened.erased)
    m["conflicts"] = tuple(Conflict(**r._mapping) for r in conn.execute(text(CONFLICTS), params))
    m["audit"] = tuple(AuditRecord(**r._mapping) for r in conn.execute(text(EVENT_AUDIT), params))
    m["deliveries"] = event_deliveries(conn, ev.id)
    m["lane"] = lane_state(conn, ev.id)
    return EventDetail(**m)


def _steps(conn: Connection, rows: Sequence[Any], erased: bool) -> tuple[Step, ...]:
    """The step rows, their sealed results opened (None under a destroyed key)."""
    keys = sealing.for_engine(conn.engine)
    results = {r.name: r.result for r in rows}
    sealed = {r.name: r.key_id for r in rows if r.key_id is not None}
    opened = keys.open_steps(conn, results, sealed, erased)
    return tuple(Step(r.name, opened[r.name], r.attempt, r.replay, r.completed_at) for r in rows)


ERASED = (
    "SELECT k.destroyed_at AS at, k.destroyed_by AS by, x.public_id AS erasure"
    " FROM data_keys k LEFT JOIN erasures x ON x.id = k.erasure_id WHERE k.id = :id"
)


def _erased(conn: Connection, key_id: int | None) -> dict[str, Any] | None:
    """When, by whom and by which erasure the key ``key_id`` was destroyed (None: live)."""
    if key_id is None:
        return None
    row = conn.execute(text(ERASED), {"id": key_id}).first()
    if row is None or row.at is None:
        return None
    return {"at": row.at.isoformat(), "by": row.by, "erasure": row.erasure}


def delivery(conn: Connection, public_id: str, since: int = 0) -> DeliveryDetail | None:
    """One delivery by webhook-id (which carries no day: each day's public_id index is
    probed once), with ids at least ``since`` when its event is known."""
    row = conn.execute(text(DELIVERY), {"p": public_id, "lo": since}).first()
    return _with_history(conn, row._mapping) if row is not None else None


def event_deliveries(conn: Connection, event_id: EventId) -> tuple[DeliveryDetail, ...]:
    """The deliveries an event caused, oldest first, each in full; only the partitions
    of the event's day and later are read."""
    rows = conn.execute(text(EVENT_DELIVERIES), {"ev": event_id, "lo": since_event(event_id)})
    return tuple(_with_history(conn, r._mapping) for r in rows.fetchall())


def _with_history(conn: Connection, row: Any) -> DeliveryDetail:
    params = {"id": row["id"]}
    tried = conn.execute(text(DELIVERY_ATTEMPTS), params)
    audit = conn.execute(text(DELIVERY_AUDIT), params)
    return DeliveryDetail(
        **row,
        attempts_log=tuple(DeliveryAttempt(**r._mapping) for r in tried),
        audit=tuple(AuditEntry(**r._mapping) for r in audit),
    )
