"""The self-audit's repairs that write: a missing delivery written held, a stale lane block
removed (``inbox.services.audit`` proposes them, a second operator approves them).

Each statement re-checks, as it writes, that the repair is still due: a delivery is written
only while none with its webhook-id exists (on its event's day or later), and a lane block
is removed only while its event is still not quarantined. A repair approved after the
break healed itself therefore does nothing, and says so.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from dataclasses import dataclass

from sqlalchemy import Connection, text

from inbox.domain import ledger
from inbox.domain.invariants import HELD_DELIVERY_STATE
from inbox.domain.records import EventId, TenantId
from inbox.store.db import sealing
from inbox.store.write import intents, queue


@dataclass(frozen=True, slots=True)
class KeptIntent:
    """A callback intent and what its delivery would be written from."""

    public_id: str
    tenant_id: int
    endpoint_id: int
    endpoint_public_id: str | None  # None: the endpoint was deleted
    endpoint_enabled: bool | None
    endpoint_paused: bool | None
    event_id: int | None
    event_public_id: str | None
    step: str
    event_type: str
    replay: int
    created_at: dt.datetime
    kept: bool  # False: recorded before intents kept their delivery's envelope
    body: bytes | None  # the envelope in clear; None when not kept or erased

    @property
    def erased(self) -> bool:
        return self.kept and self.body is None

    def delivery_preview(self) -> dict[str, object]:
        """The delivery the repair writes, without its body (only the body's digest)."""
        body = self.body or b""
        return {
            "public_id": self.public_id,
            "state": HELD_DELIVERY_STATE,
            "endpoint_id": self.endpoint_id,
            "event_type": self.event_type,
            "replay": self.replay,
            "body_sha256": hashlib.sha256(body).hexdigest(),
            "body_bytes": len(body),
        }


_INTENT = text(
    """
    SELECT i.public_id, i.tenant_id, i.endpoint_id, ep.public_id AS endpoint_public_id,
           ep.enabled AS endpoint_enabled, ep.paused AS endpoint_paused, i.event_id,
           ev.public_id AS event_public_id, i.step, i.event_type, i.replay, i.created_at,
           i.body, i.key_id
      FROM callback_intents i
      LEFT JOIN endpoints ep ON ep.id = i.endpoint_id
      LEFT JOIN events ev ON ev.id = i.event_id
     WHERE i.public_id = :p
    """
)


def intent(conn: Connection, public_id: str) -> KeptIntent | None:
    """The intent ``public_id`` with its envelope opened (None: no such intent)."""
    row = conn.execute(_INTENT, {"p": public_id}).first()
    if row is None:
        return None
    body = None
    if row.body is not None:
        body = intents.kept_body(conn, row.key_id, row.public_id, bytes(row.body))
    return KeptIntent(
        public_id=row.public_id,
        tenant_id=int(row.tenant_id),
        endpoint_id=int(row.endpoint_id),
        endpoint_public_id=row.endpoint_public_id,
        endpoint_enabled=row.endpoint_enabled,
        endpoint_paused=row.endpoint_paused,
        event_id=None if row.event_id is None else int(row.event_id),
        event_public_id=row.event_public_id,
        step=row.step,
        event_type=row.event_type,
        replay=int(row.replay),
        created_at=row.created_at,
        kept=row.body is not None,
        body=body,
    )


# The delivery an intent is owed, written held, unless one with its webhook-id exists on
# its event's day or later (the step's own write refuses a second the same way).
_WRITE_HELD = text(
    f"""
    INSERT INTO deliveries (public_id, tenant_id, endpoint_id, event_id, event_type, body,
                            replay, trace_context, state)
    SELECT i.public_id, i.tenant_id, i.endpoint_id, i.event_id, i.event_type, :body,
           i.replay, i.trace_context, '{HELD_DELIVERY_STATE}'
      FROM callback_intents i JOIN endpoints ep ON ep.id = i.endpoint_id
     WHERE i.public_id = :p
       AND NOT EXISTS (SELECT FROM deliveries d WHERE d.public_id = i.public_id AND d.id >= :lo)
    RETURNING id, public_id, state
    """
)


def write_held(conn: Connection, kept: KeptIntent) -> int | None:
    """Write ``kept``'s delivery, held; its id, or None when one exists already."""
    if kept.body is None:
        return None
    lo = ledger.bounds(ledger.day_of(kept.event_id))[0] if kept.event_id is not None else 0
    # Sealed as the step seals a delivery's body: under its event's key, naming the key.
    body = sealing.for_engine(conn.engine).seal_tagged(
        conn, kept.event_id, kept.public_id, kept.body, sealing.DELIVERY
    )
    row = conn.execute(_WRITE_HELD, {"p": kept.public_id, "body": body, "lo": lo}).first()
    return None if row is None else int(row.id)


# A lane block whose event is not quarantined (or is gone) removed, as the trigger of
# migration 0024 removes it when its event leaves quarantine; while the event is
# quarantined again by then, it blocks its lane rightly and stays.
_RELEASE_LANE = text(
    """
    DELETE FROM lane_blocks b
     WHERE b.tenant_id = :t AND b.lane = decode(:lane, 'hex') AND b.event_id = :ev
       AND b.skipped_at IS NULL
       AND NOT EXISTS (SELECT 1 FROM events e WHERE e.id = b.event_id
                        AND e.state = 'quarantined')
    RETURNING b.event_id
    """
)


def release_lane(conn: Connection, tenant_id: TenantId, lane_hex: str, event_id: EventId) -> bool:
    """Remove the stale block of a lane; whether there was one to remove. The lane's next
    event, parked behind the block (migration 0031), is due from this commit on, as after
    a skip."""
    params = {"t": tenant_id, "lane": lane_hex, "ev": event_id}
    if conn.execute(_RELEASE_LANE, params).first() is None:
        return False
    # The lane's next event was parked behind the block: due from this commit on, as a
    # skip makes it (inbox.store.write.lanes).
    queue.advance(conn, [event_id])
    return True
