"""Console sessions held on the server (table ``console_sessions``).

The browser holds a random id (256 bits); the table holds its SHA-256 only. A session
lives while its token is live, it was seen within the idle limit and began within the
absolute limit; signing out deletes it.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, text

# last_seen_at is written at most this often per session, so reading a page is not a write.
TOUCH_SECONDS = 60


@dataclass(frozen=True)
class StoredSession:
    id: int
    token_id: int
    data: dict[str, Any]
    stale: bool  # last seen more than TOUCH_SECONDS ago: touch it


def digest(sid: str) -> bytes:
    return hashlib.sha256(sid.encode()).digest()


def create(conn: Connection, token_id: int, data: dict[str, Any]) -> tuple[str, int]:
    """A new session for a token: its id for the cookie, and its row id."""
    sid = secrets.token_urlsafe(32)
    row_id = conn.execute(
        text(
            "INSERT INTO console_sessions (sid_digest, token_id, data)"
            " VALUES (:d, :t, CAST(:data AS jsonb)) RETURNING id"
        ),
        {"d": digest(sid), "t": token_id, "data": _json(data)},
    ).scalar_one()
    return sid, int(row_id)


def load(conn: Connection, sid: str, idle_seconds: int, max_seconds: int) -> StoredSession | None:
    """The live session with this id, or None (unknown, expired, or its token revoked)."""
    row = conn.execute(
        text(
            "SELECT s.id, s.token_id, s.data,"
            " s.last_seen_at < now() - make_interval(secs => :touch) AS stale"
            " FROM console_sessions s JOIN api_tokens k ON k.id = s.token_id"
            " WHERE s.sid_digest = :d AND k.revoked_at IS NULL"
            " AND s.last_seen_at > now() - make_interval(secs => :idle)"
            " AND s.created_at > now() - make_interval(secs => :max)"
        ),
        {"d": digest(sid), "idle": idle_seconds, "max": max_seconds, "touch": TOUCH_SECONDS},
    ).first()
    if row is None:
        return None
    return StoredSession(row.id, row.token_id, dict(row.data), bool(row.stale))


def save(conn: Connection, row_id: int, data: dict[str, Any] | None, touch: bool) -> None:
    """Write the session's data (None: unchanged) and/or note it was seen now."""
    sets = []
    params: dict[str, Any] = {"id": row_id}
    if data is not None:
        sets.append("data = CAST(:data AS jsonb)")
        params["data"] = _json(data)
    if touch:
        sets.append("last_seen_at = now()")
    if sets:
        conn.execute(text(f"UPDATE console_sessions SET {', '.join(sets)} WHERE id = :id"), params)


def delete(conn: Connection, row_id: int) -> None:
    conn.execute(text("DELETE FROM console_sessions WHERE id = :id"), {"id": row_id})


def prune(conn: Connection, idle_seconds: int, max_seconds: int) -> int:
    """Delete expired sessions (run at each sign-in, so the table stays small)."""
    result = conn.execute(
        text(
            "DELETE FROM console_sessions WHERE last_seen_at < now() - make_interval(secs => :i)"
            " OR created_at < now() - make_interval(secs => :m)"
        ),
        {"i": idle_seconds, "m": max_seconds},
    )
    return int(result.rowcount)


def _json(data: dict[str, Any]) -> str:
    import json

    return json.dumps(data, separators=(",", ":"))
