"""The reads behind ``inbox reconcile``: which key digests a source holds, its recent
events, and when it was last reconciled."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, text

from inbox.domain.records import SourceId, TenantId

# Digests looked up per statement, so a long provider list stays a few round trips.
CHUNK = 5000


@dataclass(frozen=True, slots=True)
class WindowEvent:
    public_id: str
    key_digest: bytes | None
    received_at: datetime


def window_start(conn: Connection, hours: int) -> datetime:
    """The database clock's now, less ``hours``."""
    start: datetime = conn.execute(
        text("SELECT now() - make_interval(hours => :h)"), {"h": hours}
    ).scalar_one()
    return start


def known_digests(
    conn: Connection, tenant_id: TenantId, source_id: SourceId, digests: Sequence[bytes]
) -> set[bytes]:
    """The subset of ``digests`` the source holds as a live key, whatever the event's age."""
    found: set[bytes] = set()
    for i in range(0, len(digests), CHUNK):
        rows = conn.execute(
            text(
                "SELECT key_digest FROM event_keys"  # the live keys, by their primary key
                " WHERE tenant_id = :t AND source_id = :s"
                " AND key_digest = ANY(CAST(:d AS bytea[]))"
            ),
            {"t": tenant_id, "s": source_id, "d": list(digests[i : i + CHUNK])},
        )
        found.update(bytes(r.key_digest) for r in rows)
    return found


def events_since(
    conn: Connection, tenant_id: TenantId, source_id: SourceId, since: datetime
) -> list[WindowEvent]:
    """The source's events received at or after ``since``, oldest first, with their keys."""
    rows = conn.execute(
        text(
            "SELECT public_id, key_digest, received_at FROM events"
            " WHERE tenant_id = :t AND source_id = :s AND received_at >= :since"
            " ORDER BY received_at, id"
        ),
        {"t": tenant_id, "s": source_id, "since": since},
    )
    return [
        WindowEvent(
            r.public_id,
            bytes(r.key_digest) if r.key_digest is not None else None,
            r.received_at,
        )
        for r in rows
    ]


# The latest reconcile run of a source (``inbox.store.write.reconciled.record_run``).
LAST_RUN = text(
    "SELECT max(at) FROM audit_log"
    " WHERE subject_kind = 'source' AND subject_id = :s AND action = 'reconcile_run'"
)


def last_run(conn: Connection, source_id: SourceId) -> datetime | None:
    """When the source was last reconciled (None: never)."""
    at: datetime | None = conn.execute(LAST_RUN, {"s": source_id}).scalar_one()
    return at
