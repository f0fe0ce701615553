"""What operators do to events: replays (audited), and the audit line of a preview.

What they see is the read model's (``inbox.store.reads.events``, ``.deliveries``, ``.detail``)."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Connection, text

from inbox.store.db.days import LOWER_FLOOR
from inbox.store.reads import ledger_reads

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
           -- erased (its key destroyed): nothing is left to run either
           AND NOT EXISTS (SELECT FROM data_keys k
                            WHERE k.id = e.key_id AND k.destroyed_at IS NOT NULL)
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
