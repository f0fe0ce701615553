"""How many events wait (received or processing): for the receiver's overload guard."""

from __future__ import annotations

from sqlalchemy import Connection, text


def pending_count(conn: Connection, cap: int) -> int:
    """Events received or processing, counted up to ``cap`` (past it the exact number does
    not matter, and the count stays cheap however deep the inbox is)."""
    return int(
        conn.execute(
            text(
                "SELECT count(*) FROM (SELECT 1 FROM events"
                " WHERE state IN ('received', 'processing') LIMIT :cap) s"
            ),
            {"cap": cap},
        ).scalar_one()
    )
