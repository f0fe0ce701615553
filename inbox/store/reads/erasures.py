"""Erasures as the API, the console and the CLI read them: one, or a tenant's, newest first."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, text

from inbox.domain.erasure import Erasure
from inbox.store.reads.ledger_reads import event_bounds
from inbox.store.reads.scope import Scope, scoped

_ERASURE = """
    SELECT x.id, x.public_id, t.name AS tenant, x.scope, x.reason, x.status, x.requested_by,
           x.requested_at, x.approved_by, x.done_at, x.keys_destroyed, x.events
      FROM erasures x JOIN tenants t ON t.id = x.tenant_id
"""


def _erasure(row: Any) -> Erasure:
    return Erasure(**row._mapping)


def by_id(conn: Connection, erasure_id: int) -> Erasure | None:
    row = conn.execute(text(f"{_ERASURE} WHERE x.id = :id"), {"id": erasure_id}).first()
    return None if row is None else _erasure(row)


def get(conn: Connection, public_id: str, scope: Scope) -> Erasure | None:
    """One erasure by its public id (of tenant ``scope``; None: any tenant)."""
    row = conn.execute(
        text(f"{_ERASURE} WHERE x.public_id = :p AND {scoped('x.tenant_id')}"),
        {"p": public_id, "scope": scope},
    ).first()
    return None if row is None else _erasure(row)


def listing(conn: Connection, scope: Scope, limit: int = 100) -> list[Erasure]:
    """The newest erasures (of tenant ``scope``; None: every tenant)."""
    rows = conn.execute(
        text(f"{_ERASURE} WHERE {scoped('x.tenant_id')} ORDER BY x.id DESC LIMIT :n"),
        {"scope": scope, "n": limit},
    )
    return [_erasure(r) for r in rows]


# An event's erasure: its key destroyed in the registry (one partition, by the event's day).
_OF_EVENT = text(
    """
    SELECT x.public_id AS erasure, k.destroyed_at AS at, k.destroyed_by AS by
      FROM events e JOIN data_keys k ON k.id = e.key_id
      LEFT JOIN erasures x ON x.id = k.erasure_id
     WHERE e.public_id = :p AND e.id >= :lo AND e.id < :hi AND k.destroyed_at IS NOT NULL
    """
)


@dataclass(frozen=True, slots=True)
class ErasedPayload:
    """An event's payload erased: by which erasure (None: its key destroyed by hand), when,
    by whom."""

    erasure: str | None
    at: datetime
    by: str | None


def of_event(conn: Connection, public_id: str) -> ErasedPayload | None:
    """When, by whom and by which erasure event ``public_id``'s payload was erased; None
    where it was not."""
    lo, hi = event_bounds(public_id)
    row = conn.execute(_OF_EVENT, {"p": public_id, "lo": lo, "hi": hi}).first()
    return None if row is None else ErasedPayload(row.erasure, row.at, row.by)
