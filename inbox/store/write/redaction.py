"""Redaction: delete one event's raw body on request, keep its SHA-256 and every row.

The body goes the way retention removes it (``body`` = NULL, see
``inbox.store.write.retention``); the hash, headers, decision, steps, attempts,
deliveries and audit entries stay. A redaction is refused while an active legal hold
covers the event (``inbox.store.reads.holds.holding``) and while the event is not
finished (received or processing: the worker still needs its body). An event whose
body is gone already answers as done, and writes nothing. A redaction writes an
``audit_log`` row (who, why, the hash kept) in the same transaction.

The event row is locked (``FOR UPDATE``) before it is checked, so a replay or a worker
claiming it at the same time is serialised with the redaction; ``legal_holds`` is locked
in SHARE mode before the holds are read, so a hold placed at the same moment is too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, text

from inbox.domain import holds as rules
from inbox.domain.errors import BadRequest, NotFound
from inbox.domain.holds import EventHeld, EventUnfinished
from inbox.domain.records import TenantId
from inbox.domain.states import EventState
from inbox.store.reads import holds as holds_reads
from inbox.store.reads import ledger_reads

UNFINISHED = (EventState.RECEIVED.value, EventState.PROCESSING.value)


@dataclass(frozen=True)
class Redaction:
    event: str
    body_sha256: str
    bytes_removed: int
    already: bool  # the body was gone before this request (redacted or pruned)

    def public(self) -> dict[str, Any]:
        return {
            "id": self.event,
            "redacted": True,
            "already_redacted": self.already,
            "body_sha256": self.body_sha256,
            "bytes_removed": self.bytes_removed,
        }


def redact(
    conn: Connection, public_id: str, actor: str, reason: str, scope: TenantId | None = None
) -> Redaction:
    """Remove the raw body of event ``public_id`` (of tenant ``scope``; None: any tenant).

    Raises BadRequest (no reason, not an event id), NotFound, EventHeld (naming the
    holds) or EventUnfinished.
    """
    if not reason.strip() or len(reason) > rules.MAX_REASON:
        raise BadRequest(f"A redaction needs a reason (1-{rules.MAX_REASON} characters).")
    try:
        params = ledger_reads.bounds_params(public_id)
    except ValueError:
        raise BadRequest(f"{public_id!r} is not an event id.") from None
    ev = conn.execute(
        text(
            "SELECT e.id, e.state, encode(e.body_sha256, 'hex') AS sha256,"
            " octet_length(e.body) AS size FROM events e"
            f" WHERE {ledger_reads.by_public_id('e')}"
            " AND (CAST(:scope AS bigint) IS NULL OR e.tenant_id = :scope) FOR UPDATE"
        ),
        {**params, "scope": scope},
    ).first()
    if ev is None:
        raise NotFound(f"No event {public_id!r}.")
    if ev.size is None:
        return Redaction(public_id, ev.sha256, 0, already=True)
    # A hold being placed or released now (its INSERT/UPDATE takes ROW EXCLUSIVE) is either
    # committed before this reads the holds or waits for this redaction: the day drop does
    # the same (inbox.store.schema.partitions).
    conn.execute(text("LOCK TABLE legal_holds IN SHARE MODE"))
    held_by = holds_reads.holding(conn, ev.id)
    if held_by:
        raise EventHeld(
            f"Event {public_id} is under legal hold {', '.join(held_by)}: its body cannot be"
            " redacted until the hold is released.",
            holds=held_by,
        )
    if ev.state in UNFINISHED:
        raise EventUnfinished(
            f"Event {public_id} is {ev.state}: the worker still needs its body; redact it"
            " once it is completed, quarantined or filtered.",
            state=ev.state,
        )
    conn.execute(text("UPDATE events SET body = NULL WHERE id = :id"), {"id": ev.id})
    detail = {
        "public_id": public_id,
        "reason": reason,
        "body_sha256": ev.sha256,
        "bytes_removed": ev.size,
    }
    conn.execute(
        text(
            "INSERT INTO audit_log (actor, action, subject_kind, subject_id, detail)"
            " VALUES (:a, 'redacted', 'event', :id, CAST(:d AS jsonb))"
        ),
        {"a": actor, "id": ev.id, "d": json.dumps(detail, sort_keys=True)},
    )
    return Redaction(public_id, ev.sha256, int(ev.size), already=False)
