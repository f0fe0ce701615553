"""Reading an event's stored response back (synchronous mode)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, text


@dataclass(frozen=True, slots=True)
class StoredResponse:
    state: str
    status: int
    body: bytes


STORED_RESPONSE = text("SELECT state, response_status, response_body FROM events WHERE id = :id")


def stored_response(conn: Connection, event_id: int) -> StoredResponse:
    row = conn.execute(STORED_RESPONSE, {"id": event_id}).one()
    return StoredResponse(row.state, row.response_status, bytes(row.response_body))
