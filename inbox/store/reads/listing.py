"""The filters of the event and delivery listings, shared by the listings
(``events.list_events``, ``deliveries.list_deliveries``) and what a bulk replay snapshots
(``inbox.store.write.bulk``); and whether the scope may see one event or delivery.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, Literal, overload

from sqlalchemy import Connection, text

from inbox.domain.records import DeliveryId, EventId, TenantId
from inbox.store.reads import ledger_reads
from inbox.store.reads.scope import Scope, scoped


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


def params(scope: Scope, f: Filter) -> dict[str, Any]:
    return {"scope": scope, **asdict(f)}


EVENTS_WHERE = f"""
  FROM events e JOIN tenants t ON t.id = e.tenant_id JOIN sources s ON s.id = e.source_id
 WHERE {scoped("e.tenant_id")}
   AND (CAST(:tenant AS text) IS NULL OR t.name = :tenant)
   AND (CAST(:source AS text) IS NULL OR s.name = :source)
   AND (CAST(:state AS text) IS NULL OR e.state = :state)
   AND (CAST(:event_type AS text) IS NULL OR e.event_type = :event_type)
   AND (CAST(:since AS timestamptz) IS NULL OR e.received_at >= :since)
   AND (CAST(:until AS timestamptz) IS NULL OR e.received_at < :until)
   AND (CAST(:error_class AS text) IS NULL OR e.last_error_class = :error_class)
   AND (NOT CAST(:untyped AS boolean) OR e.event_type IS NULL)
"""

DELIVERIES_WHERE = f"""
  FROM deliveries d JOIN endpoints ep ON ep.id = d.endpoint_id
  JOIN tenants t ON t.id = d.tenant_id
 WHERE {scoped("d.tenant_id")}
   AND (CAST(:tenant AS text) IS NULL OR t.name = :tenant)
   AND (CAST(:endpoint AS text) IS NULL OR ep.public_id = :endpoint)
   AND (CAST(:state AS text) IS NULL OR d.state = :state)
   AND (CAST(:event_type AS text) IS NULL OR d.event_type = :event_type)
   AND (CAST(:since AS timestamptz) IS NULL OR d.created_at >= :since)
   AND (CAST(:until AS timestamptz) IS NULL OR d.created_at < :until)
   AND (NOT CAST(:untyped AS boolean) OR d.event_type IS NULL)
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


# Keyset pagination over descending id: ``before_id`` is the last id of the previous page,
# so a page costs the same however deep it is, and rows that arrive meanwhile never shift
# what the next page holds.


def where(
    alias: str, scope: Scope, tenant_id: TenantId | None, f: Filter, before_id: int | None
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


@overload
def visible(
    conn: Connection, kind: Literal["events"], public_id: str, scope: Scope
) -> EventId | None: ...
@overload
def visible(
    conn: Connection, kind: Literal["deliveries"], public_id: str, scope: Scope
) -> DeliveryId | None: ...
@overload
def visible(conn: Connection, kind: str, public_id: str, scope: Scope) -> int | None: ...
def visible(conn: Connection, kind: str, public_id: str, scope: Scope) -> int | None:
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
