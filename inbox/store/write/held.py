"""Held deliveries: an endpoint's backlog held while it is paused or disabled, released in
order, or discarded (each audited); the two-person rule's waiting requests
(``held_discards``; the rule is ``inbox.domain.held``)."""

from __future__ import annotations

import secrets
from typing import Any

from sqlalchemy import Connection, func, insert, select, text, update

from inbox.domain.held import Discard, DiscardStatus
from inbox.domain.records import Endpoint, EndpointId
from inbox.store.db.days import LOWER_FLOOR
from inbox.store.schema.tables import held_discards


def _to_discard(ep: Endpoint, r: Any, discarded: int = 0) -> Discard:
    return Discard(
        public_id=r.public_id,
        endpoint=ep.public_id,
        reason=r.reason,
        requested_by=r.requested_by,
        held=r.held,
        status=DiscardStatus(r.status),
        discarded=discarded,
        decided_by=r.decided_by,
        delete_endpoint=r.delete_endpoint,
    )


def awaiting(conn: Connection, ep: Endpoint, lock: bool = False) -> Discard | None:
    q = select(held_discards).where(
        held_discards.c.endpoint_id == ep.id, held_discards.c.status == "awaiting"
    )
    row = conn.execute(q.with_for_update() if lock else q).first()
    return None if row is None else _to_discard(ep, row)


def request(
    conn: Connection,
    ep: Endpoint,
    actor: str,
    reason: str,
    held: int,
    upto: int,
    now: bool,
    delete: bool = False,
) -> Discard:
    """A discard of the held deliveries up to ``upto``: done at once when ``now``, else
    awaiting a second operator. Audited per delivery when done. ``delete``: asked by a
    delete of the endpoint (approving it deletes the endpoint)."""
    status = DiscardStatus.DISCARDED if now else DiscardStatus.AWAITING
    row = conn.execute(
        insert(held_discards)
        .values(
            public_id="hd_" + secrets.token_hex(8),
            endpoint_id=ep.id,
            reason=reason,
            requested_by=actor,
            upto_id=upto,
            held=held,
            status=status.value,
            decided_by=actor if now else None,
            decided_at=func.now() if now else None,
            delete_endpoint=delete,
        )
        .returning(held_discards)
    ).one()
    done = discard_held(conn, EndpointId(ep.id), upto, actor, reason) if now else 0
    return _to_discard(ep, row, done)


def decide(conn: Connection, ep: Endpoint, actor: str, approve: bool) -> Discard | None:
    """Approve (discard the deliveries it covers that are still held) or withdraw the
    awaiting discard; None when none awaits."""
    row = conn.execute(
        select(held_discards)
        .where(held_discards.c.endpoint_id == ep.id, held_discards.c.status == "awaiting")
        .with_for_update()
    ).first()
    if row is None:
        return None
    status = DiscardStatus.DISCARDED if approve else DiscardStatus.WITHDRAWN
    row = conn.execute(
        update(held_discards)
        .where(held_discards.c.id == row.id)
        .values(status=status.value, decided_by=actor, decided_at=func.now())
        .returning(held_discards)
    ).one()
    done = discard_held(conn, EndpointId(ep.id), row.upto_id, actor, row.reason) if approve else 0
    return _to_discard(ep, row, done)


# An endpoint stops (paused or disabled): its due and scheduled deliveries are held.
# Those being sent finish first; a retry among them is held by ``finish_many``.
_HOLD = text("UPDATE deliveries SET state = 'held' WHERE endpoint_id = :e AND state = 'pending'")

# It sends again: its held deliveries are due now, all at one time, so the claim (by due
# time, then id) takes them in the order they were made. The couriers' claim looks no
# lower than the floor, which the sweep raised past them while they were held.
_RELEASE_HELD = text(
    f"""
    WITH moved AS (
        UPDATE deliveries SET state = 'pending', available_at = now()
         WHERE endpoint_id = :e AND state = 'held'
        RETURNING id
    ), lowered AS (
        {LOWER_FLOOR}
    )
    SELECT count(*) FROM moved
    """
)


def hold(conn: Connection, endpoint_id: EndpointId) -> int:
    """The endpoint's pending deliveries are held; how many."""
    return int(conn.execute(_HOLD, {"e": endpoint_id}).rowcount)


def release_held(conn: Connection, endpoint_id: EndpointId) -> int:
    """The endpoint's held deliveries are due now, in their original order; how many."""
    return int(conn.execute(_RELEASE_HELD, {"e": endpoint_id}).scalar_one())


def outstanding(conn: Connection, endpoint_id: EndpointId) -> dict[str, int]:
    """The endpoint's unfinished deliveries by state: held, pending, sending."""
    rows = conn.execute(
        text(
            "SELECT state, count(*) FROM deliveries WHERE endpoint_id = :e"
            " AND state IN ('held', 'pending', 'sending') GROUP BY state"
        ),
        {"e": endpoint_id},
    )
    found = {"held": 0, "pending": 0, "sending": 0}
    found.update({r[0]: int(r[1]) for r in rows})
    return found


def held_count(conn: Connection, endpoint_id: EndpointId, upto: int | None = None) -> int:
    return int(
        conn.execute(
            text(
                "SELECT count(*) FROM deliveries WHERE endpoint_id = :e AND state = 'held'"
                " AND (CAST(:upto AS bigint) IS NULL OR id <= :upto)"
            ),
            {"e": endpoint_id, "upto": upto},
        ).scalar_one()
    )


_DISCARD_HELD = text(
    """
    WITH moved AS (
        UPDATE deliveries
           SET state = 'failed', finished_at = now(), last_error = :why
         WHERE endpoint_id = :e AND state = 'held' AND id <= :upto
        RETURNING id, public_id
    ), audited AS (
        INSERT INTO audit_log (actor, action, subject_kind, subject_id, detail)
        SELECT :actor, 'discard', 'delivery', id,
               jsonb_build_object('public_id', public_id, 'reason', CAST(:reason AS text))
          FROM moved
    )
    SELECT count(*) FROM moved
    """
)


def discard_held(
    conn: Connection, endpoint_id: EndpointId, upto: int, actor: str, reason: str
) -> int:
    """Held deliveries (up to id ``upto``) become dead letters, each audited with the reason;
    a replay can still send one. How many."""
    params = {
        "e": endpoint_id,
        "upto": upto,
        "actor": actor,
        "reason": reason,
        "why": f"discarded by {actor}: {reason}",
    }
    return int(conn.execute(_DISCARD_HELD, params).scalar_one())


def last_id(conn: Connection, endpoint_id: EndpointId) -> int:
    """The endpoint's newest held delivery's id (0 when none)."""
    return int(
        conn.execute(
            text(
                "SELECT coalesce(max(id), 0) FROM deliveries"
                " WHERE endpoint_id = :e AND state = 'held'"
            ),
            {"e": endpoint_id},
        ).scalar_one()
    )
