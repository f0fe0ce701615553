"""Ordered lanes as the API, the console, the CLI and the metrics read them: the lanes
blocked by a quarantined event, with how many events wait behind each, and where one
event stands in its lane.

A lane is ``(tenant_id, events.ordering_key)``; its order is the event id (receipt
order). A blocked lane is a ``lane_blocks`` row not skipped; the events held behind it
are the lane's unfinished events with a larger id (received: none of them runs until the
block ends)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, text

from inbox.domain import ledger
from inbox.domain.records import EventId, TenantId
from inbox.store.reads.ledger_reads import since_event
from inbox.store.reads.scope import Scope, scoped

DAY = 1 << ledger.DAY_SHIFT  # one day of ledger ids

# The lane's unfinished events after the blocker: what waits behind it (the partial index
# ix_events_ordering covers exactly these rows).
_HELD = """
    (SELECT count(*) FROM events h
      WHERE h.tenant_id = b.tenant_id AND h.ordering_key = b.lane AND h.id > b.event_id
        AND h.state IN ('received', 'processing'))
"""

_BLOCKED = f"""
    SELECT e.public_id AS event, t.name AS tenant, s.name AS source, b.since,
           e.last_error_class AS error_class, e.last_error_message AS error_message,
           {_HELD} AS held, b.skip_requested_by, b.skip_reason
      FROM lane_blocks b
      JOIN events e ON e.id = b.event_id
      JOIN tenants t ON t.id = b.tenant_id
      JOIN sources s ON s.id = e.source_id
     WHERE b.skipped_at IS NULL
       AND {scoped("b.tenant_id")}
"""


@dataclass(frozen=True, slots=True)
class BlockedLane:
    """A lane held by its quarantined event: ``held`` events wait behind it."""

    event: str  # the blocker's public id
    tenant: str
    source: str
    since: datetime
    error_class: str | None
    error_message: str | None
    held: int
    skip_requested_by: str | None  # a skip that waits for a second operator
    skip_reason: str | None

    def public(self) -> dict[str, Any]:
        out = asdict(self)
        out["state"] = "blocked" if self.skip_requested_by is None else "skip requested"
        return out


def blocked(conn: Connection, scope: Scope, limit: int = 100) -> list[BlockedLane]:
    """The blocked lanes the scope sees (None: every tenant), longest blocked first."""
    rows = conn.execute(
        text(f"{_BLOCKED} ORDER BY b.since, b.event_id LIMIT :limit"),
        {"scope": scope, "limit": limit},
    )
    return [BlockedLane(**r._mapping) for r in rows]


@dataclass(frozen=True, slots=True)
class Block:
    """The one open block of an event (for a skip): its row's key and state."""

    tenant_id: TenantId
    lane: bytes
    event_id: EventId
    held: int
    skip_requested_by: str | None
    skip_reason: str | None


def block_of(conn: Connection, event_id: EventId, *, lock: bool = False) -> Block | None:
    """The open (not skipped) block this event holds, if any; ``lock``: FOR UPDATE of the
    block row, so two operators' skips are decided one after the other."""
    row = conn.execute(
        text(
            "SELECT b.tenant_id, b.lane, b.event_id, b.skip_requested_by, b.skip_reason"
            " FROM lane_blocks b WHERE b.event_id = :id AND b.skipped_at IS NULL"
            + (" FOR UPDATE" if lock else "")
        ),
        {"id": event_id},
    ).first()
    if row is None:
        return None
    held = conn.execute(
        text(
            "SELECT count(*) FROM events h WHERE h.tenant_id = :t AND h.ordering_key = :lane"
            " AND h.id > :id AND h.state IN ('received', 'processing')"
        ),
        {"t": row.tenant_id, "lane": row.lane, "id": row.event_id},
    ).scalar_one()
    return Block(
        TenantId(int(row.tenant_id)),
        bytes(row.lane),
        EventId(int(row.event_id)),
        int(held),
        row.skip_requested_by,
        row.skip_reason,
    )


@dataclass(frozen=True, slots=True)
class LaneState:
    """Where one event stands in its lane: the quarantined event it waits behind (its
    public id), and, when it blocks the lane itself, how many wait behind it."""

    held_behind: str | None
    blocking: int | None

    def public(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.held_behind is not None:
            out["held_behind"] = self.held_behind
            out["reason"] = f"held behind {self.held_behind}: quarantined, its lane waits for it"
        if self.blocking is not None:
            out["blocking"] = self.blocking
        return out


def lane_state(conn: Connection, event_id: EventId) -> LaneState | None:
    """None for an event without a lane, or one that neither waits nor blocks."""
    row = conn.execute(
        text(
            """
            SELECT (SELECT b.event_id FROM lane_blocks b
                     WHERE b.tenant_id = e.tenant_id AND b.lane = e.ordering_key
                       AND b.event_id < e.id AND b.skipped_at IS NULL
                       AND e.state IN ('received', 'processing')
                     ORDER BY b.event_id LIMIT 1) AS held_behind,
                   (SELECT 1 FROM lane_blocks b WHERE b.event_id = e.id
                       AND b.skipped_at IS NULL) AS blocks
              FROM events e
             WHERE e.id = :id AND e.id >= :lo AND e.id < :hi AND e.ordering_key IS NOT NULL
            """
        ),
        {"id": event_id, "lo": since_event(event_id), "hi": since_event(event_id) + DAY},
    ).first()
    if row is None or (row.held_behind is None and row.blocks is None):
        return None
    blocking = None
    if row.blocks is not None:
        block = block_of(conn, event_id)
        blocking = block.held if block is not None else None
    behind = None
    if row.held_behind is not None:
        # The blocker's public id, read within its own day: a join on the id alone would
        # plan every day's partition (tests/integration/test_partition_reads.py).
        blocker = EventId(int(row.held_behind))
        lo = since_event(blocker)
        behind = conn.execute(
            text("SELECT public_id FROM events WHERE id = :id AND id >= :lo AND id < :hi"),
            {"id": blocker, "lo": lo, "hi": lo + DAY},
        ).scalar()
    return LaneState(behind, blocking)


@dataclass(frozen=True, slots=True)
class LaneCount:
    """Per source: lanes blocked now, and the events held behind them."""

    tenant: str
    source: str
    lanes: int
    held: int


def blocked_counts(conn: Connection) -> list[LaneCount]:
    """What ``inbox_lanes_blocked`` and ``inbox_lane_held_events`` report, per source."""
    rows = conn.execute(
        text(
            f"""
            SELECT tenant, source, count(*) AS lanes, sum(held) AS held
              FROM ({_BLOCKED}) x GROUP BY tenant, source
            """
        ),
        {"scope": None},
    )
    return [LaneCount(r.tenant, r.source, int(r.lanes), int(r.held)) for r in rows]
