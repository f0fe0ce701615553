"""Legal holds as the API, the console, the CLI and retention read them: one hold, the
holds of a tenant, the holds that cover an event (``inbox.store.schema.holds``)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, text

from inbox.domain.holds import Hold
from inbox.domain.records import EventId
from inbox.store.reads.scope import Scope, scoped
from inbox.store.schema.holds import covering


def holding(conn: Connection, event_id: EventId) -> list[str]:
    """The public ids of the active holds that cover one event (empty: it is not held)."""
    rows = conn.execute(
        text(f"SELECT h.public_id FROM events e, {covering('e')} AND e.id = :id ORDER BY h.id"),
        {"id": event_id},
    )
    return [str(r.public_id) for r in rows]


_HOLD = """
    SELECT h.id, h.public_id, t.name AS tenant, h.scope, h.reason, h.placed_by, h.created_at,
           h.release_requested_by, h.released_by, h.released_at, h.event_public_id,
           s.name AS source
      FROM legal_holds h JOIN tenants t ON t.id = h.tenant_id
      LEFT JOIN sources s ON s.id = h.source_id
"""


def _hold(row: Any) -> Hold:
    subject = {
        "tenant": row.tenant,
        "source": f"{row.tenant}/{row.source}",
        "business_key": f"{row.tenant}: a business key",
        "event": row.event_public_id or "",
    }[row.scope]
    return Hold(
        row.id,
        row.public_id,
        row.tenant,
        row.scope,
        subject,
        row.reason,
        row.placed_by,
        row.created_at,
        row.release_requested_by,
        row.released_by,
        row.released_at,
    )


def _get(conn: Connection, where: str, params: dict[str, Any]) -> Hold | None:
    row = conn.execute(text(f"{_HOLD} WHERE {where}"), params).first()
    return None if row is None else _hold(row)


def by_id(conn: Connection, hold_id: int) -> Hold | None:
    """A hold by its row id (for the commands, which just wrote it)."""
    return _get(conn, "h.id = :id", {"id": hold_id})


def get(conn: Connection, public_id: str, scope: Scope = None) -> Hold | None:
    """A hold the tenant scope may see (None: every tenant)."""
    return _get(
        conn,
        f"h.public_id = :p AND {scoped('h.tenant_id')}",
        {"p": public_id, "scope": scope},
    )


def listing(conn: Connection, scope: Scope = None, include_released: bool = False) -> list[Hold]:
    rows = conn.execute(
        text(
            f"{_HOLD} WHERE {scoped('h.tenant_id')}"
            " AND (:all OR h.released_at IS NULL) ORDER BY h.id"
        ),
        {"scope": scope, "all": include_released},
    )
    return [_hold(r) for r in rows]
