"""Skipping a quarantined event that blocks its lane (``inbox.domain.lanes``): audited,
with a reason, by two operators when more than the configured number wait behind it.

The event stays quarantined (an operator may still replay it later: it then runs as the
lane's earliest unfinished event). Replaying it instead needs nothing here: moving it out
of quarantine deletes its block in the same transaction (the trigger of migration 0024).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, text

from inbox.domain import lanes as rules
from inbox.domain.records import EventId
from inbox.store.reads.lanes import Block, block_of
from inbox.store.write import queue


@dataclass(frozen=True, slots=True)
class Skipped:
    """What a skip did: ``skipped`` (the lane moves on) or ``skip requested`` (it waits
    for a second operator); how many events wait behind the event."""

    event: str
    status: str
    held: int
    reason: str
    requested_by: str | None = None

    def public(self) -> dict[str, Any]:
        out = {"id": self.event, "status": self.status, "held": self.held, "reason": self.reason}
        if self.requested_by is not None:
            out["requested_by"] = self.requested_by
        return out


def _audit(conn: Connection, actor: str, action: str, block: Block, **detail: Any) -> None:
    conn.execute(
        text(
            "INSERT INTO audit_log (actor, action, subject_kind, subject_id, detail)"
            " VALUES (:a, :act, 'event', :id, CAST(:d AS jsonb))"
        ),
        {
            "a": actor,
            "act": action,
            "id": block.event_id,
            "d": json.dumps({"held": block.held, **detail}, sort_keys=True),
        },
    )


def skip(
    conn: Connection,
    event_id: EventId,
    public_id: str,
    actor: str,
    reason: str | None,
    approval_above: int,
) -> Skipped:
    """Let the lane move on past its quarantined event ``event_id`` (one operator), or ask
    for that (the first of two, when more than ``approval_above`` events wait behind it),
    or confirm another operator's request. Raises LaneNotBlocked, BadRequest (no reason)
    or Forbidden (the operator who asked confirms their own request)."""
    block = block_of(conn, event_id, lock=True)
    if block is None:
        raise rules.LaneNotBlocked()
    asked = block.skip_requested_by
    why = rules.check_reason(reason if asked is None else (reason or block.skip_reason))
    if not rules.check_skip(block.held, approval_above, asked, actor):
        conn.execute(
            text(
                "UPDATE lane_blocks SET skip_requested_by = :a, skip_requested_at = now(),"
                " skip_reason = :r WHERE event_id = :id AND skipped_at IS NULL"
            ),
            {"a": actor, "r": why, "id": event_id},
        )
        _audit(conn, actor, "lane_skip_requested", block, reason=why, public_id=public_id)
        return Skipped(public_id, "skip requested", block.held, why, actor)
    conn.execute(
        text(
            "UPDATE lane_blocks SET skipped_by = :a, skipped_at = now(),"
            " skip_reason = :r WHERE event_id = :id AND skipped_at IS NULL"
        ),
        {"a": actor, "r": why, "id": event_id},
    )
    # The lane's next event was parked behind the block (migration 0031): due from this
    # commit on (the caller rings the drain).
    queue.advance(conn, [event_id])
    extra = {"requested_by": asked} if asked is not None else {}
    _audit(conn, actor, "lane_skipped", block, reason=why, public_id=public_id, **extra)
    return Skipped(public_id, "skipped", block.held, why, asked)
