"""Discards of an endpoint's held deliveries, and the two-person rule's waiting requests
(``held_discards``; the rule is ``inbox.domain.held``)."""

from __future__ import annotations

import secrets
from typing import Any

from sqlalchemy import Connection, func, insert, select, update

from inbox.domain.held import Discard, DiscardStatus
from inbox.domain.records import Endpoint, EndpointId
from inbox.store.schema.tables import held_discards
from inbox.store.write import deliveries


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
    )


def awaiting(conn: Connection, ep: Endpoint, lock: bool = False) -> Discard | None:
    q = select(held_discards).where(
        held_discards.c.endpoint_id == ep.id, held_discards.c.status == "awaiting"
    )
    row = conn.execute(q.with_for_update() if lock else q).first()
    return None if row is None else _to_discard(ep, row)


def request(
    conn: Connection, ep: Endpoint, actor: str, reason: str, held: int, upto: int, now: bool
) -> Discard:
    """A discard of the held deliveries up to ``upto``: done at once when ``now``, else
    awaiting a second operator. Audited per delivery when done."""
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
        )
        .returning(held_discards)
    ).one()
    done = deliveries.discard_held(conn, EndpointId(ep.id), upto, actor, reason) if now else 0
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
    done = (
        deliveries.discard_held(conn, EndpointId(ep.id), row.upto_id, actor, row.reason)
        if approve
        else 0
    )
    return _to_discard(ep, row, done)
