"""What an evidence bundle is made of: one event in full, with its body as stored."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, text

from inbox.store.reads import admin, ledger_reads
from inbox.store.reads.detail import EventDetail


@dataclass(frozen=True, slots=True)
class EventEvidence:
    public_id: str
    detail: EventDetail  # steps, deliveries with attempts, audit
    body: bytes | None  # the stored bytes, exactly; None once retention removed them


def event_evidence(conn: Connection, public_id: str) -> EventEvidence | None:
    detail = admin.event_detail(conn, public_id, None)
    if detail is None:
        return None
    body = conn.execute(
        text(f"SELECT e.body FROM events e WHERE {ledger_reads.by_public_id('e')}"),
        ledger_reads.bounds_params(public_id),
    ).scalar()
    return EventEvidence(public_id, detail, None if body is None else bytes(body))


def matching(conn: Connection, f: admin.Filter, limit: int) -> list[str]:
    """The public ids of the newest ``limit`` events ``f`` selects."""
    return [r.public_id for r in admin.list_events(conn, None, f, limit, None)]
