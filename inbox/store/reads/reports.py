"""Retention reports as the CLI exports them, oldest first."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, text


@dataclass(frozen=True, slots=True)
class StoredReport:
    public_id: str
    kind: str
    created_at: datetime
    report: bytes
    manifest: bytes | None
    signature: bytes | None


def listing(conn: Connection, kind: str | None = None, limit: int = 1000) -> list[StoredReport]:
    rows = conn.execute(
        text(
            "SELECT public_id, kind, created_at, report, manifest, signature"
            " FROM retention_reports WHERE CAST(:k AS text) IS NULL OR kind = :k"
            " ORDER BY id DESC LIMIT :n"
        ),
        {"k": kind, "n": limit},
    )
    return [
        StoredReport(
            r.public_id,
            r.kind,
            r.created_at,
            bytes(r.report),
            None if r.manifest is None else bytes(r.manifest),
            None if r.signature is None else bytes(r.signature),
        )
        for r in reversed(rows.all())
    ]
