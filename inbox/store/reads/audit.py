"""Who did what to one subject (an endpoint, a source), as the console shows it."""

from __future__ import annotations

from sqlalchemy import Connection, text

from inbox.store.reads.detail import AuditEntry
from inbox.store.reads.scope import as_rows


def audit_trail(conn: Connection, kind: str, subject_id: int, limit: int = 50) -> list[AuditEntry]:
    """Who did what to one subject (an endpoint, a source), newest first."""
    rows = conn.execute(
        text(
            "SELECT at, actor, action FROM audit_log WHERE subject_kind = :k AND subject_id = :id"
            " ORDER BY id DESC LIMIT :n"
        ),
        {"k": kind, "id": subject_id, "n": limit},
    )
    return as_rows(AuditEntry, rows)
