"""Reading an event's stored response back (synchronous mode)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, text

from inbox.store.db import sealing


@dataclass(frozen=True, slots=True)
class StoredResponse:
    state: str
    status: int
    body: bytes


STORED_RESPONSE = text(
    "SELECT state, response_status, response_body, "
    + sealing.live("e")
    + " AS key_live FROM events e WHERE id = :id"
)


def stored_response(conn: Connection, event_id: int) -> StoredResponse:
    """The answer as stored, opened where it is sealed (empty once its key was erased)."""
    row = conn.execute(STORED_RESPONSE, {"id": event_id}).one()
    body = sealing.for_engine(conn.engine).open_tagged(
        bytes(row.response_body), sealing.RESPONSE, row.key_live
    )
    return StoredResponse(row.state, row.response_status, body or b"")
