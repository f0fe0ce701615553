"""What an evidence bundle is made of: one event in full, with its body as received (opened
where it is sealed at rest; None where retention, a redaction or an erasure removed it)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, text

from inbox.store.db import sealing
from inbox.store.reads import events as event_reads
from inbox.store.reads import ledger_reads, listing
from inbox.store.reads.detail import EventDetail


@dataclass(frozen=True, slots=True)
class EventEvidence:
    public_id: str
    detail: EventDetail  # steps, deliveries with attempts, audit
    body: bytes | None  # the stored bytes, opened; None once removed or erased


def event_evidence(conn: Connection, public_id: str) -> EventEvidence | None:
    detail = event_reads.event_detail(conn, public_id, None)
    if detail is None:
        return None
    row = conn.execute(
        text(
            f"SELECT e.body, e.key_id, {sealing.live('e')} AS key_live FROM events e"
            f" WHERE {ledger_reads.by_public_id('e')}"
        ),
        ledger_reads.bounds_params(public_id),
    ).one()
    opened = sealing.for_engine(conn.engine).open(
        conn, row.key_id, row.body, None, None, row.key_live
    )
    return EventEvidence(public_id, detail, opened.body)


def matching(conn: Connection, f: listing.Filter, limit: int) -> list[str]:
    """The public ids of the newest ``limit`` events ``f`` selects."""
    return [r.public_id for r in event_reads.list_events(conn, None, f, limit, None)]
