"""Reading events back: the stored response (synchronous mode) and the operator's views."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, select

from inbox.store.schema.tables import events


@dataclass(frozen=True, slots=True)
class StoredResponse:
    state: str
    status: int
    body: bytes


def stored_response(conn: Connection, event_id: int) -> StoredResponse:
    row = conn.execute(
        select(events.c.state, events.c.response_status, events.c.response_body).where(
            events.c.id == event_id
        )
    ).one()
    return StoredResponse(row.state, row.response_status, bytes(row.response_body))
