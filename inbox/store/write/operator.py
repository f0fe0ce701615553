"""What operators see and do: event listings, one event in full, replays (audited)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, text

from inbox.store.db.days import LOWER_FLOOR
from inbox.store.reads import ledger_reads
from inbox.store.reads.ledger_reads import EVENT_ROW, KEYS_JOIN


@dataclass(frozen=True)
class EventRow:
    id: int
    public_id: str
    tenant: str
    source: str
    event_type: str | None
    state: str
    attempts: int
    received_at: datetime
    finished_at: datetime | None
    outcome: str | None
    last_error_class: str | None


_LIST = """
SELECT e.id, e.public_id, t.name AS tenant, s.name AS source, e.event_type, e.state,
       e.attempts, e.received_at, e.finished_at, e.outcome, e.last_error_class
  FROM events e JOIN tenants t ON t.id = e.tenant_id JOIN sources s ON s.id = e.source_id
 WHERE (CAST(:state AS text) IS NULL OR e.state = :state)
   AND (CAST(:tenant_id AS bigint) IS NULL OR e.tenant_id = :tenant_id)
   AND (CAST(:source AS text) IS NULL OR s.name = :source)
   AND (CAST(:since AS timestamptz) IS NULL OR e.received_at >= :since)
   AND (CAST(:before_id AS bigint) IS NULL OR e.id < :before_id)
 ORDER BY e.id DESC
 LIMIT :limit
"""


def list_events(
    conn: Connection,
    state: str | None = None,
    tenant: str | None = None,
    source: str | None = None,
    since: datetime | None = None,
    limit: int = 50,
    before_id: int | None = None,
) -> list[EventRow]:
    rows = conn.execute(
        text(_LIST),
        {
            "state": state,
            "tenant_id": ledger_reads.tenant_id(conn, tenant),  # by id: see tenant_id
            "source": source,
            "since": since,
            "limit": limit,
            "before_id": before_id,
        },
    )
    return [EventRow(**r._mapping) for r in rows]


def event_detail(conn: Connection, public_id: str) -> dict[str, Any] | None:
    """Everything that happened to one event (keys and secrets are not stored at all)."""
    ev = conn.execute(
        text(
            f"""
            SELECT {EVENT_ROW}, t.name AS tenant, s.name AS source
              FROM events e JOIN tenants t ON t.id = e.tenant_id
              JOIN sources s ON s.id = e.source_id {KEYS_JOIN}
             WHERE {ledger_reads.by_public_id("e")}
            """
        ),
        ledger_reads.bounds_params(public_id),
    ).first()
    if ev is None:
        return None
    m = dict(ev._mapping)
    # The newer event by its id, a bound value: one partition is planned (a correlated
    # subquery planned every day's partition for one row).
    m["newer_event"] = (
        conn.execute(
            text("SELECT public_id FROM events WHERE id = :id"), {"id": ev.newer_event_id}
        ).scalar()
        if ev.newer_event_id is not None
        else None
    )
    steps = conn.execute(
        text(
            "SELECT name, result, attempt, replay, completed_at FROM steps WHERE event_id = :id"
            " ORDER BY completed_at, name"
        ),
        {"id": ev.id},
    )
    conflicts = conn.execute(
        text(
            "SELECT encode(other_body_sha256, 'hex') AS other_sha256, count, first_at, last_at"
            " FROM idempotency_conflicts WHERE event_id = :id"
        ),
        {"id": ev.id},
    )
    audit = conn.execute(
        text(
            "SELECT at, actor, action, detail FROM audit_log"
            " WHERE subject_kind = 'event' AND subject_id = :id ORDER BY id"
        ),
        {"id": ev.id},
    )
    body = m.pop("body")
    hidden_columns = (
        "key_digest",
        "key_expires_at",
        "business_key_digest",
        "ordering_key",
        "response_body",
    )
    for hidden in (*hidden_columns, "newer_event_id"):
        m.pop(hidden, None)
    m["body_sha256"] = bytes(m["body_sha256"]).hex()
    m["body"] = bytes(body).decode("utf-8", "replace") if body is not None else None
    m["steps"] = [dict(r._mapping) for r in steps]
    m["conflicts"] = [dict(r._mapping) for r in conflicts]
    m["audit"] = [dict(r._mapping) for r in audit]
    return m


# Only a quarantined or filtered event moves: two operators replaying the same event at once
# both run this UPDATE, the row lock serialises them, and the second finds it no
# longer quarantined (the outer WHERE is re-checked on the locked row). Completed
# steps are kept, so the playbook resumes. The replay number goes up by one; the
# attempts restart, and what they were is kept in the audit row.
_REPLAY = text(
    f"""
    WITH moved AS (
        UPDATE events e
           SET state = 'received', attempts = 0, available_at = now(), finished_at = NULL,
               last_error_class = NULL, last_error_message = NULL, replay = e.replay + 1
          FROM (SELECT id, attempts, last_error_class, state, filter_reason FROM events
                 WHERE public_id = ANY(CAST(:ids AS text[]))
                   AND id >= :lo AND id < :hi) AS before
         WHERE e.id = before.id AND e.state IN ('quarantined', 'filtered')
           AND e.body IS NOT NULL  -- past retention, nothing is left to run
        RETURNING e.id, e.public_id, e.replay, before.attempts, before.last_error_class,
                  before.state, before.filter_reason
    ), audited AS (
        INSERT INTO audit_log (actor, action, subject_kind, subject_id, detail)
        SELECT :actor, 'replay', 'event', id,
               jsonb_build_object('public_id', public_id, 'replay', replay,
                                  'attempts_before', attempts, 'error_before', last_error_class,
                                  'state_before', state)
               || jsonb_strip_nulls(jsonb_build_object('filter_reason', filter_reason))
               || CAST(:extra AS jsonb)
          FROM moved
    ), lowered AS (  -- the workers' claim looks no lower than the floor
        {LOWER_FLOOR}
    )
    SELECT public_id FROM moved
    """
)


def replay(
    conn: Connection, public_ids: list[str], actor: str, detail: dict[str, Any] | None = None
) -> list[str]:
    """Move quarantined or filtered events back to received; returns the ids actually
    moved. A filtered event then runs despite its source's filter.

    ``detail`` is added to each audit row (a bulk replay names its job and approver).
    """
    lo, hi = ledger_reads.span(public_ids)  # the days the ids name
    params = {
        "ids": public_ids,
        "lo": lo,
        "hi": hi,
        "actor": actor,
        "extra": json.dumps(detail or {}),
    }
    rows = conn.execute(_REPLAY, params)
    return [r.public_id for r in rows]


def audit_preview(conn: Connection, actor: str, detail: dict[str, Any]) -> None:
    """The one row a replay's preview writes: who looked, at what, and the totals."""
    conn.execute(
        text(
            "INSERT INTO audit_log (actor, action, subject_kind, subject_id, detail)"
            " VALUES (:a, 'replay_preview', :kind, :id, CAST(:d AS jsonb))"
        ),
        {
            "a": actor,
            "kind": "bulk_replay" if "bulk_replay_id" in detail else "events",
            "id": detail.get("bulk_replay_id"),
            "d": json.dumps(detail, sort_keys=True, default=str),
        },
    )
