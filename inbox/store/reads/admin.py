"""What the admin API reads: filtered listings with keyset cursors, and details.

Every query takes ``scope``: the tenant id a token is limited to, or None for a
token that sees every tenant. An event or delivery outside the scope is treated
exactly as one that does not exist. The same filter clauses choose what a bulk
replay snapshots (``inbox.store.write.bulk``). Rows are frozen: ``EventSummary`` and
``DeliverySummary`` here, an event or a delivery in full in ``inbox.store.reads.detail``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, text

from inbox.store.reads import detail, ledger_reads
from inbox.store.reads.detail import DeliveryDetail, EventDetail


@dataclass(frozen=True, slots=True)
class Filter:
    tenant: str | None = None
    source: str | None = None  # events only
    endpoint: str | None = None  # deliveries only
    state: str | None = None
    event_type: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    error_class: str | None = None  # events only: the last error's class
    untyped: bool = False  # only rows without an event type (a dead-letter group's key)


@dataclass(frozen=True, slots=True)
class EventSummary:
    """An event as a listing shows it."""

    id: int
    public_id: str
    tenant: str
    source: str
    event_type: str | None
    state: str
    attempts: int
    replay: int
    received_at: datetime
    finished_at: datetime | None
    outcome: str | None
    last_error_class: str | None
    duplicate_count: int

    def public(self) -> dict[str, Any]:
        """As the API shows it: the row id stays inside."""
        return {k: v for k, v in asdict(self).items() if k != "id"}


@dataclass(frozen=True, slots=True)
class DeliverySummary:
    """A delivery as a listing shows it."""

    id: int
    public_id: str  # the webhook-id
    tenant: str
    endpoint: str  # the endpoint's public id
    url: str
    event_type: str
    state: str
    replay: int
    attempts: int
    last_status: int | None
    last_error: str | None
    created_at: datetime
    finished_at: datetime | None
    event: str | None  # the public id of the event it calls back about

    def public(self) -> dict[str, Any]:
        """As the API shows it: the row id stays inside."""
        return {k: v for k, v in asdict(self).items() if k != "id"}


def params(scope: int | None, f: Filter) -> dict[str, Any]:
    return {"scope": scope, **asdict(f)}


EVENTS_WHERE = """
  FROM events e JOIN tenants t ON t.id = e.tenant_id JOIN sources s ON s.id = e.source_id
 WHERE (CAST(:scope AS bigint) IS NULL OR e.tenant_id = :scope)
   AND (CAST(:tenant AS text) IS NULL OR t.name = :tenant)
   AND (CAST(:source AS text) IS NULL OR s.name = :source)
   AND (CAST(:state AS text) IS NULL OR e.state = :state)
   AND (CAST(:event_type AS text) IS NULL OR e.event_type = :event_type)
   AND (CAST(:since AS timestamptz) IS NULL OR e.received_at >= :since)
   AND (CAST(:until AS timestamptz) IS NULL OR e.received_at < :until)
   AND (CAST(:error_class AS text) IS NULL OR e.last_error_class = :error_class)
   AND (NOT CAST(:untyped AS boolean) OR e.event_type IS NULL)
"""

DELIVERIES_WHERE = """
  FROM deliveries d JOIN endpoints ep ON ep.id = d.endpoint_id
  JOIN tenants t ON t.id = d.tenant_id
 WHERE (CAST(:scope AS bigint) IS NULL OR d.tenant_id = :scope)
   AND (CAST(:tenant AS text) IS NULL OR t.name = :tenant)
   AND (CAST(:endpoint AS text) IS NULL OR ep.public_id = :endpoint)
   AND (CAST(:state AS text) IS NULL OR d.state = :state)
   AND (CAST(:event_type AS text) IS NULL OR d.event_type = :event_type)
   AND (CAST(:since AS timestamptz) IS NULL OR d.created_at >= :since)
   AND (CAST(:until AS timestamptz) IS NULL OR d.created_at < :until)
   AND (NOT CAST(:untyped AS boolean) OR d.event_type IS NULL)
"""

# Keyset pagination over descending id: ``before_id`` is the last id of the
# previous page, so a page costs the same however deep it is, and rows that
# arrive meanwhile never shift what the next page holds.
_PAGE = """
   AND (CAST(:before_id AS bigint) IS NULL OR {alias}.id < :before_id)
 ORDER BY {alias}.id DESC
 LIMIT :limit
"""

# What a list shows; its WHERE is made by ``_where``.
_EVENTS = (
    """
SELECT e.id, e.public_id, t.name AS tenant, s.name AS source, e.event_type, e.state,
       e.attempts, e.replay, e.received_at, e.finished_at, e.outcome, e.last_error_class,"""
    + ledger_reads.DUPLICATE_COUNT
    + " FROM events e JOIN tenants t ON t.id = e.tenant_id JOIN sources s ON s.id = e.source_id"
)

_DELIVERIES = """
SELECT d.id, d.event_id, d.public_id, t.name AS tenant, ep.public_id AS endpoint, ep.url,
       d.event_type, d.state, d.replay, d.attempts, d.last_status, d.last_error, d.created_at,
       d.finished_at
  FROM deliveries d JOIN endpoints ep ON ep.id = d.endpoint_id JOIN tenants t ON t.id = d.tenant_id
"""

# A list's conditions are only the filters it was given, each on the ledger table's own
# columns, so an index on them serves it: the tenant's name is resolved to its id first
# (``ledger_reads.tenant_id``), and a dead-letter state is written into the text, so a
# partial index ``WHERE state = 'quarantined'`` matches the query even under the generic
# plan a prepared statement gets after a few runs (a tenant's failed deliveries have
# ``ix_deliveries_listing`` on (tenant_id, state, id)).
_COLUMNS = {
    "e": {
        "source": "s.name",
        "state": "e.state",
        "event_type": "e.event_type",
        "error_class": "e.last_error_class",
    },
    "d": {"endpoint": "ep.public_id", "state": "d.state", "event_type": "d.event_type"},
}
_TIME = {"e": "e.received_at", "d": "d.created_at"}
_DEAD = {"e": "quarantined", "d": "failed"}


def _where(
    alias: str, scope: int | None, tenant_id: int | None, f: Filter, before_id: int | None
) -> tuple[str, dict[str, Any]]:
    conds: list[str] = []
    bound: dict[str, Any] = {}
    for name, value in (("scope", scope), ("tenant_id", tenant_id)):
        if value is not None:
            conds.append(f"{alias}.tenant_id = :{name}")
            bound[name] = value
    for name, column in _COLUMNS[alias].items():
        value = getattr(f, name)
        if value is None:
            continue
        if name == "state" and value == _DEAD[alias]:
            conds.append(f"{column} = '{_DEAD[alias]}'")  # a constant of ours, not input
        else:
            conds.append(f"{column} = :{name}")
            bound[name] = value
    if f.untyped:
        conds.append(f"{alias}.event_type IS NULL")
    if f.since is not None:
        conds.append(f"{_TIME[alias]} >= :since")
        bound["since"] = f.since
    if f.until is not None:
        conds.append(f"{_TIME[alias]} < :until")
        bound["until"] = f.until
    if before_id is not None:
        conds.append(f"{alias}.id < :before_id")
        bound["before_id"] = before_id
    where = " WHERE " + " AND ".join(conds) if conds else ""
    return where + f" ORDER BY {alias}.id DESC LIMIT :limit", bound


def list_events(
    conn: Connection, scope: int | None, f: Filter, limit: int, before_id: int | None
) -> list[EventSummary]:
    where, bound = _where("e", scope, ledger_reads.tenant_id(conn, f.tenant), f, before_id)
    rows = conn.execute(text(_EVENTS + where), {**bound, "limit": limit})
    return [EventSummary(**r._mapping) for r in rows]


def list_deliveries(
    conn: Connection, scope: int | None, f: Filter, limit: int, before_id: int | None
) -> list[DeliverySummary]:
    where, bound = _where("d", scope, ledger_reads.tenant_id(conn, f.tenant), f, before_id)
    rows = conn.execute(text(_DELIVERIES + where), {**bound, "limit": limit}).fetchall()
    # The events' public ids by their ids, a list of constants: PostgreSQL picks their
    # days' partitions when it plans (a correlated subquery planned every partition).
    ids = sorted({r.event_id for r in rows if r.event_id is not None})
    names: dict[int, str] = {}
    if ids:
        found = conn.execute(
            text("SELECT id, public_id FROM events WHERE id = ANY(CAST(:ids AS bigint[]))"),
            {"ids": ids},
        )
        names = {int(r.id): r.public_id for r in found}
    return [
        DeliverySummary(
            **{k: v for k, v in r._mapping.items() if k != "event_id"}, event=names.get(r.event_id)
        )
        for r in rows
    ]


def visible(conn: Connection, kind: str, public_id: str, scope: int | None) -> int | None:
    """The row id of an event or delivery the scope may see, else None."""
    table = {"events": "events", "deliveries": "deliveries"}[kind]
    if kind == "events":  # the id's day names its partitions
        where, bound = ledger_reads.by_public_id(table), ledger_reads.bounds_params(public_id)
    else:  # a delivery's webhook-id carries no day: one probe per day's index
        where, bound = f"{table}.public_id = :p", {"p": public_id}
    row = conn.execute(text(f"SELECT id, tenant_id FROM {table} WHERE {where}"), bound).first()
    if row is None or (scope is not None and row.tenant_id != scope):
        return None
    return int(row.id)


def event_detail(conn: Connection, public_id: str, scope: int | None) -> EventDetail | None:
    """One event in full, with the deliveries it caused (each with its attempts)."""
    if visible(conn, "events", public_id, scope) is None:
        return None
    return detail.event(conn, public_id)


def delivery_detail(conn: Connection, public_id: str, scope: int | None) -> DeliveryDetail | None:
    if visible(conn, "deliveries", public_id, scope) is None:
        return None
    return detail.delivery(conn, public_id)
